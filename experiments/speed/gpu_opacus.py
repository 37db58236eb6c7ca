"""Opacus's full private step on a CUDA GPU: the peers' Opacus CNN and clipping
(../shared/peers/bench_torch.py, or $PEERS_DIR), with the model, the data and the clipped sum on
the GPU, timed with torch.cuda.synchronize. Writes one JSON object like bench_torch.py's.

    python3 experiments/speed/gpu_opacus.py --chunk 1024 --reps 5 --out opacus-gpu.json
"""
import argparse, json, os, statistics, sys, time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("PEERS_DIR", os.path.join(HERE, "..", "..", "..", "shared", "peers")))
import bench_torch as bt  # noqa: E402
import mnist_data as md  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    xtr, ytr = md.load("train")
    X, Y = torch.from_numpy(xtr).to(dev), torch.from_numpy(ytr).to(dev)
    model = bt.SampleConvNet().to(dev)
    pe, params = bt.make_opacus(model)
    gen = torch.Generator(device=dev).manual_seed(1)
    n, steps = X.shape[0], []
    for rep in range(a.warmup + a.reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        acc = [torch.zeros_like(p) for p in params]
        for s in range(0, n, a.chunk):
            grads = pe(X[s:s + a.chunk], Y[s:s + a.chunk])
            for A, G in zip(acc, bt.clip_and_sum(grads, 1.0)):
                A.add_(G)
            del grads
        with torch.no_grad():
            for p, g in zip(params, acc):
                p.add_(g + torch.normal(0.0, 1.0, size=g.shape, generator=gen, device=dev), alpha=-1.0 / n)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        print(f"opacus gpu fullstep chunk={a.chunk} rep {rep}: {dt:.3f} s", flush=True)
        if rep >= a.warmup:
            steps.append(dt)
    import opacus
    res = {"framework": "torch", "torch": torch.__version__, "opacus": opacus.__version__, "device": torch.cuda.get_device_name(),
           "mode": "fullstep", "method": "opacus", "examples": n,
           "results": {"chunk": a.chunk, "step_s": bt.stats(steps)},
           "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20}
    print(json.dumps(res))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
