#!/usr/bin/env bash
# BandMF at a private search's candidate epsilon: MNIST's frontier recipe (configs/best-mnist.toml)
# at epsilon = 0.726 (what each candidate of experiments/frontier-private-search gets of a total
# epsilon of 1), its best grid point (lr 2, 293 steps), on the 55,000 examples a search trains on
# (the first 55,000 here), DP-SGD (b = 1) against BandMF with the optimised C at b = 2 and 4 at the
# same expected batch; RUNS private runs each. Usage: experiments/bandmf/candidate.sh [RUNS]
# (about 15 s a run on 2 cores once the features are cached). Writes candidate-eps0.726.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-5}"
cargo build --release -q -p dpgd-cli
bin="${CARGO_TARGET_DIR:-target}/release/dpgd"
out=experiments/bandmf/candidate-eps0.726.jsonl
: > "$out"
for run in $(seq 1 "$runs"); do
  for bands in 1 2 4; do
    rate=$(python3 -c "print(round(0.068267 * $bands, 6))")
    extra=()
    if [ "$bands" -gt 1 ]; then extra=(--set privacy.factorization=optimized); fi
    dir="runs/bandmf-candidate/b$bands-$run"
    rm -rf "$dir"
    "$bin" train --quiet --config configs/best-mnist.toml --out "$dir" --set privacy.epsilon=0.726 --set train.lr=2.0 \
      --set privacy.worst_case_steps=293 --set data.train_subset=55000 --set train.eval_every=0 \
      --set privacy.method=bandmf --set privacy.bands=$bands --set privacy.sample_rate=$rate "${extra[@]}" > /dev/null
    jq -c --arg b "$bands" --arg r "$run" '{bands: ($b | tonumber), run: ($r | tonumber), test_accuracy, epsilon}' \
      "$dir/publishable/result.json" >> "$out"
    tail -1 "$out"
  done
done
