#!/usr/bin/env bash
# BandMF with individual filtering (privacy.method = "bandmf-filtered") against private GD on the
# accuracy frontier's GD recipe (configs/best-<dataset>.toml's scattering features and linear model,
# with the frontier's GD settings: k = 100 full participations' budget, clip 1, lr 0.8, momentum
# 0.9, gaussian-exact), sigma calibrated for (1, 1e-5). The examples are split into b partitions
# taken in turn; a step sums every active example of its partition, BandMF's noise added.
#   - b = 1, 2, 4 with k*b steps: every example takes part k times, so no budget can run out (the
#     filter never drops anyone): the correlated noise alone against plain GD (b = 1 is plain GD).
#   - b = 4 with 2*k*b steps: examples with small gradients keep training once others are dropped
#     (the filter binds), the last model returned, as the frontier's filtered GD runs 2k steps.
#   - b = 2 with privacy.factorization = "identity": independent noise on the same partitions, the
#     control that tells the correlation's share from the schedule's (twice the steps, half the data).
# Nothing is tuned for BandMF (the lr is GD's). RUNS private runs (OS-seeded) each; about 1.5 min a
# run on 2 cores once the features are cached (the 2k*b cell twice that).
# Usage: [EPSILON=1] [DATASETS="mnist fashion-mnist"] [CELLS="1 1,2 1"] [FIRST=4] experiments/bandmf/filtered.sh [RUNS]
# (CELLS: "bands length [factorization]", length 1 for k*b steps, 2 for 2k*b, the factorization
# root unless named; FIRST: the first run's number,
# for adding runs 4 ... RUNS to a cell; EPSILON: the target epsilon, 1 unless set; with any of
# them, the results are appended, not started afresh).
# Writes runs/bandmf-filtered/ (not committed) and experiments/bandmf/filtered.jsonl; the table:
#   python3 experiments/bandmf/filtered_report.py
set -euo pipefail
cd "$(dirname "$0")/../.."
export DPGD_DATASETS="${DPGD_DATASETS:-$(realpath ../shared/datasets)}"
runs="${1:-3}"
cargo build --release -q -p dpgd-cli
bin="${CARGO_TARGET_DIR:-target}/release/dpgd"
results=experiments/bandmf/filtered.jsonl
first="${FIRST:-1}"
# The whole study starts its results afresh; named cells or later runs are appended.
[ "$first" = 1 ] && [ -z "${CELLS:-}" ] && [ -z "${EPSILON:-}" ] && : > "$results"
epsilon="${EPSILON:-1}"
k=100
for dataset in ${DATASETS:-mnist fashion-mnist}; do
  IFS=, read -ra cells <<< "${CELLS:-1 1,2 1,4 1,4 2,2 1 identity}"
  for cell in "${cells[@]}"; do
    read -r bands length factorization <<< "$cell"
    factorization="${factorization:-root}"
    steps=$((k * bands * length))
    for i in $(seq "$first" "$runs"); do
      dir="runs/bandmf-filtered/$dataset-eps$epsilon-b$bands-steps$steps-$factorization-$i"
      rm -rf "$dir"
      "$bin" train --quiet --config "configs/best-$dataset.toml" --out "$dir" --set privacy.epsilon="$epsilon" \
        --set privacy.method=bandmf-filtered --unset privacy.sample_rate --set privacy.bands="$bands" \
        --set privacy.worst_case_steps=$k --set privacy.clip=1 --set privacy.conversion=gaussian-exact \
        --set train.lr=0.8 --set train.momentum=0.9 --set train.max_steps=$steps --set train.eval_every=$steps \
        --set train.chunk=4 --set privacy.factorization="$factorization" > /dev/null
      jq -c --arg data "$dataset" --arg bands "$bands" --arg factorization "$factorization" --arg run "$i" --arg commit "$(git rev-parse --short HEAD)" \
        '{dataset: $data, bands: ($bands | tonumber), factorization: $factorization, run: ($run | tonumber), commit: $commit,
          steps_run, k, epsilon, delta, test_accuracy}' "$dir/publishable/result.json" >> "$results"
      echo "$dataset, $bands bands ($factorization), $steps steps, run $i: $(tail -1 "$results")"
    done
  done
done
