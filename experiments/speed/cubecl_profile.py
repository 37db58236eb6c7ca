"""Where a wgpu step's GPU time goes, from CubeCL's own kernel profile.

Run a `dpgd` built with `--features wgpu` from a folder holding a `cubecl.toml` of

    [profiling.logger]
    level = "basic"          # or "full": each launch also gives its kernel's settings and cube count
    file = "/tmp/profile.log"

and CubeCL times every kernel it launches (serialising them: the total is an upper bound of the
unprofiled step's GPU time). This script sums the log's launches by kernel name and prints a
table, largest first; with `--last N` it lists the last N launches in order instead (one
micro-batch's kernels, say), each with its time and, at level "full", its cube count, and their
total; with `--last N --sum` it sums only those N by kernel (the last step's, after the
warm-up's autotuning):

    python3 experiments/speed/cubecl_profile.py /tmp/profile.log --top 25
    python3 experiments/speed/cubecl_profile.py /tmp/profile.log --last 70
    python3 experiments/speed/cubecl_profile.py /tmp/profile.log --last 560 --sum
"""
import argparse, collections, re

UNITS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
LINE = re.compile(r"^\|\s*([0-9.]+)\s*(ns|µs|us|ms|s)\s*\|\s*([^|]+?)\s*(?:\||$)")


def short(name):
    """A kernel's name without its module path and generic arguments ("full" level's names are
    paths such as `cubek_matmul::…::MatmulEntry<…>: MatmulEntryInfo {`), with the operation of
    burn's generic element-wise kernels (`KernelBinop(MulOp)`)."""
    base = name.split("<")[0].split(": ")[0].split("::")[-1]
    op = re.findall(r"::(\w+Op|\w+Unary|Copy)>", name)
    return f"{base}({op[-1]})" if op else base


def launches(path):
    """(seconds, name, cube count or "") of every launch in the log, in order."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                out.append([float(m.group(1)) * UNITS[m.group(2)], short(m.group(3)), ""])
            elif out and "CubeCount" in line:
                out[-1][2] = line.split("CubeCount")[-1].strip()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--last", type=int, default=0, help="list the last N launches in order")
    ap.add_argument("--sum", action="store_true", help="with --last N: sum those N by kernel")
    a = ap.parse_args()
    all_launches = launches(a.log)
    if a.last and not a.sum:
        tail = all_launches[-a.last:]
        for seconds, name, cubes in tail:
            print(f"{1e3 * seconds:10.3f} ms  {name:45s} {cubes}")
        print(f"{1e3 * sum(s for s, _, _ in tail):10.3f} ms  in all, {len(tail)} launches")
        return
    if a.last:
        all_launches = all_launches[-a.last:]
    total, count = collections.Counter(), collections.Counter()
    for seconds, name, _ in all_launches:
        total[name] += seconds
        count[name] += 1
    all_s = sum(total.values())
    print(f"{sum(count.values())} kernel launches, {all_s:.3f} s of GPU time")
    print(f"{'seconds':>9} {'share':>6} {'launches':>9}  kernel")
    for name, s in total.most_common(a.top):
        print(f"{s:9.4f} {100 * s / all_s:5.1f}% {count[name]:9d}  {name}")


if __name__ == "__main__":
    main()
