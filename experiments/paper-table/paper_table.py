#!/usr/bin/env python3
"""The paper-table sweep's results in the layout of Feldman & Zrnic 2021, §5.1, next to the
paper's numbers.

    python3 experiments/paper-table/paper_table.py [TABLE [REBUILT]]  > table.md

TABLE and REBUILT are study folders or their results folders (default:
experiments/paper-table and experiments/paper-table-eps1.0-k400). Reads the results.jsonl
written by `dpgd sweep experiments/paper-table/sweep.toml` and, where it has been run, by
`dpgd sweep experiments/paper-table-eps1.0-k400/sweep.toml` (the epsilon = 1.0 rows rebuilt
from tuned k = 400; printed under the table's own epsilon = 1.0 rows, marked "k400"). GD is the
test accuracy after k = B_norm/C^2 steps of each run (exactly plain private GD with the same
sigma); "filtered" is the model the stopping rule returned. Mean ± sample std over the seeds
finished so far. sigma, C and k are those of each run's accounting (privacy.json's
`accounting.training`), the learning rate that of its publishable/config.toml where the run's
folder is there, else its case's `train.lr` in the study's sweep.toml (per-run folders are not
committed: a fresh clone has only results.jsonl). The runs use
fixed noise seeds and are therefore not private (their `epsilon` is null); the epsilon they are
accounted for is `epsilon_of_configuration`.
"""

import json
import statistics
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

PAPER = {  # (regime, epsilon) -> (GD, GD with filtering), mean ± std over 10 trials
    ("tuned", "0.3"): ((93.29, 0.49), (93.64, 0.46)),
    ("tuned", "0.5"): ((94.62, 0.43), (94.90, 0.26)),
    ("tuned", "1.0"): ((96.25, 0.23), (96.25, 0.23)),
    ("suboptimal", "0.3"): ((84.47, 3.95), (92.25, 0.91)),
    ("suboptimal", "0.5"): ((92.07, 2.07), (94.30, 0.58)),
    ("suboptimal", "1.0"): ((94.45, 0.45), (95.33, 0.34)),
}

REGIMES = {  # case prefix -> (label, the paper's regime it is compared with)
    "tuned": ("tuned", "tuned"),
    "suboptimal": ("suboptimal, lr as tuned", "suboptimal"),
    "suboptimal-scaled-lr": ("suboptimal, lr·C as tuned", "suboptimal"),
}


def pm(xs):
    if not xs:
        return "–"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.2f} ± {sd:.2f}"


# Marks the rows of the ε = 1.0 rebuild from tuned k = 400 (experiments/paper-table-eps1.0-k400).
REBUILT = " (k400)"
ROWS = ("0.3", "0.5", "1.0", "1.0" + REBUILT)


def results(folder):
    """A study folder's results folder (or the results folder itself)."""
    folder = Path(folder)
    return folder if (folder / "results.jsonl").exists() or folder.name == "results" else folder / "results"


def load(folder, cells, suffix=""):
    """Adds `folder`'s runs to `cells`, keyed by (conversion, regime, row): the row is ε + suffix."""
    for line in (folder / "results.jsonl").read_text().splitlines():
        row = json.loads(line)
        row["folder"] = folder
        regime, eps = row["point"]["case"].split("-eps")
        conversion = row["point"]["privacy.conversion"]
        cells[(conversion, regime, eps + suffix)].append(row)


def lr(row):
    """A run's learning rate: its publishable/config.toml's where the run's folder is there (it
    is not committed), else its case's (or the [set] block's) in the study's sweep.toml."""
    config = row["folder"] / "runs" / row["id"] / "publishable" / "config.toml"
    if config.exists():
        return tomllib.loads(config.read_text())["train"]["lr"]
    sweep = tomllib.loads((row["folder"].parent / "sweep.toml").read_text())
    case = sweep.get("cases", {}).get(row["point"].get("case"), {})
    return case.get("train.lr", sweep.get("set", {}).get("train.lr"))


def main():
    table = results(sys.argv[1] if len(sys.argv) > 1 else "experiments/paper-table")
    rebuilt = results(sys.argv[2] if len(sys.argv) > 2 else "experiments/paper-table-eps1.0-k400")
    cells = defaultdict(list)
    load(table, cells)
    if (rebuilt / "results.jsonl").exists():
        load(rebuilt, cells, suffix=REBUILT)
    for conversion in ("bun-steinke", "gaussian-exact"):
        print(f"\n**sigma calibrated with `{conversion}`**\n")
        print(
            "| regime | ε | C | k | σ | lr | seeds | GD (%) | GD w/ filtering (%) | filtered ≥ GD "
            "| paper GD | paper filtered | ≥ paper − std (GD / filtered) |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for regime, (label, paper_regime) in REGIMES.items():
            for eps in ROWS:
                rows = cells.get((conversion, regime, eps), [])
                if eps.endswith(REBUILT) and not rows:
                    continue
                gd = [100 * r["test_accuracy_at_k"] for r in rows]
                filt = [100 * r["test_accuracy"] for r in rows]
                (pg, pgs), (pf, pfs) = PAPER[(paper_regime, eps.removesuffix(REBUILT))]
                if rows:
                    p = rows[0]["privacy"]["accounting"]["training"]
                    setup = f"{p['clip']:g} | {p['worst_case_steps']} | {p['sigma']:.2f} | {lr(rows[0]):g}"
                    better = "yes" if statistics.mean(filt) >= statistics.mean(gd) else "**no**"
                    near = " / ".join(
                        "yes" if statistics.mean(ours) >= mean - sd else "**no**"
                        for ours, mean, sd in ((gd, pg, pgs), (filt, pf, pfs))
                    )
                else:
                    setup, better, near = "| | |", "–", "–"
                print(
                    f"| {label} | {eps} | {setup} | {len(rows)} | {pm(gd)} | {pm(filt)} | {better} "
                    f"| {pg:.2f} ± {pgs:.2f} | {pf:.2f} ± {pfs:.2f} | {near} |"
                )


if __name__ == "__main__":
    main()
