#!/usr/bin/env bash
# BandMF against DP-SGD at equal epsilon: Opacus's MNIST recipe (configs/mnist-sgd.toml: the CNN,
# 240 examples per step on average, clip 1.5, lr 0.25, 3750 steps), sigma calibrated for
# (epsilon, 1e-5)-DP. bands = 1 is DP-SGD; with b bands the examples are split into b partitions
# taken in turn, each step samples its partition at rate 0.004 b (the same expected batch), and the
# run is accounted as 3750/b rounds of DP-SGD. Nothing is tuned for BandMF.
# Usage: experiments/bandmf/run.sh [RUNS]  (about a minute a run on 2 cores; 2 epsilons x 4 bands x RUNS)
# Writes runs/bandmf/, experiments/bandmf/results.jsonl, then the table and plot (report.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-3}"
cargo build --release -q -p dpgd-cli
bin="${CARGO_TARGET_DIR:-target}/release/dpgd"
# FACTORIZATION=optimized runs privacy.factorization = "optimized"; BANDS and EPSILONS pick the
# cells (default 1 2 4 8 and 1 4); TAG=x writes results-x.jsonl instead of results.jsonl (and no
# table).
factorization="${FACTORIZATION:-root}"
out=runs/bandmf-$factorization
results=experiments/bandmf/results${TAG:+-$TAG}.jsonl
: > "$results"
for eps in ${EPSILONS:-1 4}; do
  for bands in ${BANDS:-1 2 4 8}; do
    rate=$(python3 -c "print(0.004 * $bands)")
    for i in $(seq 1 "$runs"); do
      dir="$out/eps$eps-b$bands-$i"
      rm -rf "$dir"
      "$bin" train --quiet --config configs/mnist-sgd.toml --out "$dir" --unset privacy.sigma \
        --set privacy.epsilon=$eps --set privacy.method=bandmf --set privacy.bands=$bands \
        --set privacy.sample_rate=$rate --set privacy.factorization=$factorization --set train.eval_every=3750 \
        > /dev/null
      jq -c --arg eps "$eps" --arg bands "$bands" --arg run "$i" --arg commit "$(git rev-parse --short HEAD)" \
        --slurpfile p "$dir/publishable/privacy.json" \
        '{epsilon_target: ($eps | tonumber), bands: ($bands | tonumber), run: ($run | tonumber), commit: $commit,
          test_accuracy, epsilon, sigma: $p[0].accounting.training.sigma}' \
        "$dir/publishable/result.json" >> "$results"
      echo "epsilon $eps, $bands bands, run $i: $(tail -1 "$results")"
    done
  done
done
if [ -z "${TAG:-}" ]; then python3 experiments/bandmf/report.py; fi
