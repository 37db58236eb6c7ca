#!/usr/bin/env bash
# An MLP with LayerNorm (model.toml) on the fast engine, which now has layer_norm's rule, against
# the burn engine that trained it before: one full private step over 60,000 MNIST examples
# (three timed steps after a warm-up), the two engines alternating, ROUNDS rounds.
#   [ROUNDS=2] experiments/speed/results/2026-12-06-layer-norm/run.sh
set -euo pipefail
out=experiments/speed/results/2026-12-06-layer-norm
bin=${CARGO_TARGET_DIR:-target}/release/dpgd
data=${DPGD_DATASETS:-../shared/datasets}/mnist
: > "$out/steps.jsonl"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for engine in fast burn; do
    chunk=4; [ "$engine" = burn ] && chunk=64
    "$bin" bench-step --engine "$engine" --chunk "$chunk" --model-config "$out/model.toml" --examples 60000 --reps 3 \
      --data "$data" | jq -c --arg round "$round" '{engine, round: ($round | tonumber), chunk, step_s, peak_rss_mib}' \
      >> "$out/steps.jsonl"
    tail -1 "$out/steps.jsonl"
  done
done
