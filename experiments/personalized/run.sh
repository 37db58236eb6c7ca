#!/usr/bin/env bash
# Personalized budgets against one budget for all (issue: every example its own budget).
# Boenisch et al. 2023's setting: three tiers at epsilon = 1, 2, 3 (delta = 1e-5) holding 34 %,
# 43 % and 23 % of the training examples at random. Three arms, the same recipe and the same
# number of steps (configs/mnist-tiers.toml: scattering features + linear classifier, DP-SGD
# with individual accounting, up to 1172 steps):
#   eps-1           everyone at epsilon = 1 (sigma calibrated for 1)
#   personalized    the tiers, sigma calibrated for the strictest (1); each tier its own budget
#   personalized-2  the tiers, sigma calibrated for the middle tier (2): less noise, and the
#                   epsilon = 1 tier gets a smaller budget than it would (its examples stop sooner)
#   eps-3           everyone at epsilon = 3 (sigma calibrated for 3)
# Every run is private (OS-seeded noise) and independent.
#
#   experiments/personalized/run.sh                                   # 2 datasets x 4 arms x 3 runs (~3 h on 2 cores)
#   DATASETS=mnist RUNS=3 experiments/personalized/run.sh
#   python3 experiments/personalized/report.py                        # the table and results/personalized.png
#
# A finished run is kept (runs/personalized/, not committed) and not rerun; each result is
# appended to experiments/personalized/results/<dataset>.jsonl (publishable: accuracies, epsilons).
set -euo pipefail
cd "$(dirname "$0")/../.."
export DPGD_DATASETS="${DPGD_DATASETS:-$(realpath ../shared/datasets)}"
cargo build --release -q -p dpgd-cli
bin="${CARGO_TARGET_DIR:-target}/release/dpgd"
results=experiments/personalized/results
mkdir -p "$results"
for run in $(seq 1 "${RUNS:-3}"); do
  for data in ${DATASETS:-mnist fashion-mnist}; do
    for arm in ${ARMS:-personalized personalized-2 eps-1 eps-3}; do
      dir="runs/personalized/$data/$arm/run-$run"
      [ -f "$dir/publishable/result.json" ] && continue
      rm -rf "$dir"
      echo "personalized: $data, $arm, run $run" >&2
      extra=(--set "data.dir=datasets/$data" --set "name=$data-$arm")
      case "$arm" in
        personalized-2) extra+=(--set privacy.epsilon=2.0) ;;
        eps-1) extra+=(--unset privacy.budgets --set privacy.epsilon=1.0) ;;
        eps-3) extra+=(--unset privacy.budgets --set privacy.epsilon=3.0) ;;
      esac
      "$bin" train --quiet --config configs/mnist-tiers.toml "${extra[@]}" --out "$dir"
      python3 - "$dir" "$data" "$arm" "$run" "$results" <<'PY'
import json, sys
d, data, arm, run, results = sys.argv[1:]
r = json.load(open(f"{d}/publishable/result.json"))
p = json.load(open(f"{d}/publishable/privacy.json"))
tiers = [(t["epsilon"], t["guaranteed_epsilon"]) for t in (p.get("personalized") or {}).get("tiers", [])]
row = {"dataset": data, "arm": arm, "run": int(run), "private": r["private"], "epsilon": r["epsilon"],
       "delta": r["delta"], "tiers": tiers, "steps_run": r["steps_run"], "test_accuracy": r["test_accuracy"]}
open(f"{results}/{data}.jsonl", "a").write(json.dumps(row) + "\n")
PY
    done
  done
done
