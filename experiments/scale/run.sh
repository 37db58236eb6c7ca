#!/usr/bin/env bash
# Data-parallel throughput of the full private step (plain private GD, the Opacus CNN, the fast
# CPU engine): examples per second on 1, 2 and 4 MPI ranks over MNIST repeated to N examples
# (default 10^6), each rank with cores/ranks worker threads (at least 1). The figure is N over
# the median step time rank 0 records (confidential/steps.jsonl: charge, clip, sum, the
# all-reduce, noise and update; evaluations excluded), steps 2 on.
# Usage: experiments/scale/run.sh [RANKS...]   (default: 1 2 4; each appends a row to the day's
#   results.jsonl)
#   env: SCALE_EXAMPLES (10^6), SCALE_STEPS (4), DPGD_MPI_BIN (the dpgd binary built with
#   `cargo build --release --features mpi`).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
dpgd="${DPGD_MPI_BIN:-$target/release/dpgd}"
n="${SCALE_EXAMPLES:-1000000}"
steps="${SCALE_STEPS:-4}"
if [ $# -gt 0 ]; then ranks_list=("$@"); else ranks_list=(1 2 4); fi
cores="$(nproc)"
machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
out="experiments/scale/results/$(date +%F)-$(hostname)"
mkdir -p "$out"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
src="${DPGD_DATASETS:-$root/../shared/datasets}/mnist"
python3 experiments/scale/replicate.py "$src" "$scratch/data" "$n"
# --bind-to none: OpenMPI binds each of up to 2 ranks to one core by default, which would put all
# the threads of a 1-rank run on a single core.
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,tcp --mca btl_tcp_if_include lo)
touch "$out/results.jsonl"
for ranks in "${ranks_list[@]}"; do
    threads=$(( cores / ranks )); [ "$threads" -ge 1 ] || threads=1
    run="$scratch/run-$ranks"
    echo "scale: $ranks ranks x $threads threads on $n examples" >&2
    "${mpirun[@]}" -np "$ranks" "$dpgd" train --config configs/mnist-plain.toml --out "$run" --quiet \
        --set data.dir="$scratch/data" --set data.test_subset=1000 --unset privacy.epsilon --set privacy.sigma=20.0 --set privacy.delta=1e-7 \
        --set privacy.worst_case_steps="$steps" --set train.threads="$threads" --set train.eval_every=0 \
        > /dev/null 2>> "$out/scale.log"
    python3 - "$run/confidential/steps.jsonl" "$ranks" "$threads" "$n" "$cores" "$machine" >> "$out/results.jsonl" <<'PY'
import json, statistics, sys
path, ranks, threads, n, cores, machine = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
secs = [r["seconds"] for r in rows[1:]] or [rows[0]["seconds"]]
med = statistics.median(secs)
print(json.dumps({"ranks": int(ranks), "threads_per_rank": int(threads), "examples": int(n), "bind_to": "none",
                  "step_seconds_median": med, "step_seconds": secs, "examples_per_second": int(n) / med,
                  "cores": int(cores), "machine": machine}))
PY
    tail -1 "$out/results.jsonl" >&2
done
echo "$out/results.jsonl"
