"""Where a wgpu step's GPU time goes, from CubeCL's own kernel profile.

Run a `dpgd` built with `--features wgpu` from a folder holding a `cubecl.toml` of

    [profiling.logger]
    level = "basic"
    file = "/tmp/profile.log"

and CubeCL times every kernel it launches (serialising them: the total is an upper bound of the
unprofiled step's GPU time). This script sums the log's lines (`| 12.3µs | name | variant`) by
kernel name and prints a table, largest first:

    python3 experiments/speed/cubecl_profile.py /tmp/profile.log --top 25
"""
import argparse, collections, re

UNITS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
LINE = re.compile(r"^\|\s*([0-9.]+)\s*(ns|µs|us|ms|s)\s*\|\s*([^|]+?)\s*(?:\||$)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    total, count = collections.Counter(), collections.Counter()
    with open(a.log, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                seconds = float(m.group(1)) * UNITS[m.group(2)]
                total[m.group(3)] += seconds
                count[m.group(3)] += 1
    all_s = sum(total.values())
    print(f"{sum(count.values())} kernel launches, {all_s:.3f} s of GPU time")
    print(f"{'seconds':>9} {'share':>6} {'launches':>9}  kernel")
    for name, s in total.most_common(a.top):
        print(f"{s:9.4f} {100 * s / all_s:5.1f}% {count[name]:9d}  {name}")


if __name__ == "__main__":
    main()
