#!/usr/bin/env bash
# Both threat models on real training runs: the shipped filtered-GD config on 10,000 MNIST examples
# and the DP-SGD config on all 60,000 (Opacus's recipe: batches of 240) at epsilon = 1, 2, 4, 8
# (DP-SGD's sigma calibrated in place of its 1.3), each run
# auditing itself with 1,000 gradient canaries (white-box: every noisy update) and 1,000 input
# canaries (black-box: the published model only), 95% confidence each.
# Writes experiments/audit/threat-models/results.jsonl and both audits' plots of one run, then the
# table and plot (experiments/audit/threat_models_report.py, which needs matplotlib for the plot).
# The cost: each config at epsilon = 4 once more without any canaries (the seconds column).
# Run from the repository root: experiments/audit/threat-models.sh  (about 4 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q
out=experiments/audit/threat-models
mkdir -p "$out"
: > "$out/results.jsonl"
group='[.groups[] | {claimed_epsilon, epsilon_lower: .bound.epsilon_lower, statistic, consistent, epsilon_lower_fdp: .fdp.epsilon_lower, fdp_family: .fdp.family, epsilon_lower_gaussian: .gaussian.epsilon_lower, gaussian_family: .gaussian.family, gaussian_parameter: .gaussian.parameter, epsilon_as_claimed: .gaussian.epsilon_as_claimed}]'
audit() { # name config [--set ...]
    local name=$1 config=$2
    shift 2
    local run
    run=$(mktemp -d)
    local start=$SECONDS
    ./target/release/dpgd train --config "$config" --quiet --out "$run" --audit canaries=1000,inputs=1000 "$@" > /dev/null
    jq -n -c --arg name "$name" --arg commit "$(git rev-parse --short HEAD)" --argjson seconds $((SECONDS - start)) \
        --slurpfile white "$run/confidential/audit.json" --slurpfile black "$run/confidential/audit-inputs.json" \
        --slurpfile result "$run/publishable/result.json" \
        "{name: \$name, commit: \$commit, seconds: \$seconds, method: \$white[0].method, steps: \$white[0].steps,
          test_accuracy: \$result[0].test_accuracy,
          white_box: {canaries: \$white[0].canaries, groups: (\$white[0] | $group)},
          black_box: {canaries: \$black[0].canaries, groups: (\$black[0] | $group)}}" >> "$out/results.jsonl"
    # The score distributions of one run (the rest are alike): filtered GD at epsilon = 8.
    if [ "$name" = filtered-eps8 ]; then
        cp "$run/confidential/audit.png" "$out/$name-white-box.png"
        cp "$run/confidential/audit-inputs.png" "$out/$name-black-box.png"
    fi
    rm -rf "$run"
}
plain() { # name config [--set ...]: the seconds of the run without canaries
    local name=$1 config=$2
    shift 2
    local run start=$SECONDS
    run=$(mktemp -d)
    ./target/release/dpgd train --config "$config" --quiet --out "$run" "$@" > /dev/null
    jq -n -c --arg name "$name" --argjson seconds $((SECONDS - start)) '{name: $name, seconds: $seconds, unaudited: true}' \
        >> "$out/results.jsonl"
    rm -rf "$run"
}
filtered=(configs/mnist-filtered.toml --set data.train_subset=10000)
sgd=(configs/mnist-sgd.toml --unset privacy.sigma)
for eps in 1 2 4 8; do
    audit "filtered-eps$eps" "${filtered[@]}" --set privacy.epsilon=$eps
done
for eps in 1 2 4 8; do
    audit "sgd-eps$eps" "${sgd[@]}" --set privacy.epsilon=$eps
done
plain filtered-eps4 "${filtered[@]}" --set privacy.epsilon=4
plain sgd-eps4 "${sgd[@]}" --set privacy.epsilon=4
python3 experiments/audit/threat_models_report.py
