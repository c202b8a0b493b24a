"""Accuracy of every anchor method side by side on the real Open LLM Leaderboard v1 data.

Runs the leak-proof protocol (``sparseeval.estimate.evaluation``) for each benchmark, method, K and seed
(one model split per seed, shared by all methods), under two protocols side by side:

* ``random``: test models drawn at random (in distribution);
* ``frontier``: train on the models at or below the ``--frontier-quantile`` quantile of the score,
  test on the stronger rest (validation and calibration from the training side only): the models a
  refresh exists for.

With a calibration share (``--calibration-frac``, default 0.2 of the fitting side, as ``sparseeval
fit`` holds out) each run also reports the product's intervals and flags: bias, coverage, mean
half-width, the share flagged and the silent misses (outside the interval, not flagged). Prints
mean +- sd over seeds and writes the per-run CSV, the summary CSV and a PNG (MAE vs K).

    python bench/accuracy.py --k 20 --seeds 3                          # both protocols, K=20
    python bench/accuracy.py --protocols random --calibration-frac 0   # the old point-MAE grid
    python bench/accuracy.py --no-guard ...                            # flags as before the guard
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import polars as pl

from sparseeval.data.access.sources import open_data
from sparseeval.estimate.evaluation import DEFAULT_METHODS, EvalResult, results_frame, summarize
from sparseeval.interfaces.commands.evaluate import add_arguments, compare, protocol_config
from sparseeval.publish.report import plot_mae_vs_k, print_table, protocol_markdown, versus_best_baseline

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "openllm_v1"


def main(argv: list[str] | None = None) -> int:
    # the CLI's own comparison arguments (one front end), with the bench's larger default grid
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap, data=DEFAULT_DATA, method=list(DEFAULT_METHODS), k=[20], seeds=3, calibration_frac=0.2)
    ap.add_argument("--protocols", default="random,frontier",
                    help="split policies to run side by side, comma-separated (default random,frontier)")
    ap.add_argument("--no-guard", action="store_true",
                    help="flag by the answer-pattern distance alone, as predictors before the extrapolation guard")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument("--from-csv", type=Path, nargs="+", metavar="CSV",
                    help="no runs: summarize these accuracy_runs.csv files (e.g. of runs split across machines)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.from_csv:
        frame = pl.concat([pl.read_csv(p) for p in args.from_csv], how="diagonal_relaxed")
        frame.write_csv(args.out / "accuracy_runs.csv")
    else:
        frame = results_frame(_run(args))
    summary = summarize(frame)
    summary.write_csv(args.out / "accuracy_summary.csv")
    (args.out / "accuracy_summary.md").write_text(protocol_markdown(summary), encoding="utf-8")
    _report(args, summary)
    print(f"\n{frame.height} runs in {time.perf_counter() - t0:.0f} s; wrote {args.out}/accuracy_*.csv, .md and .png")
    return 0


def _run(args: argparse.Namespace) -> list[EvalResult]:
    """Every protocol of ``--protocols`` on the data, one after the other (same seeds, same methods)."""
    results: list[EvalResult] = []
    with open_data(args.data) as data:
        for policy in [p.strip() for p in args.protocols.split(",") if p.strip()]:
            args.split = policy
            config = replace(protocol_config(args), guard=not args.no_guard)
            done = list(results)
            # write as we go: a long run interrupted still leaves its finished benchmarks
            results += compare(args, data, config=config, on_benchmark=lambda rs, done=done: results_frame(
                [*done, *rs]).write_csv(args.out / "accuracy_runs.csv"))
    return results


def _report(args: argparse.Namespace, summary: pl.DataFrame) -> None:
    """The PNG (random protocol) and the printed tables."""
    policies = summary.get_column("split_policy").unique().sort().to_list()
    plot_mae_vs_k(summary.filter(pl.col("split_policy") == "random") if "random" in policies else summary,
                  args.out / "accuracy_mae_vs_k.png")
    interval = [c for c in ("bias_mean", "coverage_mean", "halfwidth_mean", "flagged_mean", "silent_misses_mean")
                if c in summary.columns]
    table = summary.select(
        "split_policy", "benchmark", "k", "method",
        pl.format("{} ± {}", pl.col("mae_mean").round(2), pl.col("mae_sd").round(2)).alias("MAE (pts)"),
        *[pl.col(c).round(3).alias(c.removesuffix("_mean")) for c in interval],
        pl.col("tau_mean").round(3).alias("tau"),
        pl.col("seconds_mean").round(2).alias("s/run"),
    ).sort("split_policy", "benchmark", "k", "method")
    print_table(table)
    for policy in policies:
        print(f"\n{policy}: SparseEval vs the best baseline (target: mae_ratio <= 0.8, tau >= best baseline tau)")
        print_table(versus_best_baseline(summary.filter(pl.col("split_policy") == policy)))


if __name__ == "__main__":
    sys.exit(main())
