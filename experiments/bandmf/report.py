"""BandMF against DP-SGD: the table (mean ± std over runs) and plot from results.jsonl.

    python3 experiments/bandmf/report.py   # prints the table, writes bandmf.png (needs matplotlib for the plot)
"""
import collections
import json
import pathlib
import statistics

HERE = pathlib.Path(__file__).parent


def main():
    rows = [json.loads(line) for line in (HERE / "results.jsonl").read_text().splitlines() if line]
    cells = collections.defaultdict(list)
    for r in rows:
        cells[(r["epsilon_target"], r["bands"])].append(r)
    print("| ε (δ = 10⁻⁵) | bands | rate in the partition | σ | rounds accounted | runs | test accuracy % |")
    print("|---|---|---|---|---|---|---|")
    for (eps, bands), rs in sorted(cells.items()):
        acc = [100 * r["test_accuracy"] for r in rs]
        sd = statistics.stdev(acc) if len(acc) > 1 else 0.0
        name = "1 (DP-SGD)" if bands == 1 else str(bands)
        print(f"| {eps:g} | {name} | {0.004 * bands:g} | {rs[0]['sigma']:.3f} | {-(-3750 // bands)} | {len(rs)} | "
              f"{statistics.mean(acc):.2f} ± {sd:.2f} |")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plot)")
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for eps in sorted({e for e, _ in cells}):
        bands = sorted(b for e, b in cells if e == eps)
        means = [statistics.mean(100 * r["test_accuracy"] for r in cells[(eps, b)]) for b in bands]
        for b in bands:
            ax.plot([b] * len(cells[(eps, b)]), [100 * r["test_accuracy"] for r in cells[(eps, b)]], "k.", ms=3)
        ax.plot(bands, means, "o-", label=f"ε = {eps:g}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bands b (1 = DP-SGD)")
    ax.set_ylabel("test accuracy %")
    ax.set_title("BandMF on MNIST, Opacus's CNN and recipe, 3,750 steps\n(the same expected batch; σ calibrated)")
    ax.legend()
    fig.tight_layout()
    out = HERE / "bandmf.png"
    fig.savefig(out, dpi=110)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
