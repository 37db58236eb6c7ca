#!/usr/bin/env bash
# BandMF's step against DP-SGD's at equal batch (240 expected examples a step, the Opacus CNN on
# MNIST, the fast engine): configs/mnist-sgd.toml (rate 0.004) against configs/mnist-bandmf.toml
# (b = 4 partitions of 15,000, each Poisson-sampled at 0.016) and the same with b = 16 (rate
# 0.064). The only per-step difference is the noise: BandMF's combines the fresh Gaussian draw
# with the b - 1 noise vectors before it. STEPS steps of each, ROUNDS rounds alternating the three,
# no evaluation; each step's time is read from the run's confidential step records.
# Run from the repository root with a release build:
#   [ROUNDS=3] [STEPS=300] experiments/speed/results/2026-12-06-bandmf-cost/run.sh
#   python3 experiments/speed/results/2026-12-06-bandmf-cost/report.py
set -euo pipefail
out=experiments/speed/results/2026-12-06-bandmf-cost
bin=${CARGO_TARGET_DIR:-target}/release/dpgd
export DPGD_DATASETS=${DPGD_DATASETS:-$(realpath ../shared/datasets)}
steps=${STEPS:-300}
: > "$out/steps.jsonl"
for round in $(seq 1 "${ROUNDS:-3}"); do
  for cell in sgd bandmf-b4 bandmf-b16; do
    case $cell in
      sgd) args=(--config configs/mnist-sgd.toml) ;;
      bandmf-b4) args=(--config configs/mnist-bandmf.toml) ;;
      bandmf-b16) args=(--config configs/mnist-bandmf.toml --set privacy.bands=16 --set privacy.sample_rate=0.064) ;;
    esac
    dir=runs/bandmf-cost/$cell-$round
    rm -rf "$dir"
    "$bin" train --quiet "${args[@]}" --out "$dir" --set privacy.worst_case_steps="$steps" --set train.eval_every=0 \
      --set train.seed=1 > /dev/null
    jq -c --arg cell "$cell" --arg round "$round" '{cell: $cell, round: ($round | tonumber), step, seconds, active_exact}' \
      "$dir/confidential/steps.jsonl" >> "$out/steps.jsonl"
    echo "$cell, round $round: $(jq -s 'map(.seconds) | add' "$dir/confidential/steps.jsonl") s for $steps steps"
  done
done
