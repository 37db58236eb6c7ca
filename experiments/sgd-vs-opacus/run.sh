#!/usr/bin/env bash
# DP-SGD with Opacus's MNIST recipe (q = 0.004, sigma = 1.3, clip 1.5, lr 0.25, 15 epochs) on
# dpgd and on Opacus 1.6, back to back on this machine, RUNS times each: test accuracy against
# training time, and the total wall time of each run. Writes results/ and prints the table.
#
#     experiments/sgd-vs-opacus/run.sh [RUNS]        # default 3; ~5 minutes per pair on 2 cores
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-3}
PY=${PEERS_VENV:-$HOME/.cache/peers-venv}/bin/python
OUT=experiments/sgd-vs-opacus/results
mkdir -p "$OUT"
cargo build --release -q
DPGD=${CARGO_TARGET_DIR:-target}/release/dpgd
for i in $(seq 1 "$RUNS"); do
  rm -rf "$OUT/dpgd-$i"
  start=$(date +%s.%N)
  # Each run its own initialisation, as each Opacus run draws one.
  "$DPGD" train --config configs/mnist-sgd.toml --set model.init_seed="$i" --out "$OUT/dpgd-$i" --quiet > /dev/null
  echo "$(date +%s.%N) - $start" | bc > "$OUT/dpgd-$i.wall"
  start=$(date +%s.%N)
  MNIST_DIR=${DPGD_DATASETS:-../shared/datasets}/mnist "$PY" experiments/sgd-vs-opacus/opacus_mnist.py \
    --out "$OUT/opacus-$i.csv" > "$OUT/opacus-$i.log"
  echo "$(date +%s.%N) - $start" | bc > "$OUT/opacus-$i.wall"
done
"$PY" experiments/sgd-vs-opacus/report.py "$OUT"   # the peers venv (matplotlib for the plot)
