"""The personalized-budgets table (mean ± std over private runs) and plot from results/.

    python3 experiments/personalized/report.py   # prints the table, writes results/personalized.png (needs matplotlib)
"""
import collections
import json
import pathlib
import statistics

HERE = pathlib.Path(__file__).parent
RESULTS = HERE / "results"
DATASETS = ["mnist", "fashion-mnist"]
ARMS = [
    ("eps-1", "everyone at ε = 1"),
    ("personalized", "tiers ε = 1 / 2 / 3 (34 / 43 / 23 %), σ for ε = 1"),
    ("personalized-2", "tiers ε = 1 / 2 / 3 (34 / 43 / 23 %), σ for ε = 2"),
    ("eps-3", "everyone at ε = 3"),
]
# Boenisch et al. 2023 (arXiv:2303.17046v2, Table 2; MNIST only, Tramèr & Boneh's CNN, ten
# trials): the same tiers; not the same model (see README.md).
BOENISCH = {
    "eps-1": "96.75 ± 0.15",
    "personalized": "Sample 97.81 ± 0.09, Scale 97.78 ± 0.08",
    "personalized-2": "(the same tiers: Sample 97.81, Scale 97.78)",
    "eps-3": "—",
}


# Plain DP-SGD (no individual accounting), the same features and recipe for 40 epochs: the
# frontier's means of five private runs (experiments/frontier).
PLAIN_DP_SGD = {"mnist": [(1, 98.14), (3, 98.65)], "fashion-mnist": [(1, 88.27), (3, 89.33)]}


def load():
    runs = collections.defaultdict(list)
    for data in DATASETS:
        f = RESULTS / f"{data}.jsonl"
        if f.exists():
            for line in f.read_text().splitlines():
                r = json.loads(line)
                if r["private"]:
                    runs[(data, r["arm"])].append(r)
    return runs


def cell(rows):
    v = [100 * r["test_accuracy"] for r in rows]
    if not v:
        return None
    return statistics.mean(v), (statistics.stdev(v) if len(v) > 1 else 0.0), len(v)


def main():
    runs = load()
    print("| dataset | budgets | test accuracy (%) | ε each tier reaches | Boenisch et al. 2023 (their CNN) |")
    print("|---|---|---|---|---|")
    for data in DATASETS:
        for arm, label in ARMS:
            rows = runs.get((data, arm), [])
            c = cell(rows)
            if not c:
                continue
            tiers = rows[0]["tiers"]
            reach = ", ".join(f"{g:.3f}" for _, g in tiers) if tiers else f"{rows[0]['epsilon']:.3f}"
            theirs = BOENISCH[arm] if data == "mnist" else "—"
            print(f"| {data} | {label} | {c[0]:.2f} ± {c[1]:.2f} ({c[2]}) | {reach} | {theirs} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plot)")
        return
    shown = [d for d in DATASETS if any((d, a) in runs for a, _ in ARMS)]
    fig, axes = plt.subplots(1, len(shown), figsize=(7 * len(shown), 5.2), squeeze=False)
    for ax, data in zip(axes[0], shown):
        for x, (arm, label) in enumerate(ARMS):
            rows = runs.get((data, arm), [])
            accs = [100 * r["test_accuracy"] for r in rows]
            if accs:
                ax.bar(x, statistics.mean(accs), color=["#999999", "#1f77b4", "#2ca02c", "#cccccc"][x], label=label)
                ax.plot([x] * len(accs), accs, "k.", zorder=3)
        for (eps, acc), style in zip(PLAIN_DP_SGD.get(data, []), ["--", ":"]):
            ax.axhline(acc, color="k", linestyle=style, linewidth=1,
                       label=f"plain DP-SGD, 40 epochs, everyone at ε = {eps} (frontier)")
        accs = [100 * r["test_accuracy"] for a, _ in ARMS for r in runs.get((data, a), [])]
        accs += [a for _, a in PLAIN_DP_SGD.get(data, [])]
        ax.set_ylim(min(accs) - 0.5, max(accs) + 0.3)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), fontsize=8, ncol=2)
        ax.set_xticks(range(len(ARMS)), ["all ε = 1", "tiers, σ for 1", "tiers, σ for 2", "all ε = 3"])
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{data}: scattering + linear, DP-SGD with individual accounting", fontsize=10)
    fig.suptitle("Personalized budgets (δ = 1e-5; dots: private runs, bars: their mean)")
    fig.tight_layout()
    out = RESULTS / "personalized.png"
    fig.savefig(out, dpi=120)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
