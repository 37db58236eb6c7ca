"""Opacus's full private step for the residual CNN with GroupNorm of
examples/custom_model.rs (a model dpgd's fast engine cannot express): per-example
gradients (GradSampleModule hooks), clip, sum over all 60k MNIST examples in chunks, one noise
draw, one update. Reuses the peer benchmark's helpers (../shared/peers/bench_torch.py).

    $PEERS_VENV/bin/python experiments/speed/residual_opacus.py --out experiments/speed/results/opacus-residual.json
    python3 experiments/speed/residual_opacus.py --device cuda --chunk 1024   # on a GPU, synchronised
"""
import argparse, json, os, statistics, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("PEERS_DIR", os.path.join(HERE, "..", "..", "..", "shared", "peers")))
import bench_torch as bt  # noqa: E402
import mnist_data as md  # noqa: E402


class ResidualNet(nn.Module):
    """The example's model: stem conv (stride 2) -> GroupNorm -> ReLU, a residual block of
    conv -> GroupNorm -> ReLU, 2x2 average pooling, a linear head (10,394 parameters at width 16)."""

    def __init__(self, width=16, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(1, width, 3, stride=2, padding=1)
        self.norm1 = nn.GroupNorm(4, width)
        self.conv = nn.Conv2d(width, width, 3, padding=1)
        self.norm2 = nn.GroupNorm(4, width)
        self.head = nn.Linear(width * 7 * 7, classes)

    def forward(self, x):
        h = F.relu(self.norm1(self.stem(x)))
        h = h + F.relu(self.norm2(self.conv(h)))
        return self.head(F.avg_pool2d(h, 2).flatten(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (model, data and sums on the GPU)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    gen = torch.Generator(device=dev).manual_seed(1)
    xtr, ytr = md.load("train")
    X, Y = torch.from_numpy(xtr).to(dev), torch.from_numpy(ytr).to(dev)
    model = ResidualNet().to(dev)
    pe, params = bt.make_opacus(model)
    N, times = X.shape[0], []
    for rep in range(a.warmup + a.reps):
        sync()
        t0 = time.perf_counter()
        acc = [torch.zeros_like(p) for p in params]
        for s in range(0, N, a.chunk):
            for A, G in zip(acc, bt.clip_and_sum(pe(X[s:s + a.chunk], Y[s:s + a.chunk]), 1.0)):
                A.add_(G)
        with torch.no_grad():
            for p, g in zip(params, acc):
                p.add_(g + torch.normal(0.0, 1.0, size=g.shape, generator=gen, device=dev), alpha=-1.0 / N)
        sync()
        dt = time.perf_counter() - t0
        print(f"opacus residual fullstep rep {rep}: {dt:.2f} s", flush=True)
        if rep >= a.warmup:
            times.append(dt)
    import opacus
    res = {"framework": "torch", "torch": torch.__version__, "opacus": opacus.__version__, "method": "opacus",
           "model": "residual-groupnorm",
           "nparams": sum(p.numel() for p in model.parameters()), "threads": torch.get_num_threads(),
           "device": torch.cuda.get_device_name() if cuda else "cpu",
           "results": {"chunk": a.chunk, "step_s": bt.stats(times)}, "peak_rss_mib": md.peak_rss_mib()}
    if cuda:
        res["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    print(f"median {statistics.median(times):.2f} s, peak RSS {res['peak_rss_mib']:.0f} MiB", flush=True)
    print(json.dumps(res))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
