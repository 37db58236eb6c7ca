#!/usr/bin/env bash
# The one-run audit of the shipped configs' training mechanisms: filtered GD (configs/mnist-filtered.toml)
# and DP-SGD (configs/mnist-sgd.toml, sigma calibrated in place of its 1.3) at epsilon = 1, 2, 4, 8,
# 5,000 gradient canaries each, 95% confidence. Writes experiments/audit/one-run/results.jsonl and one audit.png per run.
# Run from the repository root: experiments/audit/one-run.sh  (about 2 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q
out=experiments/audit/one-run
mkdir -p "$out"
: > "$out/results.jsonl"
audit() { # name config [--set ...]
    local name=$1 config=$2
    shift 2
    ./target/release/dpgd audit --config "$config" --canaries 5000 --out "$out/$name" --json "$@" \
        | jq -c --arg name "$name" --arg commit "$(git rev-parse --short HEAD)" \
            '{name: $name, commit: $commit, method, canaries, steps, groups: [.groups[] | {claimed_epsilon, epsilon_lower: .bound.epsilon_lower, statistic, consistent, epsilon_lower_gaussian: .gaussian.epsilon_lower, gaussian_family: .gaussian.family, gaussian_parameter: .gaussian.parameter, epsilon_as_claimed: .gaussian.epsilon_as_claimed, epsilon_lower_fdp: .fdp.epsilon_lower, fdp_family: .fdp.family, fdp_parameter: .fdp.parameter}]}' \
        >> "$out/results.jsonl"
    rm -f "$out/$name/audit.json"
}
for eps in 1 2 4 8; do
    audit "filtered-eps$eps" configs/mnist-filtered.toml --set privacy.epsilon=$eps
done
for eps in 1 2 4 8; do
    audit "sgd-eps$eps" configs/mnist-sgd.toml --unset privacy.sigma --set privacy.epsilon=$eps
done
cat "$out/results.jsonl"
