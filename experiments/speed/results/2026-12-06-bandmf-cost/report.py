"""The table of run.sh: each cell's median step time (the first 10 steps of each run left out
as warm-up), min-max over rounds of the per-run medians, and the ratio to DP-SGD's.

    python3 experiments/speed/results/2026-12-06-bandmf-cost/report.py
"""
import collections
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(os.path.join(HERE, "steps.jsonl")):
    r = json.loads(line)
    if r["step"] > 10:
        runs[r["cell"]][r["round"]].append(r["seconds"])
medians = {cell: [statistics.median(s) for _, s in sorted(rounds.items())] for cell, rounds in runs.items()}
base = statistics.median(medians["sgd"])
print("| cell | runs | step time, ms (median of per-run medians; min-max) | against DP-SGD |")
print("|---|---|---|---|")
for cell in ["sgd", "bandmf-b4", "bandmf-b16"]:
    m = medians.get(cell)
    if not m:
        continue
    mid = statistics.median(m)
    print(f"| {cell} | {len(m)} | {1000 * mid:.2f} ({1000 * min(m):.2f}-{1000 * max(m):.2f}) | {mid / base:.3f} |")
