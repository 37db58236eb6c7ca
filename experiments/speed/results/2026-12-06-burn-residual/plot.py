"""Bar chart of results.jsonl beside it: the residual GroupNorm model's full private step on the
burn engine before and after, and Opacus 1.6, round by round (medians, min-max bars).
   python3 experiments/speed/results/2026-12-06-burn-residual/plot.py"""
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = Path(__file__).parent
rows = [json.loads(line) for line in (here / "results.jsonl").read_text().splitlines() if line.strip()]
residual = [r for r in rows if r["model"] == "residual"]
rounds = sorted({r["round"] for r in residual})
runs = [("opacus", "Opacus 1.6"), ("before", "burn engine before"), ("after", "burn engine after")]
fig, ax = plt.subplots(figsize=(7, 4))
width = 0.27
for i, rnd in enumerate(rounds):
    for j, (run, label) in enumerate(runs):
        s = next(r["step_s"] for r in residual if r["round"] == rnd and r["run"] == run)
        x = i + (j - 1) * width
        ax.bar(x, s["median"], width, color=f"C{j}", label=label if i == 0 else None)
        ax.errorbar(x, s["median"], yerr=[[s["median"] - s["min"]], [s["max"] - s["median"]]], color="black", capsize=3)
        ax.text(x, s["max"] + 0.15, f"{s['median']:.2f}", ha="center", fontsize=8)
ax.set_xticks(range(len(rounds)), [f"round {r}" for r in rounds])
ax.set_ylabel("full private step over 60,000 examples (s)")
ax.set_title("residual GroupNorm model, back to back (2-core Xeon)")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(here / "plot.png", dpi=120)
