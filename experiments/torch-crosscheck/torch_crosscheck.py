"""An independent PyTorch implementation of private GD with individual filtering (Feldman &
Zrnic 2021, Algorithm 3) on MNIST with the Opacus example CNN at PyTorch's default initialisation.

It exists to check that what dpgd's runs show (e.g. the suboptimal regime's plateau after step
k = B_norm/C^2) is a property of the algorithm and set-up, not of dpgd's code: same data
normalisation, clip C, absolute noise std, budget B_norm = k C^2, update
theta -= lr (sum of clipped gradients + noise) / n. Per-example gradients by torch.func.

NON-PRIVATE DIAGNOSTIC: it logs exact training accuracy, exact active-point counts and test
accuracy every few steps; nothing it prints may be published as a private result.

    PY=$HOME/.cache/peers-venv/bin/python      # ../shared/peers/install.sh
    $PY experiments/torch-crosscheck/torch_crosscheck.py --clip 1.5 --noise-std 162.469 --k 44 \
        --max-steps 88 --lr 2.0 --seed 1 --out experiments/torch-crosscheck/subopt-eps0.3.csv

(run from the repository root; the committed CSVs beside this script and the commands that made
them are in README.md here)
"""
import argparse
import csv
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

HERE = os.path.dirname(os.path.abspath(__file__))
# ../shared/peers relative to the repository root (this file is in experiments/torch-crosscheck/)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "shared", "peers"))
import mnist_data  # noqa: E402  (the peers' IDX loader, normalised like the Opacus example)
from bench_torch import SampleConvNet  # noqa: E402  (the Opacus MNIST example network)


def accuracy(model, x, y, chunk=4096):
    with torch.no_grad():
        return sum((model(x[i:i + chunk]).argmax(1) == y[i:i + chunk]).sum().item()
                   for i in range(0, len(x), chunk)) / len(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clip", type=float, required=True)
    ap.add_argument("--noise-std", type=float, required=True, help="absolute std of the noise on the sum")
    ap.add_argument("--k", type=int, required=True, help="worst-case steps: B_norm = k C^2")
    ap.add_argument("--max-steps", type=int, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    xtr, ytr = (torch.from_numpy(v) for v in mnist_data.load("train"))
    xte, yte = (torch.from_numpy(v) for v in mnist_data.load("test"))
    n = len(xtr)
    model = SampleConvNet()
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss_one(prm, x, y):
        return F.cross_entropy(functional_call(model, prm, (x.unsqueeze(0),)), y.unsqueeze(0))

    per_example = vmap(grad(loss_one), in_dims=(None, 0, 0))
    budget = a.k * a.clip ** 2
    spent = torch.zeros(n, dtype=torch.float64)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w", newline="") as f:
        log = csv.writer(f)
        log.writerow(["step", "test_accuracy", "train_accuracy_exact", "active_exact", "seconds"])
        for step in range(1, a.max_steps + 1):
            t0 = time.time()
            total = {k: torch.zeros_like(v) for k, v in params.items()}
            for lo in range(0, n, a.chunk):
                g = per_example(params, xtr[lo:lo + a.chunk], ytr[lo:lo + a.chunk])
                sq = sum(v.flatten(1).pow(2).sum(1) for v in g.values()).double()
                norm = sq.sqrt()
                left = (budget - spent[lo:lo + a.chunk]).clamp(min=0.0)
                target = torch.minimum(torch.minimum(norm, torch.full_like(norm, a.clip)), left.sqrt())
                scale = torch.where(norm > 0, target / norm, torch.zeros_like(norm))
                spent[lo:lo + a.chunk] += target ** 2
                for k, v in g.items():
                    total[k] += torch.einsum("b,b...->...", scale.float(), v)
            with torch.no_grad():
                for k, v in params.items():
                    noisy = total[k] + a.noise_std * torch.randn_like(v)
                    v -= a.lr * noisy / n
            if step % a.every == 0 or step == a.k:
                active = int((spent < budget * (1 - 1e-9)).sum())
                row = [step, accuracy(model, xte, yte), accuracy(model, xtr, ytr), active,
                       round(time.time() - t0, 2)]
                log.writerow(row)
                f.flush()
                print(*row, flush=True)


if __name__ == "__main__":
    main()
