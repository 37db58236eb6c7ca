#!/usr/bin/env bash
# The full private step on a larger machine (run by hand where one is available; no network
# needed there): dpgd's fast engine at 1-16 threads, the burn engine (flex) and Opacus on the CPU
# at all threads, and Opacus on a CUDA GPU if there is one. One JSON object per line on stdout.
#
#   DPGD=path/to/dpgd PEERS_DIR=../shared/peers MNIST_DIR=datasets/mnist experiments/speed/many_cores.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
DPGD=${DPGD:-target/release/dpgd}
PY=${PYTHON:-python3}
REPS=${REPS:-3}
export MNIST_DIR=${MNIST_DIR:-datasets/mnist}
export PEERS_DIR=${PEERS_DIR:-../shared/peers}
CORES=$(nproc)
echo "{\"machine\": \"$(lscpu | sed -n 's/^Model name: *//p')\", \"cores\": $CORES}"
for t in 1 2 4 8 16 32 64; do
  [ "$t" -le "$CORES" ] || break
  "$DPGD" bench-step --examples 60000 --reps "$REPS" --threads "$t" 2>/dev/null
  echo
done
"$DPGD" bench-step --engine burn --chunk 64 --examples 60000 --reps "$REPS" --threads "$CORES" 2>/dev/null
echo
"$PY" "$PEERS_DIR/bench_torch.py" --mode fullstep --method opacus --chunk 256 --threads "$CORES" --warmup 1 --reps "$REPS" --out /tmp/opacus-cpu.json >&2 \
  && cat /tmp/opacus-cpu.json | "$PY" -c "import json,sys; print(json.dumps(json.load(sys.stdin)))"
if "$PY" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  for chunk in 256 1024 4096; do
    "$PY" experiments/speed/gpu_opacus.py --chunk "$chunk" --reps "$REPS" 2>/dev/null | tail -1
  done
fi
