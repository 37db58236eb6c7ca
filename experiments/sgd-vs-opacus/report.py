"""Summarises experiments/sgd-vs-opacus/results: per run, the final test accuracy, the
training time (dpgd: the sum of its steps' compute seconds from confidential/steps.jsonl;
Opacus: its training loop, evaluations excluded) and the whole run's wall time (process start
to end, data loading, evaluations and files included); a markdown table and a plot of test
accuracy against training time. The timings are confidential in a real run (they depend on
the data); here the data are public MNIST."""
import csv
import glob
import json
import os
import statistics
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "experiments/sgd-vs-opacus/results"


def dpgd_run(d):
    steps = [json.loads(l) for l in open(os.path.join(d, "confidential", "steps.jsonl"))]
    elapsed, at = 0.0, {}
    for r in steps:
        elapsed += r["seconds"]
        at[r["step"]] = elapsed
    rows = list(csv.DictReader(open(os.path.join(d, "publishable", "metrics.csv"))))
    curve = [(at[int(r["step"])], float(r["test_accuracy"])) for r in rows if r.get("test_accuracy")]
    eps = json.load(open(os.path.join(d, "publishable", "privacy.json")))["epsilon"]
    return curve, eps


def opacus_run(path):
    rows = list(csv.DictReader(open(path)))
    eps = None
    log = path.replace(".csv", ".log")
    for line in open(log):
        if line.startswith("epsilon ="):
            eps = float(line.split()[2])
    return [(float(r["seconds"]), float(r["test_accuracy"])) for r in rows], eps


def wall(path):
    return float(open(path).read())


runs = {"dpgd": [], "opacus": []}
for d in sorted(glob.glob(os.path.join(out, "dpgd-*/"))):
    curve, eps = dpgd_run(d)
    runs["dpgd"].append((curve, eps, wall(d.rstrip("/") + ".wall")))
for p in sorted(glob.glob(os.path.join(out, "opacus-*.csv"))):
    curve, eps = opacus_run(p)
    runs["opacus"].append((curve, eps, wall(p.replace(".csv", ".wall"))))

print("| | runs | epsilon (delta = 1e-5) | test accuracy | training s | wall s |")
print("|---|---|---|---|---|---|")
for name, rs in runs.items():
    if not rs:
        continue
    acc = [r[0][-1][1] * 100 for r in rs]
    train = [r[0][-1][0] for r in rs]
    walls = [r[2] for r in rs]
    sd = lambda xs: statistics.stdev(xs) if len(xs) > 1 else 0.0
    print(f"| {name} | {len(rs)} | {rs[0][1]:.4f} | {statistics.mean(acc):.2f} ± {sd(acc):.2f} | "
          f"{statistics.mean(train):.1f} | {statistics.mean(walls):.1f} |")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, colour in (("dpgd", "tab:blue"), ("opacus", "tab:orange")):
        for i, (curve, _, _) in enumerate(runs[name]):
            xs, ys = zip(*curve)
            ax.plot(xs, [100 * y for y in ys], color=colour, alpha=0.7, label=name if i == 0 else None)
    ax.set_xlabel("training time (s), 2 cores")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(60, 100)
    ax.set_title("DP-SGD, Opacus MNIST recipe, epsilon = 0.92")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "accuracy_vs_time.png"), dpi=120)
except ImportError:
    print("(matplotlib not installed: no plot)")
