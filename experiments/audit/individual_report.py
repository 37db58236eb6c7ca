"""The individual-accounting audit's table and plot from individual/results.jsonl.

    python3 experiments/audit/individual_report.py   # prints the table, writes individual/individual.png (needs matplotlib)
"""
import json
import pathlib

HERE = pathlib.Path(__file__).parent / "individual"


def main():
    runs = [json.loads(line) for line in (HERE / "results.jsonl").read_text().splitlines() if line]
    print("| run ε | canary gradient | claimed ε (spent) | (ε, δ) analysis (ratio) | f-DP analysis (ratio) | Gaussian scores (ratio) |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        for g in run["groups"]:
            c, lo, ga = g["claimed_epsilon"], g["epsilon_lower"], g.get("epsilon_lower_gaussian")
            fd = g.get("epsilon_lower_fdp")
            ratio = lambda x: f"{x:.3f} ({c / x:.2g})" if x else "—"
            print(f"| {run['epsilon']:g} | {g['gradient_norm']:g} C | {c:.3f} | {ratio(lo)} | {ratio(fd)} | {ratio(ga)} |")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plot)")
        return
    fig, ax = plt.subplots(figsize=(6.4, 5))
    marks = {1.0: "o", 0.5: "s", 0.25: "^"}
    top = max(g["claimed_epsilon"] for r in runs for g in r["groups"]) * 1.1
    ax.plot([0, top], [0, top], "k:", lw=1, label="audited = claimed")
    for norm, mark in marks.items():
        gs = [g for r in runs for g in r["groups"] if g["gradient_norm"] == norm]
        x = [g["claimed_epsilon"] for g in gs]
        ax.plot(x, [g["epsilon_lower"] for g in gs], mark, mfc="none", color="C0",
                label=f"C·{norm:g}: (ε, δ) analysis")
        ax.plot(x, [g.get("epsilon_lower_fdp") or 0 for g in gs], mark, color="C2",
                label=f"C·{norm:g}: f-DP analysis")
        ax.plot(x, [g.get("epsilon_lower_gaussian") or 0 for g in gs], mark, color="C1",
                label=f"C·{norm:g}: Gaussian scores")
    ax.set_xlabel("claimed ε of the group (from what it spent)")
    ax.set_ylabel("audited lower bound on ε (95 %)")
    ax.set_title("Individual accounting audited: canaries of three gradient norms\n"
                 "filtered GD, 10,000 MNIST examples, 3,000 canaries per group")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = HERE / "individual.png"
    fig.savefig(out, dpi=110)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
