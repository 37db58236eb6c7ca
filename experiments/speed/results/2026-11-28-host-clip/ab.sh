#!/usr/bin/env bash
# The burn engine on flex, 4,096 examples: burn-host-rows (every row written to the host, the
# clip before this change) against burn (the rows kept, dpgd's host kernels), alternating, ROUNDS
# rounds; each line: round, engine, min and median of 5 steps (s). From the repository root:
#   DPGD=target/release/dpgd experiments/speed/results/2026-11-28-host-clip/ab.sh > ab.txt
D=${DPGD:-target/release/dpgd}
DATA=${DPGD_DATASETS:-../shared/datasets}/mnist
for r in $(seq 1 ${ROUNDS:-8}); do
  for e in burn-host-rows burn; do
    $D bench-step --device flex --chunk 64 --threads 2 --examples 4096 --reps 5 --data $DATA --engine $e 2>/dev/null | tail -1 |
      python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print('$r', '$e', d['step_s']['min'], d['step_s']['median'])"
  done
done
