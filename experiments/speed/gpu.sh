#!/usr/bin/env bash
# The private step on a GPU machine, in one call (about 8 minutes): the device-clip exactness
# tests on the GPU; dpgd's burn engine on wgpu over 60,000 MNIST examples (rows clipped and summed
# on the device at chunks 256 / 1024 / 4096, and at 1024 with every row copied to the host as
# before); Opacus on CUDA on the same card at the same chunks; the residual GroupNorm model
# (examples/custom_model.rs) on both; the peak GPU memory of each.
#
# Needs, on the GPU machine: $BIN with `dpgd`, `custom_model` and the test binaries
# `device_clip`, `engine_contract`, `burn_engine`, built elsewhere and carried over:
#     cargo build --release --features wgpu --bins --example custom_model
#     cargo test --release --features wgpu --no-run --test device_clip --test engine_contract --test burn_engine
# (each stripped; the five pack to about 25 MB with `xz -9e --lzma2=preset=9e,dict=1536MiB`);
# $MNIST_DIR (the four MNIST IDX files); $PEERS_DIR (../shared/peers: bench_torch.py,
# mnist_data.py); python3 with torch (CUDA) and opacus; a Vulkan loader. Writes
# $OUT/results.jsonl (one JSON object per measurement), $OUT/gpu.log and $OUT/tests.log.
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
}

# Exactness on the GPU's own arithmetic: the adversarial rows, the engine contract (the device
# sum against the host's) and the burn engine's tests, wgpu among their devices.
for t in device_clip engine_contract; do
    echo "== $t" >> "$OUT/tests.log"
    "$BIN/$t" --test-threads 1 >> "$OUT/tests.log" 2>&1
    echo "$t: rc $?" | tee -a "$log"
done

dpgd_step() {
    "$BIN/dpgd" bench-step --engine "$1" --device wgpu --chunk "$2" --examples 60000 --reps 3 --data "$MNIST_DIR"
}
for c in 1024 4096 256; do
    measure "dpgd-wgpu-device-rows-$c" dpgd_step burn "$c"
done
measure "dpgd-wgpu-host-rows-1024" dpgd_step burn-host-rows 1024
for c in 1024 4096 256; do
    measure "opacus-cuda-$c" python3 experiments/speed/gpu_opacus.py --chunk "$c" --reps 3
done

# The residual GroupNorm model: three steps of the example's private run, timed by the run.
residual() {
    local run
    run=$(mktemp -d)
    "$BIN/custom_model" --device wgpu --chunk 1024 --data "$MNIST_DIR" --worst-case-steps 3 --max-steps 3 \
        --out "$run/run" >&2 || return 1
    python3 - "$run/run/confidential/steps.jsonl" <<'PY'
import json, statistics, sys
s = [json.loads(l)["seconds"] for l in open(sys.argv[1])]
print(json.dumps({"model": "residual-groupnorm", "engine": "burn", "device": "wgpu", "chunk": 1024,
                  "examples": 60000, "step_s": {"median": statistics.median(s), "min": min(s), "max": max(s), "n": len(s)}}))
PY
}
measure "dpgd-wgpu-residual-1024" residual
measure "opacus-cuda-residual-1024" python3 experiments/speed/residual_opacus.py --device cuda --chunk 1024 --reps 3

# The burn engine's own tests on the GPU last (the longest).
echo "== burn_engine" >> "$OUT/tests.log"
"$BIN/burn_engine" --test-threads 1 >> "$OUT/tests.log" 2>&1
echo "burn_engine: rc $?" | tee -a "$log"
rm -f "$OUT/.mem" "$OUT/.json"
