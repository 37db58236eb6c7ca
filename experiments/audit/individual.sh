#!/usr/bin/env bash
# Individual accounting, audited: filtered GD (configs/mnist-filtered.toml) on 10,000 MNIST examples at
# epsilon = 2, 4, 8, each run auditing itself with 9,000 gradient canaries in three groups of gradient
# norm C, C/2 and C/4. A group below the clip spends less than a full step's C^2 each step and is
# audited against the epsilon of what it spent (the run's claim for the full group). 95% confidence.
# Writes experiments/audit/individual/results.jsonl and one audit.png per run, then the table and plot
# (experiments/audit/individual_report.py, which needs matplotlib for the plot).
# Run from the repository root: experiments/audit/individual.sh  (about a minute on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q
out=experiments/audit/individual
mkdir -p "$out"
: > "$out/results.jsonl"
for eps in 2 4 8; do
    run=$(mktemp -d)
    ./target/release/dpgd train --config configs/mnist-filtered.toml --quiet --out "$run" \
        --set data.train_subset=10000 --set privacy.epsilon=$eps \
        --set 'audit.gradient_norms=[1.0, 0.5, 0.25]' --audit canaries=9000 > /dev/null
    jq -c --arg eps "$eps" --arg commit "$(git rev-parse --short HEAD)" \
        '{epsilon: ($eps | tonumber), commit: $commit, canaries, steps, groups: [.groups[] | {gradient_norm, claimed_epsilon, epsilon_lower: .bound.epsilon_lower, statistic, consistent, epsilon_lower_gaussian: .gaussian.epsilon_lower, epsilon_lower_fdp: .fdp.epsilon_lower}]}' \
        "$run/confidential/audit.json" >> "$out/results.jsonl"
    cp "$run/confidential/audit.png" "$out/eps$eps.png"
    rm -rf "$run"
done
python3 experiments/audit/individual_report.py
