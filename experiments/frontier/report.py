"""The frontier table (mean ± std over runs) and plot from experiments/frontier/results/.

    python3 experiments/frontier/report.py     # prints the table, writes results/frontier.png (needs matplotlib)
"""
import collections
import json
import pathlib
import statistics

HERE = pathlib.Path(__file__).parent
RESULTS = HERE / "results"
# Published anchors at delta = 1e-5 (from the authors' repositories; see README.md).
ANCHORS = {
    "mnist": [(1, 97.93, "DPSUR (accounting questioned)"), (3, 98.7, "ScatterNet+linear, DP-SGD (Tramèr & Boneh)")],
    "fashion-mnist": [(1, 88.38, "DPSUR (accounting questioned)"), (3, 89.7, "ScatterNet+linear, DP-SGD (Tramèr & Boneh)")],
}
GOALS = {"mnist": {1: 98.0, 3: 98.7}, "fashion-mnist": {1: 88.5, 3: 89.7}}


def load():
    cells = collections.defaultdict(list)
    for f in sorted(RESULTS.glob("*.jsonl")):
        if f.name.startswith("timings"):
            continue
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r["private"]:
                cells[(r["dataset"], r["target_epsilon"])].append(r)
    return cells


def stats(v):
    return statistics.mean(v), (statistics.stdev(v) if len(v) > 1 else 0.0)


def main():
    cells = load()
    times = collections.defaultdict(list)
    timing = RESULTS / "timings-confidential.jsonl"
    if timing.exists():
        for line in timing.read_text().splitlines():
            t = json.loads(line)
            times[(t["dataset"], t["target_epsilon"])].append(t["seconds"])
    print("| dataset | ε | runs | filtered GD (%) | plain GD at k (%) | goal (%) | minutes per run (confidential) |")
    print("|---|---|---|---|---|---|---|")
    for (data, eps), rows in sorted(cells.items()):
        f = stats([100 * r["filtered"] for r in rows])
        p = stats([100 * r["plain_at_k"] for r in rows])
        goal = GOALS[data].get(int(eps)) if float(eps).is_integer() else None
        t = times.get((data, eps))
        minutes = f"{statistics.mean(t) / 60:.1f}" if t else "—"
        print(f"| {data} | {eps:g} | {len(rows)} | {f[0]:.2f} ± {f[1]:.2f} | {p[0]:.2f} ± {p[1]:.2f} | "
              f"{goal if goal else '—'} | {minutes} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: apt-get install python3-matplotlib for the plot)")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, data in zip(axes, ["mnist", "fashion-mnist"]):
        eps = sorted(e for d, e in cells if d == data)
        for key, label, style in [("filtered", "dpgd: GD with individual filtering", "o-"),
                                  ("plain_at_k", "dpgd: plain private GD (same σ)", "s--")]:
            m = [stats([100 * r[key] for r in cells[(data, e)]]) for e in eps]
            ax.errorbar(eps, [x[0] for x in m], yerr=[x[1] for x in m], fmt=style, capsize=3, label=label)
        for e, acc, name in ANCHORS[data]:
            ax.scatter([e], [acc], marker="*", s=120, zorder=5, label=f"{name}")
        ax.set_title(f"{data}: scattering features + linear, δ = 1e-5")
        ax.set_xlabel("ε")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(RESULTS / "frontier.png", dpi=120)
    print(f"plot: {RESULTS / 'frontier.png'}")


if __name__ == "__main__":
    main()
