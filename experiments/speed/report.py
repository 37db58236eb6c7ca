"""Prints the speed table from experiments/speed/results/*.json (written by run.sh)."""
import json, os, sys

out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None

ours = load("dpgd-60000.json")
t = ours["step_s"]["median"]
rows = [("dpgd (this project), filtered", t, ours["peak_rss_mib"])]
for name, label in [("opacus.json", "Opacus 1.x hooks, chunk 256"), ("func.json", "torch.func vmap(grad), chunk 1024")]:
    r = load(name)
    if r:
        rows.append((label, r["results"]["step_s"]["median"], r["peak_rss_mib"]))
plain = load("plain.json")
if plain:
    eps = plain["results"]["1024"]["ex_per_s_median"]
    rows.append(("PyTorch NON-private batched gradient", 60000 / eps, None))
print("| full private step, 60,000 MNIST examples | median s/step | examples/s | dpgd speed-up | peak RSS MiB |")
print("|---|---|---|---|---|")
for label, s, mem in rows:
    print(f"| {label} | {s:.2f} | {60000 / s:,.0f} | {s / t:.2f}x | {'' if mem is None else f'{mem:.0f}'} |")
print()
print("| dpgd examples | s/step | peak RSS MiB |")
print("|---|---|---|")
for n in (10000, 30000, 60000):
    r = load(f"dpgd-{n}.json")
    if r:
        print(f"| {n} | {r['step_s']['median']:.2f} | {r['peak_rss_mib']:.0f} |")
for m in ("mlp", "logistic"):
    r = load(f"dpgd-{m}.json")
    if r:
        print(f"| {m} ({r['params']} params), 60000 | {r['step_s']['median']:.3f} | {r['peak_rss_mib']:.0f} |")
