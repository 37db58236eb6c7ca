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
# One thread, for the fast engine's scaling and its rate against one core's peak.
echo "dpgd full step, 60000 examples, 1 thread ..." >&2
"${DPGD[@]}" bench-step --examples 60000 --reps "$REPS" --threads 1 > "$OUT/dpgd-60000-t1.json"
# The burn engine (the same Opacus CNN as burn modules of dpgd::nn layers, on flex): 10k and 60k
# examples, for its time and to show its memory does not grow with the dataset; chunk 64 (64 and
# 128 measured fastest of 32-1024 here, 256 about 15 % slower).
for n in 10000 60000; do
  echo "dpgd burn engine full step, $n examples ..." >&2
  "${DPGD[@]}" bench-step --engine burn --chunk 64 --examples "$n" --reps "$REPS" > "$OUT/dpgd-burn-$n.json"
done
# Its generic fallback (one backward per example, for models of any burn layers), on 4,096
# examples: the table scales its time to 60,000.
echo "dpgd burn engine fallback, 4096 examples ..." >&2
"${DPGD[@]}" bench-step --engine burn-fallback --chunk 64 --examples 4096 --reps "$REPS" > "$OUT/dpgd-burn-fallback-4096.json"
# A model the fast engine cannot express (examples/custom_model.rs: conv + GroupNorm + residual):
# three full private steps of the example, timed by the run itself (confidential/steps.jsonl).
cargo build --release --quiet --example custom_model
run="$(mktemp -d)"
cargo run --release --quiet --example custom_model -- --worst-case-steps 3 --max-steps 3 --out "$run/run" > /dev/null
python3 - "$run/run/confidential/steps.jsonl" > "$OUT/dpgd-residual.json" <<'PY'
import json, statistics, sys
s = [json.loads(l)["seconds"] for l in open(sys.argv[1])]
print(json.dumps({"model": "residual-groupnorm", "engine": "burn", "device": "flex", "chunk": 64, "examples": 60000,
                  "step_s": {"median": statistics.median(s), "min": min(s), "max": max(s), "n": len(s)}}))
PY
rm -rf "$run"
for model in mlp logistic; do
  "${DPGD[@]}" bench-step --examples 60000 --reps "$REPS" --model "$model" > "$OUT/dpgd-$model.json"
done
if [ "${PEERS:-1}" = 1 ]; then
  PY=${PEERS_VENV:-$HOME/.cache/peers-venv}/bin/python
  [ -x "$PY" ] || ../shared/peers/install.sh
  export MNIST_DIR=${MNIST_DIR:-$PWD/datasets/mnist}
  echo "opacus full step (chunk 256) ..." >&2
  "$PY" ../shared/peers/bench_torch.py --mode fullstep --method opacus --chunk 256 --warmup 1 --reps "$REPS" --out "$OUT/opacus.json" >&2
  echo "opacus full step of the residual GroupNorm model (chunk 256) ..." >&2
  "$PY" experiments/speed/residual_opacus.py --reps "$REPS" --out "$OUT/opacus-residual.json" >&2
  echo "torch.func full step (chunk 1024) ..." >&2
  "$PY" ../shared/peers/bench_torch.py --mode fullstep --method func --chunk 1024 --warmup 1 --reps "$REPS" --out "$OUT/func.json" >&2
  echo "pytorch non-private batched gradient ..." >&2
  "$PY" ../shared/peers/bench_torch.py --mode plain --batches 1024 --reps 7 --out "$OUT/plain.json" >&2
fi
python3 experiments/speed/report.py "$OUT"
