#!/usr/bin/env bash
# The honest frontier: independent private searches per cell, each (epsilon, 1e-5)-DP as a whole,
# its choice of hyperparameters included. Finished searches are kept; a killed one resumes.
#   experiments/frontier-private-search/run.sh                      # every cell, three searches each
#   DATASETS=mnist EPSILONS=1 SEARCHES=1 experiments/frontier-private-search/run.sh
#   BASE=bandmf experiments/frontier-private-search/run.sh          # the same over bandmf-<dataset>.toml (BandMF with filtering)
#   python3 experiments/frontier-private-search/report.py           # the table and the plot
set -euo pipefail
cd "$(dirname "$0")/../.."
here=experiments/frontier-private-search
bin="${DPGD_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release -p dpgd-cli
    bin="${CARGO_TARGET_DIR:-target}/release/dpgd"
fi
for e in ${EPSILONS:-1 3}; do
    for d in ${DATASETS:-mnist fashion-mnist}; do
        for i in $(seq 1 "${SEARCHES:-3}"); do
            out="$here/results/${BASE:+$BASE-}$d-eps$e-$i"
            [ -f "$out/publishable/search.json" ] && continue
            echo "== ${BASE:+$BASE on }$d at epsilon $e, search $i"
            "$bin" sweep "$here/${BASE:+$BASE-}$d.toml" --select private --epsilon "$e" --delta 1e-5 --out "$out" --quiet
        done
    done
done
