#!/usr/bin/env bash
# The burn engine's full private step on the Opacus CNN (chunk 64, 10,000 MNIST examples, three
# timed steps after a warm-up) with two builds of `dpgd` alternating, ROUNDS rounds: $BEFORE
# (max pooling's arg-max by output rows) and $AFTER (at stride 1, by passes over each plane
# flattened). Build each with `cargo build --release -p dpgd-cli` at its commit and copy it.
#   BEFORE=/tmp/dpgd-before AFTER=/tmp/dpgd-after [ROUNDS=3] experiments/speed/results/2026-12-06-burn-pool/run.sh
set -euo pipefail
out=experiments/speed/results/2026-12-06-burn-pool
data=${DPGD_DATASETS:-../shared/datasets}/mnist
: "${BEFORE:?}" "${AFTER:?}"
: > "$out/steps.jsonl"
for round in $(seq 1 "${ROUNDS:-3}"); do
  for build in before after; do
    bin=$BEFORE; [ "$build" = after ] && bin=$AFTER
    "$bin" bench-step --engine burn --chunk 64 --examples 10000 --reps 3 --data "$data" \
      | jq -c --arg build "$build" --arg round "$round" '{build: $build, round: ($round | tonumber), step_s, peak_rss_mib}' \
      >> "$out/steps.jsonl"
    tail -1 "$out/steps.jsonl"
  done
done
