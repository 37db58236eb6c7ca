#!/usr/bin/env bash
# The Opacus CNN's full private step over 60,000 MNIST examples, back to back on one machine:
# as a user's sequential module on the fast engine (FastModel), on the burn engine (chunk 64),
# on the fast engine as the config's model, and Opacus 1.6 (../shared/peers) before and after.
# Run from the repository root with a release build: experiments/speed/results/2026-12-06-sequential/run.sh
set -euo pipefail
out=experiments/speed/results/2026-12-06-sequential
bin=${CARGO_TARGET_DIR:-target}/release/dpgd
data=${DPGD_DATASETS:-../shared/datasets}/mnist
py=${PEERS_VENV:-$HOME/.cache/peers-venv}/bin/python
MNIST_DIR=$data $py ../shared/peers/bench_torch.py --mode fullstep --method opacus --chunk 256 --warmup 1 --reps 3 2>&1 | tail -1 > "$out/opacus-before.txt"
"$bin" bench-step --engine sequential --examples 60000 --reps 3 --data "$data" > "$out/dpgd-sequential.json"
"$bin" bench-step --engine burn --chunk 64 --examples 60000 --reps 3 --data "$data" > "$out/dpgd-burn.json"
"$bin" bench-step --engine fast --examples 60000 --reps 3 --data "$data" > "$out/dpgd-fast.json"
MNIST_DIR=$data $py ../shared/peers/bench_torch.py --mode fullstep --method opacus --chunk 256 --warmup 1 --reps 3 2>&1 | tail -1 > "$out/opacus-after.txt"
