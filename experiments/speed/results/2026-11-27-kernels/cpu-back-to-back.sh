#!/usr/bin/env bash
# Back to back on one machine, two rounds: the burn engine on flex for two dpgd builds ($BEFORE
# and $AFTER, each a `dpgd` binary) and Opacus 1.6 on the CPU, the Opacus CNN's full private step
# over 60,000 MNIST examples. Run from the repository root:
#   BEFORE=/tmp/dpgd-before AFTER=target/release/dpgd experiments/speed/results/2026-11-27-kernels/cpu-back-to-back.sh
set -u
PY=${PEERS_VENV:-$HOME/.cache/peers-venv}/bin/python
DATA=${DPGD_DATASETS:-../shared/datasets}/mnist
step() { "$1" bench-step --engine "$2" --chunk 64 --threads 2 --examples 60000 --reps 2 --data "$DATA" 2>/dev/null | tail -1; }
for r in 1 2; do
  echo "== round $r before burn"; step "$BEFORE" burn
  echo "== round $r after burn"; step "$AFTER" burn
  echo "== round $r after burn-device-rows"; step "$AFTER" burn-device-rows
  echo "== round $r opacus"
  "$PY" ../shared/peers/bench_torch.py --mode fullstep --method opacus --chunk 256 --warmup 1 --reps 2 --out "opacus-$r.json" > /dev/null 2>&1
done
