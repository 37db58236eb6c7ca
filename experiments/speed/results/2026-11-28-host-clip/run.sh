#!/usr/bin/env bash
# The burn engine's CPU step, one build, three ways of clipping, interleaved, on flex:
#   burn-host-rows              every row written to the host, exact norms, the host clip (the
#                               default on the CPU before this change);
#   burn                        the rows kept, the norms' blocks and the integer sum by dpgd's host
#                               kernels (the default now);
#   burn --without-kernels host-clip
#                               the rows kept, the same steps by burn's tensor operations (what
#                               `--engine burn-device-rows` timed before).
# Then the full private step over 60,000 MNIST examples against Opacus on the CPU, back to back.
# Run from the repository root:
#   DPGD=target/release/dpgd experiments/speed/results/2026-11-28-host-clip/run.sh
set -u
DPGD=${DPGD:-target/release/dpgd}
PY=${PEERS_VENV:-$HOME/.cache/peers-venv}/bin/python
DATA=${DPGD_DATASETS:-../shared/datasets}/mnist
OUT=${OUT:-experiments/speed/results/2026-11-28-host-clip}
step() { # examples reps label args...
  local n=$1 reps=$2 label=$3; shift 3
  echo "== $label ($n examples)" >&2
  "$DPGD" bench-step --device flex --chunk 64 --threads 2 --examples "$n" --reps "$reps" --data "$DATA" "$@" 2>/dev/null |
    tail -1 | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); d['label']='$label'; print(json.dumps(d))"
}
for r in 1 2 3; do
  step 4096 3 host-rows --engine burn-host-rows
  step 4096 3 host-clip --engine burn
  step 4096 3 burn-ops --engine burn --without-kernels host-clip
done > "$OUT/steps-4096.jsonl"
for r in 1 2; do
  step 60000 2 host-rows --engine burn-host-rows
  step 60000 2 host-clip --engine burn
  step 60000 2 burn-ops --engine burn --without-kernels host-clip
  echo "== opacus" >&2
  /usr/bin/time -f '%M' -o "$OUT/opacus-$r.rss" "$PY" ../shared/peers/bench_torch.py --mode fullstep --method opacus \
    --chunk 256 --warmup 1 --reps 2 --out "$OUT/opacus-$r.json" > /dev/null 2>&1
done > "$OUT/steps-60000.jsonl"
