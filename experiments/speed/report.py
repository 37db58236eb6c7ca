"""Prints the speed table from experiments/speed/results/*.json (written by run.sh)."""
import json, os, sys

out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None

ours = load("dpgd-60000.json")
t = ours["step_s"]["median"]
rows = [("dpgd fast engine", t, ours["peak_rss_mib"])]
burn = load("dpgd-burn-60000.json")
if burn:
    rows.append((f"dpgd burn engine ({burn['device']}, chunk {burn['chunk']})", burn["step_s"]["median"], burn["peak_rss_mib"]))
fallback = load("dpgd-burn-fallback-4096.json")
if fallback:
    scaled = fallback["step_s"]["median"] * 60000 / fallback["examples"]
    rows.append((f"dpgd burn engine, one backward per example (4,096 examples, time x 60000/4096)", scaled, fallback["peak_rss_mib"]))
for name, label in [("opacus.json", "Opacus 1.x hooks, chunk 256"), ("func.json", "torch.func vmap(grad), chunk 1024")]:
    r = load(name)
    if r:
        rows.append((label, r["results"]["step_s"]["median"], r["peak_rss_mib"]))
plain = load("plain.json")
if plain:
    eps = plain["results"]["1024"]["ex_per_s_median"]
    rows.append(("PyTorch NON-private batched gradient", 60000 / eps, None))
opacus = load("opacus.json")
o = opacus["results"]["step_s"]["median"] if opacus else None
print("| full private step, 60,000 MNIST examples | median s/step | examples/s | time / fast engine's | Opacus's time / this | peak RSS MiB |")
print("|---|---|---|---|---|---|")
for label, s, mem in rows:
    ratio = "" if o is None else f"{o / s:.2f}x"
    print(f"| {label} | {s:.2f} | {60000 / s:,.0f} | {s / t:.2f}x | {ratio} | {'' if mem is None else f'{mem:.0f}'} |")
print()
# The fast engine against the machine: FP32 work per example counted from the model's products
# (Network::flops_per_example: forward, per-example weight gradient and input gradients, a
# multiply-add as two; 2.1 MFLOP for the Opacus CNN), and the practical peak measured in the same
# process (one 1024^3 gemm product per thread at once, the engine's own kernels).
print("| fast engine, 60,000 examples | threads | s/step | GFLOP/s (products) | GEMM peak GFLOP/s, same run | % of that peak |")
print("|---|---|---|---|---|---|")
for name in ("dpgd-60000-t1.json", "dpgd-60000.json"):
    r = load(name)
    if r and r.get("gflops"):
        print(f"| opacus-cnn, {r['flop_per_example'] / 1e6:.2f} MFLOP/example | {r['threads']} | {r['step_s']['median']:.3f} | "
              f"{r['gflops']:.0f} | {r['gemm_peak_gflops']:.0f} | {100 * r['gflops'] / r['gemm_peak_gflops']:.0f} % |")
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
for n in (10000, 60000):
    r = load(f"dpgd-burn-{n}.json")
    if r:
        print(f"| burn engine, {n} | {r['step_s']['median']:.2f} | {r['peak_rss_mib']:.0f} |")
ours, peer = load("dpgd-residual.json"), load("opacus-residual.json")
if ours and peer:
    a, b = ours["step_s"]["median"], peer["results"]["step_s"]["median"]
    print()
    print("| conv + GroupNorm + residual (10,394 params), full step over 60,000 | median s/step | Opacus / dpgd |")
    print("|---|---|---|")
    print(f"| dpgd burn engine ({ours['device']}, chunk {ours['chunk']}) | {a:.2f} | {b / a:.2f}x |")
    print(f"| Opacus {peer.get('opacus', '1.x')} hooks, chunk {peer['results']['chunk']} | {b:.2f} | 1.00x |")
