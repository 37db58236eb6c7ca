"""Both threat models' table and plot from threat-models/results.jsonl.

    python3 experiments/audit/threat_models_report.py   # prints the table, writes threat-models/threat-models.png (needs matplotlib)
"""
import json
import pathlib

HERE = pathlib.Path(__file__).parent / "threat-models"


def bound(g, key):
    return g.get(key) or 0.0


def main():
    rows = [json.loads(line) for line in (HERE / "results.jsonl").read_text().splitlines() if line]
    runs = [r for r in rows if not r.get("unaudited")]
    plain = {r["name"]: r["seconds"] for r in rows if r.get("unaudited")}
    print("| config | claimed ε | test acc. | white-box (ε, δ) | white-box f-DP | white-box, means and spreads | "
          "black-box (ε, δ) | black-box f-DP | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        w, b = r["white_box"]["groups"][0], r["black_box"]["groups"][0]
        c = w["claimed_epsilon"]
        cell = lambda x: f"{x:.3f} ({c / x:.2g})" if x else "0"
        print(f"| {r['name']} | {c:.3f} | {100 * r['test_accuracy']:.2f} % | {cell(bound(w, 'epsilon_lower'))} | "
              f"{cell(bound(w, 'epsilon_lower_fdp'))} | {cell(bound(w, 'epsilon_lower_gaussian'))} | "
              f"{cell(bound(b, 'epsilon_lower'))} | "
              f"{cell(bound(b, 'epsilon_lower_fdp'))} | {r['seconds']} |")
    for name, seconds in plain.items():
        audited = next(r["seconds"] for r in runs if r["name"] == name)
        print(f"cost, {name}: {seconds} s without canaries, {audited} s with 1,000 of each kind")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plot)")
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5), sharey=True)
    for ax, prefix, title in [(axes[0], "filtered", "filtered GD, 10,000 examples"),
                              (axes[1], "sgd", "DP-SGD (q = 0.004), 60,000 examples")]:
        rs = [r for r in runs if r["name"].startswith(prefix)]
        x = [r["white_box"]["groups"][0]["claimed_epsilon"] for r in rs]
        ax.plot([0, 8.5], [0, 8.5], "k:", lw=1, label="audited = claimed")
        for model, colour in [("white_box", "C0"), ("black_box", "C3")]:
            name = model.replace("_", "-")
            gs = [r[model]["groups"][0] for r in rs]
            ax.plot(x, [bound(g, "epsilon_lower_fdp") for g in gs], "o-", color=colour, label=f"{name}: f-DP analysis")
            ax.plot(x, [bound(g, "epsilon_lower") for g in gs], "s--", mfc="none", color=colour,
                    label=f"{name}: (ε, δ) analysis")
            if model == "white_box":
                ax.plot(x, [bound(g, "epsilon_lower_gaussian") for g in gs], "^-", color="C1",
                        label=f"{name}: means and spreads (not distribution-free)")
        ax.set_title(f"{title}, one run each")
        ax.set_xlabel("claimed ε (δ = 1e-5)")
        ax.set_xlim(0, 8.5)
        ax.set_ylim(0, 8.5)
    axes[0].set_ylabel("audited lower bound on ε (95 %)")
    axes[0].legend(fontsize=8)
    fig.suptitle("One-run audits of real MNIST training runs: 1,000 gradient canaries (white-box) and 1,000 input canaries (black-box)")
    fig.tight_layout()
    out = HERE / "threat-models.png"
    fig.savefig(out, dpi=110)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
