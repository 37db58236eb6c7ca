"""Bar chart of the raw files beside it (run 2): the burn engine's full private step before and
after dpgd's host operations, and Opacus 1.6 first and last, per model (medians, min-max bars).
   python3 experiments/speed/results/2026-12-06-host-ops/plot.py"""
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = Path(__file__).parent


def dpgd(name):
    s = json.loads((here / name).read_text())["step_s"]
    return s["median"], s["min"], s["max"]


def opacus(name):
    if name.endswith(".json"):
        s = json.loads((here / name).read_text())["results"]["step_s"]
        return s["median"], s["min"], s["max"]
    m = re.search(r"median ([\d.]+) s \[min ([\d.]+), max ([\d.]+)\]", (here / name).read_text())
    return tuple(float(v) for v in m.groups())


models = {
    "Opacus CNN": ("cnn", ".txt"),
    "residual GroupNorm": ("residual", ".json"),
}
bars = ["burn engine before", "burn engine after", "Opacus 1.6 (first)", "Opacus 1.6 (last)"]
fig, ax = plt.subplots(figsize=(7, 4))
width = 0.2
for m, (model, (prefix, ext)) in enumerate(models.items()):
    values = [
        dpgd(f"{prefix}-burn-before.json"),
        dpgd(f"{prefix}-burn-after.json"),
        opacus(f"{prefix}-opacus-before{ext}"),
        opacus(f"{prefix}-opacus-after{ext}"),
    ]
    for b, (med, lo, hi) in enumerate(values):
        x = m + (b - 1.5) * width
        ax.bar(x, med, width, color=f"C{b}", label=bars[b] if m == 0 else None)
        ax.errorbar(x, med, yerr=[[med - lo], [hi - med]], color="black", capsize=3)
        ax.text(x, hi + 0.1, f"{med:.2f}", ha="center", fontsize=8)
ax.set_xticks(range(len(models)), list(models))
ax.set_ylabel("full private step over 60,000 examples (s)")
ax.set_title("dpgd's kernels inside burn's autodiff (2-core Xeon, run 2)")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(here / "plot.png", dpi=120)
