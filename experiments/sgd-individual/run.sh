#!/usr/bin/env bash
# DP-SGD against DP-SGD with individual accounting (method = "sgd-filtered") at equal epsilon:
# logistic regression on MNIST, q = 0.01, T = 500 steps, (1, 1e-5)-DP, clip 5, lr 1; the
# filtered runs may continue to 1000 steps. Usage: experiments/sgd-individual/run.sh [SEEDS]
# (~6 minutes per pair on 2 cores). Writes runs/sgd-individual/ and prints the table.
set -euo pipefail
cd "$(dirname "$0")/../.."
seeds="${1:-2}"
export DPGD_DATASETS="${DPGD_DATASETS:-$(realpath ../shared/datasets)}"
cargo build --release -q -p dpgd-cli
bin="${CARGO_TARGET_DIR:-target}/release/dpgd"
out=runs/sgd-individual
common=(--config configs/mnist-sgd.toml --set model.preset=logistic --set privacy.sample_rate=0.01
  --set privacy.worst_case_steps=500 --unset privacy.sigma --set privacy.epsilon=1 --set privacy.clip=5
  --set train.lr=1 --set train.eval_every=100)
for i in $(seq 1 "$seeds"); do
  rm -rf "$out/sgd-$i" "$out/filtered-$i"
  "$bin" train --quiet "${common[@]}" --out "$out/sgd-$i"
  "$bin" train --quiet "${common[@]}" --set privacy.method=sgd-filtered --set train.max_steps=1000 \
    --out "$out/filtered-$i"
done
python3 - "$out" "$seeds" <<'PY'
import json, statistics, sys
out, seeds = sys.argv[1], int(sys.argv[2])
print("| method | runs | epsilon | test accuracy (returned model) | at step 500 | active at the end | s/step (median) |")
print("|---|---|---|---|---|---|---|")
for name in ["sgd", "filtered"]:
    acc, at500, active, secs, eps = [], [], [], [], None
    for i in range(1, seeds + 1):
        d = f"{out}/{name}-{i}"
        r = json.load(open(f"{d}/publishable/result.json"))
        rows = [json.loads(l) for l in open(f"{d}/publishable/metrics.jsonl")]
        steps = [json.loads(l) for l in open(f"{d}/confidential/steps.jsonl")]
        acc.append(100 * r["test_accuracy"]); eps = r["epsilon"]
        at500.append(100 * next(x["test_accuracy"] for x in rows if x["step"] == 500))
        active.append(steps[-1]["active_exact"]); secs.append(statistics.median(s["seconds"] for s in steps))
    sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
    print(f"| {name} | {seeds} | {eps:.4f} | {statistics.mean(acc):.2f} ± {sd(acc):.2f} | {statistics.mean(at500):.2f} | "
          f"{statistics.mean(active):.0f} | {statistics.median(secs):.3f} |")
PY
