#!/usr/bin/env bash
# One full private-GD step over MNIST with the Opacus CNN: dpgd against the peers
# (Opacus hooks, torch.func vmap) measured back to back on this machine, plus dpgd's peak
# memory at 10k / 30k / 60k examples. Prints a table of medians and ratios and writes the
# raw JSON to experiments/speed/results/.
#
#   experiments/speed/run.sh            # everything (installs the peers once, ~2 min, ~6 GB)
#   PEERS=0 experiments/speed/run.sh    # dpgd only
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=experiments/speed/results
mkdir -p "$OUT"
REPS=${REPS:-3}
cargo build --release --quiet
DPGD=(cargo run --release --quiet --)
"${DPGD[@]}" data fetch mnist > /dev/null
for n in 10000 30000 60000; do
  echo "dpgd full step, $n examples ..." >&2
  "${DPGD[@]}" bench-step --examples "$n" --reps "$REPS" > "$OUT/dpgd-$n.json"
done
for model in mlp logistic; do
  "${DPGD[@]}" bench-step --examples 60000 --reps "$REPS" --model "$model" > "$OUT/dpgd-$model.json"
done
if [ "${PEERS:-1}" = 1 ]; then
  PY=${PEERS_VENV:-$HOME/.cache/peers-venv}/bin/python
  [ -x "$PY" ] || ../shared/peers/install.sh
  export MNIST_DIR=${MNIST_DIR:-$PWD/datasets/mnist}
  echo "opacus full step (chunk 256) ..." >&2
  "$PY" ../shared/peers/bench_torch.py --mode fullstep --method opacus --chunk 256 --warmup 1 --reps "$REPS" --out "$OUT/opacus.json" >&2
  echo "torch.func full step (chunk 1024) ..." >&2
  "$PY" ../shared/peers/bench_torch.py --mode fullstep --method func --chunk 1024 --warmup 1 --reps "$REPS" --out "$OUT/func.json" >&2
  echo "pytorch non-private batched gradient ..." >&2
  "$PY" ../shared/peers/bench_torch.py --mode plain --batches 1024 --reps 7 --out "$OUT/plain.json" >&2
fi
python3 experiments/speed/report.py "$OUT"
