"""The table of experiments/bandmf/filtered.sh: test accuracy (mean +- std over the private runs)
per dataset, epsilon, bands and length, from experiments/bandmf/filtered.jsonl.

    python3 experiments/bandmf/filtered_report.py
"""
import collections
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
cells = collections.defaultdict(list)
for line in open(os.path.join(HERE, "filtered.jsonl")):
    r = json.loads(line)
    key = (r["dataset"], r["epsilon"], r["bands"], r.get("factorization", "root"), r["steps_run"], r["k"])
    cells[key].append(100 * r["test_accuracy"])
print("| dataset | ε | bands | C | steps (participations each) | runs | test accuracy % (mean ± std) | each run |")
print("|---|---|---|---|---|---|---|---|")
for (data, epsilon, bands, factorization, steps, k), acc in sorted(cells.items()):
    mean = f"{statistics.mean(acc):.2f}" + (f" ± {statistics.stdev(acc):.2f}" if len(acc) > 1 else " (one run)")
    each = ", ".join(f"{a:.2f}" for a in acc)
    name = "1 (plain GD)" if bands == 1 else str(bands)
    print(f"| {data} | {epsilon:g} | {name} | {factorization} | {steps} ({steps // bands}, budget {k}) | {len(acc)} | {mean} | {each} |")
