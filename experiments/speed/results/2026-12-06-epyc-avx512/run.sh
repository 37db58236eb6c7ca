#!/usr/bin/env bash
# Every speed goal of the per-example engines on one machine, back to back with Opacus 1.6, round
# by round: the Opacus CNN (Opacus at chunk 256; dpgd's fast engine at its default chunk 4; the
# burn engine, the same CNN as burn modules of dpgd::nn layers, at chunk $BURN_CHUNK, by default
# 16, its default on the CPU) and the residual GroupNorm model of configs/mnist-residual.toml
# (Opacus at chunk 256, experiments/speed/residual_opacus.py; the burn engine at $BURN_CHUNK; the
# fast engine, which runs it as a sequence of its kinds). One full private step over 60,000
# MNIST examples, three timed steps after a warm-up. Build the binary with
# `cargo build --release -p dpgd-cli` and pass it:
#   DPGD=target/release/dpgd ROUNDS=3 experiments/speed/results/2026-12-06-epyc-avx512/run.sh
#   DPGD=… BURN_CHUNK=64 OUT=results-chunk64.jsonl …/run.sh    # the first run, at 916fdbc
# Writes one JSON line per measurement to $OUT (results.jsonl; about 3 min a round on 2 cores)
# and the CPU's model line and flags to cpu.txt.
set -euo pipefail
here=${HERE:-experiments/speed/results/2026-12-06-epyc-avx512}
out=$here/${OUT:-results.jsonl}
chunk=${BURN_CHUNK:-16}
data=${DPGD_DATASETS:-../shared/datasets}/mnist
py=${PEERS_VENV:-$HOME/.cache/peers-venv}/bin/python
: "${DPGD:?the dpgd binary to time}"
rounds=${ROUNDS:-3}
{ lscpu | grep -E 'Model name|^CPU\(s\)|L1d|L2|L3'; grep -m1 -o -w -E 'avx512f' /proc/cpuinfo || echo "no avx512f"; } > "$here/cpu.txt"
: > "$out"
record() { # round model run, then the JSON of one measurement on stdin
  jq -c --arg r "$1" --arg m "$2" --arg e "$3" '{round: ($r | tonumber), model: $m, run: $e, step_s: (.step_s // .results.step_s)}' >> "$out"
  tail -1 "$out"
}
dpgd() { # round model run args...
  "$DPGD" bench-step --examples 60000 --reps 3 --data "$data" "${@:4}" 2>/dev/null | record "$1" "$2" "$3"
}
opacus() { # round model script args...
  local tmp; tmp=$(mktemp)
  MNIST_DIR=$data $py "$3" "${@:4}" --reps 3 --out "$tmp" > /dev/null 2>&1
  record "$1" "$2" opacus < "$tmp"
  rm -f "$tmp"
}
for round in $(seq 1 "$rounds"); do
  opacus "$round" cnn ../shared/peers/bench_torch.py --mode fullstep --method opacus --chunk 256 --warmup 1
  dpgd "$round" cnn fast
  dpgd "$round" cnn burn --engine burn --chunk "$chunk"
  opacus "$round" residual experiments/speed/residual_opacus.py
  dpgd "$round" residual burn --engine burn --chunk "$chunk" --model-config configs/mnist-residual.toml
  dpgd "$round" residual fast --model-config configs/mnist-residual.toml
done
