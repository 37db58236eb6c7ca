"""The method table: test accuracy of four private training methods against epsilon.

Reads results/methods.jsonl (written by run.sh; only private runs that met their target epsilon),
and for the GD cells this study did not run itself the paper table's runs (../paper-table/results/results.csv: tuned cases, gaussian-exact calibration, ten
fixed-seed runs). Prints the markdown table and writes results/methods.png (needs matplotlib;
the table prints without it).

    python3 experiments/method-table/report.py
"""
import csv
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
PAPER_TABLE = os.path.join(HERE, "..", "paper-table", "results", "results.csv")
# (column, method in methods.jsonl, field of the row); GD is read off the filtered runs at step k.
COLUMNS = [
    ("GD", "gd-filtered", "test_accuracy_at_k"),
    ("GD + filter", "gd-filtered", "test_accuracy"),
    ("DP-SGD (Opacus recipe)", "sgd", "test_accuracy"),
    ("DP-SGD, batch 6000", "sgd-large", "test_accuracy"),
    ("DP-SGD, batch 6000, individual accounting", "sgd-large-filtered", "test_accuracy"),
]


def load():
    """cells[(column, epsilon)] = (accuracies in %, source note or None)."""
    rows = {}
    path = os.path.join(RESULTS, "methods.jsonl")
    if os.path.exists(path):
        for line in filter(str.strip, open(path)):
            r = json.loads(line)
            # Only private runs that met their target epsilon (a fixed-seed run is not private).
            if not r["private"] or r["epsilon"] is None or r["epsilon"] > r["target_epsilon"] * (1 + 1e-9):
                sys.exit(f"{path}: run {r['method']} eps {r['target_epsilon']} #{r['run']} is not a private run at its target")
            rows[(r["method"], r["target_epsilon"], r["run"])] = r  # one row per run, the last kept
    rows = list(rows.values())
    cells = {}
    for name, method, field in COLUMNS:
        for r in rows:
            if r["method"] == method and r.get(field) is not None:
                cells.setdefault((name, r["target_epsilon"]), ([], None))[0].append(100 * r[field])
    if os.path.exists(PAPER_TABLE):
        for r in csv.DictReader(open(PAPER_TABLE)):
            eps = {"tuned-eps0.5": 0.5, "tuned-eps1.0": 1.0}.get(r["case"])
            if eps is None or r["privacy.conversion"] != "gaussian-exact":
                continue
            for name, field in [("GD", "test_accuracy_at_k"), ("GD + filter", "test_accuracy")]:
                if (name, eps) in cells and cells[(name, eps)][1] is None:
                    continue  # this study ran the cell itself
                cells.setdefault((name, eps), ([], "paper-table"))[0].append(100 * float(r[field]))
    return cells


def fmt(values, note):
    if not values:
        return "—"
    mark = " †" if note else ""
    if len(values) == 1:
        return f"{values[0]:.2f} (1){mark}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f} ({len(values)}){mark}"


def training_seconds():
    """Median training seconds per run of each (method, epsilon): the sum of the step times, without
    evaluations, loading or start-up (confidential timings: here the data are public MNIST and the
    numbers are the operator's benchmark)."""
    path = os.path.join(RESULTS, "timings-confidential.jsonl")
    if not os.path.exists(path):
        return {}
    by = {}
    for line in filter(str.strip, open(path)):
        t = json.loads(line)
        by.setdefault((t["method"], t["target_epsilon"]), {})[t["run"]] = t["training_seconds"]
    return {key: statistics.median(runs.values()) for key, runs in by.items()}


def plot(cells, epsilons):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, _, _ in COLUMNS:
        pts = [(e, cells[(name, e)][0]) for e in epsilons if (name, e) in cells]
        if pts:
            ax.errorbar([e for e, _ in pts], [statistics.mean(v) for _, v in pts],
                        yerr=[statistics.stdev(v) if len(v) > 1 else float("nan") for _, v in pts],
                        marker="o", capsize=3, label=name)
    ax.set_xscale("log")
    ax.set_xticks(epsilons)
    ax.set_xticklabels([f"{e:g}" for e in epsilons])
    ax.set_xlabel("ε (δ = 1e-5, zero-out neighbours)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("MNIST, Opacus CNN: four private methods (mean ± sd over runs)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, "methods.png"), dpi=120)


def main():
    cells = load()
    epsilons = sorted({e for _, e in cells})
    print("| ε | " + " | ".join(name for name, _, _ in COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for e in epsilons:
        print(f"| {e:g} | " + " | ".join(fmt(*cells.get((name, e), ([], None))) for name, _, _ in COLUMNS) + " |")
    if any(note for _, note in cells.values()):
        print("\n† the paper table's ten fixed-seed runs (experiments/paper-table, tuned, gaussian-exact)")
    secs = training_seconds()
    if secs:
        print("\nmedian training seconds per run (the sum of its step times; confidential timings, here on "
              "public MNIST, the operator's benchmark):")
        for (m, e), v in sorted(secs.items()):
            print(f"  {m}, epsilon {e:g}: {v:.0f} s")
    if epsilons:
        plot(cells, epsilons)


if __name__ == "__main__":
    main()
