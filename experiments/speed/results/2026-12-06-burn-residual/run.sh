#!/usr/bin/env bash
# The residual GroupNorm model (configs/mnist-residual.toml) on the burn engine against Opacus 1.6
# on the same model (experiments/speed/residual_opacus.py), ROUNDS rounds back to back, each
# round in the order Opacus, $BEFORE, $AFTER: one full private step over 60,000 MNIST examples,
# chunk 64 for dpgd (256 for Opacus, its best on this machine), three timed steps after a warm-up.
# Then the Opacus CNN once with each build, to check it did not slow down. Build each binary with
# `cargo build --release -p dpgd-cli` at its commit and copy it:
#   BEFORE=/tmp/dpgd-main AFTER=/tmp/dpgd-new ROUNDS=3 experiments/speed/results/2026-12-06-burn-residual/run.sh
# Writes one JSON line per measurement to results.jsonl (about 2.5 min a round on 2 cores).
set -euo pipefail
out=experiments/speed/results/2026-12-06-burn-residual/results.jsonl
data=${DPGD_DATASETS:-../shared/datasets}/mnist
py=${PEERS_VENV:-$HOME/.cache/peers-venv}/bin/python
: "${BEFORE:?}" "${AFTER:?}"
rounds=${ROUNDS:-3}
: > "$out"
dpgd() { # round model build args...
  local bin=$BEFORE; [ "$3" = after ] && bin=$AFTER
  "$bin" bench-step --engine burn --chunk 64 --examples 60000 --reps 3 --data "$data" "${@:4}" 2>/dev/null |
    jq -c --arg r "$1" --arg m "$2" --arg b "$3" '{round: ($r | tonumber), model: $m, run: $b, step_s}' >> "$out"
  tail -1 "$out"
}
for round in $(seq 1 "$rounds"); do
  tmp=$(mktemp)
  MNIST_DIR=$data $py experiments/speed/residual_opacus.py --reps 3 --out "$tmp" > /dev/null 2>&1
  jq -c --arg r "$round" '{round: ($r | tonumber), model: "residual", run: "opacus", step_s: .results.step_s}' "$tmp" >> "$out"
  rm -f "$tmp"
  tail -1 "$out"
  dpgd "$round" residual before --model-config configs/mnist-residual.toml
  dpgd "$round" residual after --model-config configs/mnist-residual.toml
done
dpgd 1 cnn before
dpgd 1 cnn after
