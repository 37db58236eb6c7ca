"""Writes MNIST's training split repeated to N examples (raw IDX) beside its test split: a
dataset large enough for the data-parallel throughput benchmark. Not for training anything that
is published (each example appears many times).

Usage: python3 replicate.py SRC_DIR DST_DIR N
"""
import gzip
import os
import shutil
import struct
import sys


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.read()


def find(src, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(src, name)
        if os.path.exists(p):
            return p
    raise SystemExit(f"replicate.py: no {stem}(.gz) in {src}")


def main():
    src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.makedirs(dst, exist_ok=True)
    images = read(find(src, "train-images-idx3-ubyte"))
    labels = read(find(src, "train-labels-idx1-ubyte"))
    count, rows, cols = struct.unpack(">III", images[4:16])
    px = rows * cols
    body, lab = images[16:], labels[8:]
    with open(os.path.join(dst, "train-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, rows, cols))
        left = n
        while left > 0:
            k = min(left, count)
            f.write(body[: k * px])
            left -= k
    with open(os.path.join(dst, "train-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 2049, n))
        left = n
        while left > 0:
            k = min(left, count)
            f.write(lab[:k])
            left -= k
    for stem in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        p = find(src, stem)
        shutil.copy(p, os.path.join(dst, os.path.basename(p)))


if __name__ == "__main__":
    main()
