#!/usr/bin/env bash
# The burn engine's full private step over 60,000 MNIST examples (chunk 64, three timed steps
# after a warm-up) with two builds of `dpgd`, $BEFORE (burn's convolution and a gathered max
# pooling) and $AFTER (dpgd's host operations on flex: the shared convolution kernels with their
# own backward, the per-example conv rows, max pooling with its own backward), on two models:
# the Opacus CNN (against Opacus 1.6, ../shared/peers) and the residual GroupNorm model
# (configs/mnist-residual.toml, against experiments/speed/residual_opacus.py). Opacus runs first
# and last on each model, back to back. Build each binary with `cargo build --release -p dpgd-cli`
# at its commit and copy it:
#   BEFORE=/tmp/dpgd-before AFTER=/tmp/dpgd-after experiments/speed/results/2026-12-06-host-ops/run.sh
set -euo pipefail
out=experiments/speed/results/2026-12-06-host-ops
data=${DPGD_DATASETS:-../shared/datasets}/mnist
py=${PEERS_VENV:-$HOME/.cache/peers-venv}/bin/python
: "${BEFORE:?}" "${AFTER:?}"
burn() { # build model-args... > json
  local bin=$BEFORE; [ "$1" = after ] && bin=$AFTER
  "$bin" bench-step --engine burn --chunk 64 --examples 60000 --reps 3 --data "$data" "${@:2}" 2>/dev/null
}
cnn_opacus() { MNIST_DIR=$data $py ../shared/peers/bench_torch.py --mode fullstep --method opacus --chunk 256 --warmup 1 --reps 3 2>&1 | tail -1; }
cnn_opacus > "$out/cnn-opacus-before.txt"
burn before > "$out/cnn-burn-before.json"
burn after > "$out/cnn-burn-after.json"
cnn_opacus > "$out/cnn-opacus-after.txt"
model=configs/mnist-residual.toml
MNIST_DIR=$data $py experiments/speed/residual_opacus.py --reps 3 --out "$out/residual-opacus-before.json" >&2
burn before --model-config $model > "$out/residual-burn-before.json"
burn after --model-config $model > "$out/residual-burn-after.json"
MNIST_DIR=$data $py experiments/speed/residual_opacus.py --reps 3 --out "$out/residual-opacus-after.json" >&2
