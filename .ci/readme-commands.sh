#!/usr/bin/env bash
# Runs every `cargo run --release -- …` command of README.md (and of experiments/tiny/README.md)
# in the order shown, in a scratch copy of the repository's inputs, with the test build's
# binary and smaller data so it takes a minute or two: the commands a newcomer copies must work
# one after the other. What is changed, per subcommand, is only the amount of data:
#   train: --set data.train_subset=1000 --set data.test_subset=500
#   sweep: --only privacy.epsilon=2.0 --only train.seed=1 (one of its runs); a private search
#          (--select private) runs whole: its file is small already
# Usage: .ci/readme-commands.sh [path/to/dpgd]  (default: $CARGO_TARGET_DIR/release/dpgd, which
# `cargo test --release` builds).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
dpgd="${1:-$target/release/dpgd}"
[ -x "$dpgd" ] || { echo "readme-commands: no binary at $dpgd (run cargo test --release first)" >&2; exit 1; }
# The dataset step's local source, as .cargo/config.toml sets it for cargo run.
export DPGD_DATASETS="${DPGD_DATASETS:-$root/../shared/datasets}"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/experiments"
cp -r "$root/configs" "$scratch/"
cp -r "$root/experiments/tiny" "$scratch/experiments/"
rm -rf "$scratch/experiments/tiny/results"
cd "$scratch"

commands() {
    # Indented code lines that start with `cargo run --release --`, comments dropped.
    sed -n 's/^    cargo run --release -- \(.*\)$/\1/p' "$1" | sed 's/ *#.*$//'
}

n=0
while IFS= read -r cmd; do
    n=$((n + 1))
    read -r -a args <<<"$cmd"
    extra=()
    case "${args[0]}" in
        train) extra=(--set data.train_subset=1000 --set data.test_subset=500) ;;
        sweep)
            case " ${args[*]} " in
                *" --select "*) extra=(--quiet) ;;
                *) extra=(--only privacy.epsilon=2.0 --only train.seed=1 --quiet) ;;
            esac ;;
    esac
    echo "readme-commands [$n] dpgd $cmd ${extra[*]}" >&2
    start=$SECONDS
    if ! "$dpgd" "${args[@]}" "${extra[@]}" >"$scratch/out.txt" 2>&1; then
        echo "readme-commands: FAILED: dpgd $cmd" >&2
        tail -20 "$scratch/out.txt" >&2
        exit 1
    fi
    echo "    ok ($((SECONDS - start)) s): $(tail -1 "$scratch/out.txt" | cut -c1-120)" >&2
done < <(commands "$root/README.md"; commands "$root/experiments/tiny/README.md")
[ "$n" -ge 10 ] || { echo "readme-commands: only $n commands found in the READMEs" >&2; exit 1; }
echo "readme-commands: all $n commands ran" >&2
