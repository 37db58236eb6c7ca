#!/usr/bin/env bash
# The residual GroupNorm model (examples/custom_model.rs's network; configs/mnist-residual.toml
# writes it as a layer list with `add`) over 60,000 MNIST examples, back to back on one machine:
# Opacus 1.6 (experiments/speed/residual_opacus.py) before and after, the fast engine (its
# group_norm, avg_pool2d and add rules) and the burn engine (chunk 64) on the same model; then
# where the fast engine's time goes, layer by layer.
# Run from the repository root with a release build: experiments/speed/results/2026-12-06-residual/run.sh
set -euo pipefail
out=experiments/speed/results/2026-12-06-residual
bin=${CARGO_TARGET_DIR:-target}/release/dpgd
data=${DPGD_DATASETS:-../shared/datasets}/mnist
py=${PEERS_VENV:-$HOME/.cache/peers-venv}/bin/python
model=configs/mnist-residual.toml
MNIST_DIR=$data $py experiments/speed/residual_opacus.py --reps 3 --out "$out/opacus-before.json" >&2
"$bin" bench-step --model-config $model --engine fast --examples 60000 --reps 3 --data "$data" > "$out/dpgd-fast.json"
"$bin" bench-step --model-config $model --engine burn --chunk 64 --examples 60000 --reps 3 --data "$data" > "$out/dpgd-burn.json"
MNIST_DIR=$data $py experiments/speed/residual_opacus.py --reps 3 --out "$out/opacus-after.json" >&2
"$bin" bench-step --model-config $model --engine fast --examples 10000 --reps 1 --layers --data "$data" 2> "$out/layers.txt" > /dev/null
