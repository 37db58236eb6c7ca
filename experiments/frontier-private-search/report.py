"""The honest frontier: each private search's published result, the table (mean ± std over
independent searches per cell) beside the hand-tuned frontier, and a plot.

    python3 experiments/frontier-private-search/report.py   # table; results/searches.jsonl; results/frontier-private-search.png
"""
import collections
import json
import pathlib
import statistics

HERE = pathlib.Path(__file__).parent
RESULTS = HERE / "results"
DATASETS = ["mnist", "fashion-mnist"]
# The searches' bases: the frontier's DP-SGD recipe (<dataset>.toml), and BandMF with individual
# filtering on its GD recipe (bandmf-<dataset>.toml, results/bandmf-*).
BASES = ["dp-sgd", "bandmf-filtered"]
MARKERS = {"dp-sgd": ("C0", "o"), "bandmf-filtered": ("C3", "^")}
# The hand-tuned frontier (experiments/frontier): DP-SGD, 40 epochs (80 at epsilon = 3), mean of
# five private runs, settings chosen on Fashion-MNIST's test set at epsilon = 1.
HAND_TUNED = {("mnist", 1.0): 98.14, ("mnist", 3.0): 98.70, ("fashion-mnist", 1.0): 88.27, ("fashion-mnist", 3.0): 89.70}
GOAL = {("mnist", 1.0): 98.0, ("fashion-mnist", 1.0): 88.5}


def setting(point):
    """A chosen grid point in words: `lr 2, 293 steps`."""
    words = {"train.lr": "lr {:g}", "privacy.worst_case_steps": "{} steps"}
    return ", ".join(words.get(k, k + " {}").format(v) for k, v in point.items())


def load():
    """Every finished search's publishable/search.json, keyed by (base, dataset, epsilon); a
    search whose folder is not here (run on another machine) is read from the committed
    results/searches.jsonl instead."""
    cells = collections.defaultdict(list)
    committed = RESULTS / "searches.jsonl"
    known = [json.loads(l) for l in committed.read_text().splitlines()] if committed.exists() else []
    here = {d.name for d in RESULTS.glob("*-eps*-*") if (d / "publishable" / "search.json").exists()}
    rows = [dict(r, base=r.get("base", "dp-sgd")) for r in known if r["search"] not in here]
    for r in rows:
        if r["private"] and r["chosen"]:
            cells[(r["base"], r["dataset"], round(r["epsilon"]))].append(r)
    for d in sorted(RESULTS.glob("*-eps*-*")):
        f = d / "publishable" / "search.json"
        if not f.exists():
            continue
        s = json.loads(f.read_text())
        data = d.name.rsplit("-eps", 1)[0]
        base = "dp-sgd"
        if data.startswith("bandmf-"):
            base, data = "bandmf-filtered", data.removeprefix("bandmf-")
        g = s["guarantee"]
        row = {
            "search": d.name,
            "base": base,
            "dataset": data,
            "epsilon": g["epsilon"],
            "delta": g["delta"],
            "private": s["private"],
            "candidate_epsilon": g["candidate_epsilon"],
            "chosen": s["chosen"],
        }
        rows.append(row)
        if s["private"] and s["chosen"]:
            cells[(base, data, round(g["epsilon"]))].append(row)
    return rows, cells


def main():
    rows, cells = load()
    (RESULTS / "searches.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print("| base | dataset | total ε | private search (%) | searches | settings chosen | candidate ε | hand-tuned DP-SGD (%) | goal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for base in BASES:
        for data in DATASETS:
            for eps in (1.0, 3.0):
                got = cells.get((base, data, round(eps)), [])
                if not got:
                    continue
                acc = [100 * r["chosen"]["test_accuracy"] for r in got]
                sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
                chosen = "; ".join(setting(r["chosen"]["point"]) for r in got)
                goal = GOAL.get((data, eps))
                print(
                    f"| {base} | {data} | {eps:g} | {statistics.mean(acc):.2f} ± {sd:.2f} | {len(acc)} | {chosen} | "
                    f"{got[0]['candidate_epsilon']:.3f} | {HAND_TUNED[(data, eps)]:.2f} | {goal if goal else '—'} |"
                )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plot)")
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, data in zip(axes, DATASETS):
        for eps in (1.0, 3.0):
            for base in BASES:
                got = cells.get((base, data, round(eps)), [])
                acc = [100 * r["chosen"]["test_accuracy"] for r in got]
                color, marker = MARKERS[base]
                shift = -0.06 if base == "dp-sgd" else 0.06
                if acc:
                    ax.scatter([eps + shift] * len(acc), acc, color=color, marker=marker,
                               label=f"private search over {base} (each)" if eps == 1.0 else None)
            ax.scatter([eps], [HAND_TUNED[(data, eps)]], color="C1", marker="_", s=400,
                       label="hand-tuned, settings chosen on a test set" if eps == 1.0 else None)
            if (data, eps) in GOAL:
                ax.scatter([eps], [GOAL[(data, eps)]], color="C2", marker="x", label="goal" if eps == 1.0 else None)
        ax.set_title(data)
        ax.set_xlabel("total ε (δ = 1e-5), the search included")
        ax.set_xticks([1, 3])
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(RESULTS / "frontier-private-search.png", dpi=120)
    print(f"plot: {RESULTS / 'frontier-private-search.png'}")


if __name__ == "__main__":
    main()
