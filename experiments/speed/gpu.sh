#!/usr/bin/env bash
# The private step on a GPU machine, in one call (about 6 minutes): dpgd's burn engine on wgpu
# over 60,000 MNIST examples (rows clipped and summed on the device) at several chunks and
# thread counts, and, where $BEFORE names an earlier build of `dpgd`, that build at the same
# settings on the same card; Opacus on CUDA on the same card at the same chunks; the residual
# GroupNorm model (examples/custom_model.rs) on both; the peak GPU memory of each; then the
# device-clip exactness tests and the burn engine's tests on the GPU.
#
# Needs, on the GPU machine: $BIN with `dpgd` and any of `custom_model` and the test binaries
# `cube_kernels`, `device_clip`, `engine_contract`, `burn_engine` (those present are run), built
# elsewhere and carried over:
#     cargo build --release --features wgpu --bins --example custom_model
#     cargo test --release --features wgpu --no-run --test cube_kernels --test device_clip \
#         --test engine_contract --test burn_engine
# (each stripped; with an earlier `dpgd` the six pack to about 39 MB with
# `xz -9e --lzma2=preset=9e,dict=512MiB`: the dictionary spans them all);
# $MNIST_DIR (the four MNIST IDX files); $PEERS_DIR (../shared/peers: bench_torch.py,
# mnist_data.py); python3 with torch (CUDA) and opacus; a Vulkan loader. Optional: $BEFORE (an
# earlier `dpgd`), $VARIANTS (names: each `$BIN/dpgd-NAME`, another build timed at every
# setting beside this one; on a fresh machine each build's first process spends about 100 s
# tuning its kernels, so a call has room for few), $WITHOUT (lists of dpgd's own kernels, e.g.
# "conv-weight-rows clip-sum,block-square-sums": each a variant of this build that leaves those
# to burn's operations, `dpgd bench-step --without-kernels LIST`; one build, one tuning),
# $CHUNKS (default "1024 2048 4096 256"), $THREADS (default "16 4"), $PROFILE_CHUNK (a kernel
# profile), $PHASES_CHUNKS (one micro-batch's time phase by phase, `dpgd bench-step --phases`,
# at each of these chunks).
# Writes $OUT/results.jsonl (one JSON object per measurement), $OUT/gpu.log, $OUT/tests.log,
# $OUT/profile.txt and $OUT/profile-last.txt.
set -uo pipefail
: "${BIN:?}" "${MNIST_DIR:?}" "${PEERS_DIR:?}" "${OUT:?}"
export MNIST_DIR PEERS_DIR
cd "$(dirname "$0")/../.."
log="$OUT/gpu.log"
results="$OUT/results.jsonl"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$log"
nproc >> "$log"

# Runs "$@" with its stdout appended to results.jsonl (with the peak GPU memory it used, sampled
# every 100 ms by nvidia-smi, added as "peak_gpu_used_mib"), its stderr to the log.
measure() {
    local label=$1
    shift
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$OUT/.mem" &
    local mon=$!
    local t0=$SECONDS
    "$@" > "$OUT/.json" 2>> "$log"
    local rc=$?
    kill "$mon" 2> /dev/null
    wait "$mon" 2> /dev/null
    local mem
    mem=$(sort -n "$OUT/.mem" | tail -1)
    python3 - "$label" "$rc" "${mem:-0}" "$((SECONDS - t0))" "$OUT/.json" >> "$results" <<'PY'
import json, sys
label, rc, mem, wall, path = sys.argv[1:]
text = open(path).read().strip().splitlines()
try:
    body = json.loads(text[-1]) if text else {}
except ValueError:
    body = {"output": text[-3:]}
print(json.dumps({"label": label, "rc": int(rc), "peak_gpu_used_mib": int(mem), "wall_s": int(wall), **body}))
PY
    echo "$label: rc $rc, $((SECONDS - t0)) s" | tee -a "$log"
    [ "$rc" -ne 124 ]
}

# Each $WITHOUT list as a variant: a wrapper around this build, `$BIN/dpgd-without-LIST`.
for w in ${WITHOUT:-}; do
    printf '#!/bin/sh\nexec "%s/dpgd" "$@" --without-kernels %s\n' "$BIN" "$w" > "$BIN/dpgd-without-$w"
    chmod +x "$BIN/dpgd-without-$w"
    VARIANTS="${VARIANTS:-} without-$w"
done

# One micro-batch phase by phase, one thread.
for c in ${PHASES_CHUNKS:-}; do
    for v in "" ${VARIANTS:-}; do
        measure "phases${v:+-$v}-wgpu-$c" timeout 120 "$BIN/dpgd${v:+-$v}" bench-step --engine burn --device wgpu \
            --chunk "$c" --reps 20 --phases --data "$MNIST_DIR"
    done
done

# Opacus first, then at each setting the earlier build (if any) and this one. A build that runs
# past its limit once is not run again.
for c in ${CHUNKS:-1024 2048 4096 256}; do
    measure "opacus-cuda-$c" python3 experiments/speed/gpu_opacus.py --chunk "$c" --reps 3
done
# dpgd_step BINARY ENGINE CHUNK THREADS
dpgd_step() {
    timeout 120 "$1" bench-step --engine "$2" --device wgpu --chunk "$3" --threads "$4" --examples 60000 --reps 3 \
        --data "$MNIST_DIR"
}
stuck=""
for c in ${CHUNKS:-1024 2048 4096 256}; do
    for t in ${THREADS:-16 4}; do
        if [ -n "${BEFORE:-}" ] && [[ $stuck != *before* ]]; then
            measure "dpgd-before-wgpu-$c-t$t" dpgd_step "$BEFORE" burn "$c" "$t" || stuck+=" before"
        fi
        if [[ $stuck != *now* ]]; then
            measure "dpgd-wgpu-$c-t$t" dpgd_step "$BIN/dpgd" burn "$c" "$t" || stuck+=" now"
        fi
        for v in ${VARIANTS:-}; do
            if [[ $stuck != *" $v "* ]]; then
                measure "dpgd-$v-wgpu-$c-t$t" dpgd_step "$BIN/dpgd-$v" burn "$c" "$t" || stuck+=" $v "
            fi
        done
    done
done

# The residual GroupNorm model: three steps of the example's private run, timed by the run.
residual() {
    local run
    run=$(mktemp -d)
    timeout 150 "$BIN/custom_model" --device wgpu --chunk 1024 --data "$MNIST_DIR" --worst-case-steps 3 --max-steps 3 \
        --out "$run/run" >&2 || return 1
    python3 - "$run/run/confidential/steps.jsonl" <<'PY'
import json, statistics, sys
s = [json.loads(l)["seconds"] for l in open(sys.argv[1])]
print(json.dumps({"model": "residual-groupnorm", "engine": "burn", "device": "wgpu", "chunk": 1024,
                  "examples": 60000, "step_s": {"median": statistics.median(s), "min": min(s), "max": max(s), "n": len(s)}}))
PY
}
if [ -x "$BIN/custom_model" ]; then
    measure "dpgd-wgpu-residual-1024" residual
    measure "opacus-cuda-residual-1024" python3 experiments/speed/residual_opacus.py --device cuda --chunk 1024 --reps 3
fi

# Optional: where one thread's steps spend GPU time, from CubeCL's kernel profile (every kernel
# timed, so serialised; the warm-up's autotuning included), at chunk $PROFILE_CHUNK.
if [ -n "${PROFILE_CHUNK:-}" ]; then
    prof=$(mktemp -d)
    printf '[profiling.logger]\nlevel = "basic"\nfile = "%s/profile.log"\n' "$prof" > "$prof/cubecl.toml"
    (cd "$prof" && timeout 150 "$BIN/dpgd" bench-step --engine burn --device wgpu --chunk "$PROFILE_CHUNK" --threads 1 \
        --examples 16384 --reps 4 --data "$MNIST_DIR") >> "$log" 2>&1
    python3 experiments/speed/cubecl_profile.py "$prof/profile.log" --top 40 > "$OUT/profile.txt"
    # About the last step alone (70 launches a micro-batch, after the warm-up's autotuning), and
    # the last launches in order.
    n=$(( (16384 + PROFILE_CHUNK - 1) / PROFILE_CHUNK * 70 ))
    python3 experiments/speed/cubecl_profile.py "$prof/profile.log" --last "$n" --sum --top 40 >> "$OUT/profile-last.txt"
    python3 experiments/speed/cubecl_profile.py "$prof/profile.log" --last 90 >> "$OUT/profile-last.txt"
fi

# Exactness on the GPU's own arithmetic, after the timings: dpgd's kernels against their
# definitions, the adversarial rows, the engine contract (the device sum against the host's) and
# the burn engine's tests, wgpu among their devices.
for t in cube_kernels device_clip engine_contract burn_engine; do
    [ -x "$BIN/$t" ] || continue
    echo "== $t" >> "$OUT/tests.log"
    timeout 150 "$BIN/$t" --test-threads 1 >> "$OUT/tests.log" 2>&1
    echo "$t: rc $?" | tee -a "$log"
done
rm -f "$OUT/.mem" "$OUT/.json"
