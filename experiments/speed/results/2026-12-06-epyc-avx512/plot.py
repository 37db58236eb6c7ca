"""Bar chart of a results file of run.sh beside it: each model's full private step, round by
round, for Opacus 1.6 and dpgd's two engines (medians, min-max bars), with each engine's ratio
to Opacus, titled with the machine of the cpu.txt beside the file.
   python3 experiments/speed/results/2026-12-06-epyc-avx512/plot.py [results-chunk64.jsonl]
   python3 experiments/speed/results/2026-12-06-epyc-avx512/plot.py experiments/speed/results/<study>/results.jsonl
writes plot.png (plot-chunk64.png for results-chunk64.jsonl) beside the file."""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

arg = sys.argv[1] if len(sys.argv) > 1 else "results.jsonl"
path = Path(arg) if "/" in arg else Path(__file__).parent / arg
here, name = path.parent, path.name
rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
cpu = here / "cpu.txt"
machine = next((l.split(":", 1)[1].strip() for l in cpu.read_text().splitlines() if l.startswith("Model name")), "?") if cpu.exists() else "?"
cores = next((l.split(":", 1)[1].strip() for l in cpu.read_text().splitlines() if l.startswith("CPU(s)")), "?") if cpu.exists() else "?"
runs = [("opacus", "Opacus 1.6"), ("burn", "dpgd burn engine"), ("fast", "dpgd fast engine")]
fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
for ax, (model, title) in zip(axes, [("cnn", "Opacus CNN"), ("residual", "residual GroupNorm model")]):
    mine = [r for r in rows if r["model"] == model]
    rounds = sorted({r["round"] for r in mine})
    width = 0.27
    for i, rnd in enumerate(rounds):
        opacus = next(r["step_s"]["median"] for r in mine if r["round"] == rnd and r["run"] == "opacus")
        for j, (run, label) in enumerate(runs):
            s = next(r["step_s"] for r in mine if r["round"] == rnd and r["run"] == run)
            x = i + (j - 1) * width
            ax.bar(x, s["median"], width, color=f"C{j}", label=label if i == 0 else None)
            ax.errorbar(x, s["median"], yerr=[[s["median"] - s["min"]], [s["max"] - s["median"]]], color="black", capsize=3)
            text = f"{s['median']:.2f}" if run == "opacus" else f"{opacus / s['median']:.1f}×"
            ax.text(x, s["max"] + 0.2, text, ha="center", fontsize=8)
    ax.set_xticks(range(len(rounds)), [f"round {r}" for r in rounds])
    ax.set_title(f"{title} (ratio: Opacus's median / dpgd's)", fontsize=10)
    ax.set_ylabel("full private step over 60,000 examples (s)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3)
fig.suptitle(f"back to back on {cores} cores of {machine}", fontsize=11)
fig.tight_layout()
fig.savefig(here / name.replace("results", "plot").replace(".jsonl", ".png"), dpi=120)
