#!/usr/bin/env bash
# The accuracy frontier: test accuracy against epsilon (delta = 1e-5) of private GD with
# individual filtering on scattering features (configs/best-*.toml), with plain private GD at
# the same noise read off the same runs (the model at step k, before any example can be dropped,
# is plain GD's), against the published anchors. Every run is private: OS-seeded noise.
#
#   experiments/frontier/run.sh                                  # 2 datasets x 4 epsilons x 5 runs (~4 h on 2 cores)
#   DATASETS=mnist EPSILONS="1 3" RUNS=5 experiments/frontier/run.sh
#   python3 experiments/frontier/report.py                       # the table and plot from what has run
#
# A cell's finished runs are kept (runs/frontier/, not committed) and not rerun; results are
# appended to experiments/frontier/results/<dataset>.jsonl (publishable: accuracies and
# epsilon) and timings-confidential.jsonl (wall time: operator-only, as every run's timings).
set -euo pipefail
cd "$(dirname "$0")/../.."
export DPGD_DATASETS="${DPGD_DATASETS:-$(realpath ../shared/datasets)}"
cargo build --release -q -p dpgd-cli
bin="${CARGO_TARGET_DIR:-target}/release/dpgd"
results=experiments/frontier/results
mkdir -p "$results"
for data in ${DATASETS:-mnist fashion-mnist}; do
  for eps in ${EPSILONS:-0.5 1 2 3}; do
    for run in $(seq 1 "${RUNS:-5}"); do
      dir="runs/frontier/$data/eps-$eps/run-$run"
      [ -f "$dir/publishable/result.json" ] && continue
      rm -rf "$dir"
      echo "frontier: $data, epsilon $eps, run $run" >&2
      "$bin" train --quiet --config "configs/best-$data.toml" --set "privacy.epsilon=$eps" --out "$dir"
      python3 - "$dir" "$data" "$eps" "$run" "$results" <<'PY'
import json, sys
d, data, eps, run, results = sys.argv[1:]
r = json.load(open(f"{d}/publishable/result.json"))
c = json.load(open(f"{d}/confidential/diagnostics.json"))
row = {"dataset": data, "target_epsilon": float(eps), "run": int(run), "private": r["private"],
       "epsilon": r["epsilon"], "delta": r["delta"], "k": r["k"], "steps_run": r["steps_run"],
       "filtered": r["test_accuracy"], "plain_at_k": r["test_accuracy_at_k"]}
open(f"{results}/{data}.jsonl", "a").write(json.dumps(row) + "\n")
open(f"{results}/timings-confidential.jsonl", "a").write(json.dumps(
    {"dataset": data, "target_epsilon": float(eps), "run": int(run), "seconds": c["seconds"]}) + "\n")
PY
    done
  done
done
python3 experiments/frontier/report.py
