"""Opacus 1.6's MNIST DP-SGD recipe (opacus/examples/mnist.py), timed: the same CNN, Poisson
sampling at 240/60000, clip 1.5, sigma 1.3, plain SGD lr 0.25, 15 epochs; prints the test
accuracy after every epoch with the wall time since training started, then Opacus's epsilon.

    $PY experiments/sgd-vs-opacus/opacus_mnist.py [--epochs 15] [--out FILE.csv]
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from opacus import PrivacyEngine

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "peers"))
import mnist_data  # noqa: E402
from bench_torch import SampleConvNet  # noqa: E402


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum()) for i in range(0, len(x), 1000))
    model.train()
    return correct / len(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch", type=int, default=240)
    ap.add_argument("--sigma", type=float, default=1.3)
    ap.add_argument("--clip", type=float, default=1.5)
    ap.add_argument("--lr", type=float, default=0.25)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    xtr, ytr = (torch.from_numpy(v) for v in mnist_data.load("train"))
    xte, yte = (torch.from_numpy(v) for v in mnist_data.load("test"))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xtr, ytr), batch_size=a.batch)
    model = SampleConvNet()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0)
    engine = PrivacyEngine(accountant="rdp")
    model, opt, loader = engine.make_private(
        module=model, optimizer=opt, data_loader=loader, noise_multiplier=a.sigma, max_grad_norm=a.clip,
        poisson_sampling=True)
    rows = ["epoch,seconds,test_accuracy"]
    start = time.perf_counter()
    for epoch in range(1, a.epochs + 1):
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        train_s = time.perf_counter() - start
        acc = accuracy(model, xte, yte)
        rows.append(f"{epoch},{train_s:.2f},{acc:.4f}")
        print(f"epoch {epoch}: {train_s:.1f} s, test accuracy {acc:.4f}", flush=True)
        start += time.perf_counter() - start - train_s  # evaluation time is not training time
    eps = engine.get_epsilon(a.delta)
    print(f"epsilon = {eps:.5f} at delta = {a.delta} (Opacus RDP accountant)")
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    main()
