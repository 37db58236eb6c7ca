#!/usr/bin/env bash
# BandMF on the accuracy frontier's recipe (configs/best-mnist.toml: scattering features, a linear
# model, batches of 4096 on average, momentum 0.9, 586 steps), sigma calibrated for (epsilon, 1e-5)
# at epsilon = 1 and 3, b = 1 (DP-SGD), 2 and 4 bands at the same expected batch; RUNS private runs
# each. Nothing is tuned for BandMF. Usage: [DATASET=fashion-mnist] experiments/bandmf/frontier.sh [RUNS]
# (about 20 s a run on 2 cores once the features are cached; DATASET=fashion-mnist runs
# configs/best-fashion-mnist.toml instead). Writes runs/bandmf-frontier/ and frontier.jsonl
# (frontier-fashion-mnist.jsonl).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-2}"
cargo build --release -q -p dpgd-cli
bin="${CARGO_TARGET_DIR:-target}/release/dpgd"
dataset="${DATASET:-mnist}"
case "$dataset" in
  mnist) results=experiments/bandmf/frontier.jsonl ;;
  fashion-mnist) results=experiments/bandmf/frontier-fashion-mnist.jsonl ;;
  *) echo "DATASET=$dataset: use mnist or fashion-mnist" >&2; exit 2 ;;
esac
: > "$results"
for eps in 1 3; do
  for bands in 1 2 4; do
    rate=$(python3 -c "print(round(0.068267 * $bands, 6))")
    for i in $(seq 1 "$runs"); do
      dir="runs/bandmf-frontier/$dataset-eps$eps-b$bands-$i"
      rm -rf "$dir"
      "$bin" train --quiet --config "configs/best-$dataset.toml" --out "$dir" --set privacy.epsilon=$eps \
        --set privacy.method=bandmf --set privacy.bands=$bands --set privacy.sample_rate=$rate > /dev/null
      jq -c --arg eps "$eps" --arg bands "$bands" --arg run "$i" --arg commit "$(git rev-parse --short HEAD)" \
        '{epsilon_target: ($eps | tonumber), bands: ($bands | tonumber), run: ($run | tonumber), commit: $commit,
          test_accuracy, epsilon}' "$dir/publishable/result.json" >> "$results"
      echo "epsilon $eps, $bands bands, run $i: $(tail -1 "$results")"
    done
  done
done
