"""The frontier table (mean ± std over runs) and plot from experiments/frontier/results/.

    python3 experiments/frontier/report.py     # prints the table, writes results/frontier.png (needs matplotlib)
"""
import collections
import json
import pathlib
import statistics

HERE = pathlib.Path(__file__).parent
RESULTS = HERE / "results"
DATASETS = ["mnist", "fashion-mnist"]
# Published anchors at delta = 1e-5 (read from the authors' repositories; see README.md).
ANCHORS = {
    "mnist": [(1, 97.93, "DPSUR (VLDB 2024; accounting questioned)"), (3, 98.7, "Tramèr & Boneh 2021 (DP-SGD)")],
    "fashion-mnist": [(1, 88.38, "DPSUR (VLDB 2024; accounting questioned)"), (3, 89.7, "Tramèr & Boneh 2021 (DP-SGD)")],
}
GOALS = {"mnist": {1.0: 98.0, 3.0: 98.7}, "fashion-mnist": {1.0: 88.5, 3.0: 89.7}}
# (method in the results, the accuracy field, label, plot style)
SERIES = [
    ("filtered", "test_accuracy", "dpgd: GD with individual filtering", "o-"),
    ("filtered", "test_accuracy_at_k", "dpgd: plain private GD (step k, same σ)", "s--"),
    ("dpsgd", "test_accuracy", "dpgd: DP-SGD, the anchors' recipe", "^:"),
    ("dpsgd-long", "test_accuracy", "dpgd: DP-SGD, 80 epochs (chosen at ε = 3 on Fashion-MNIST)", "v-."),
]


def load():
    runs = collections.defaultdict(list)
    for data in DATASETS:
        f = RESULTS / f"{data}.jsonl"
        if f.exists():
            for line in f.read_text().splitlines():
                r = json.loads(line)
                if r["private"]:
                    runs[(data, r["method"], r["target_epsilon"])].append(r)
    return runs


def cell(rows, key):
    v = [100 * r[key] for r in rows if r.get(key) is not None]
    if not v:
        return None
    return statistics.mean(v), (statistics.stdev(v) if len(v) > 1 else 0.0), len(v)


def fmt(c):
    return f"{c[0]:.2f} ± {c[1]:.2f} ({c[2]})" if c else "—"


def main():
    runs = load()
    print("| dataset | ε | GD, individual filtering | plain GD at k | DP-SGD (anchors' recipe, 40 epochs) "
          "| DP-SGD, 80 epochs | goal | published anchor |")
    print("|---|---|---|---|---|---|---|---|")
    for data in DATASETS:
        for eps in sorted({e for d, _, e in runs if d == data}):
            cols = [fmt(cell(runs.get((data, m, eps), []), key)) for m, key, _, _ in SERIES]
            anchor = next((f"{a} ({name})" for e, a, name in ANCHORS[data] if e == eps), "—")
            print(f"| {data} | {eps:g} | {' | '.join(cols)} | {GOALS[data].get(eps, '—')} | {anchor} |")
    print("(mean ± std over runs, number of runs in brackets; every run OS-seeded, private)")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: apt-get install python3-matplotlib for the plot)")
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    for ax, data in zip(axes, DATASETS):
        for method, key, label, style in SERIES:
            pts = [(e, cell(rows, key)) for (d, m, e), rows in sorted(runs.items()) if d == data and m == method]
            pts = [(e, c) for e, c in pts if c]
            if pts:
                ax.errorbar([e for e, _ in pts], [c[0] for _, c in pts], yerr=[c[1] for _, c in pts],
                            fmt=style, capsize=3, label=label)
        for e, acc, name in ANCHORS[data]:
            ax.scatter([e], [acc], marker="*", s=140, zorder=5, label=f"published: {name}")
        ax.set_title(f"{data}: scattering features + linear model, δ = 1e-5")
        ax.set_xlabel("ε")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(RESULTS / "frontier.png", dpi=120)
    print(f"plot: {RESULTS / 'frontier.png'}")


if __name__ == "__main__":
    main()
