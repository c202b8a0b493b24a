"""Accuracy of every anchor method side by side on the real Open LLM Leaderboard v1 data.

Runs the leak-proof protocol (``sparseeval.evaluation``) for each benchmark, method, K and seed
(one random model split per seed, shared by all methods), prints MAE and Kendall tau as
mean +- sd over seeds, and writes the per-run CSV, the summary CSV and a PNG (MAE vs K per
benchmark, one line per method).

    python bench/accuracy.py                       # 5 benchmarks, K=10,20,30,50, 5 seeds
    python bench/accuracy.py --k 20 --seeds 5      # the headline table only
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import polars as pl

from sparseeval.commands.evaluate import add_arguments, compare
from sparseeval.evaluation import DEFAULT_METHODS, results_frame, summarize
from sparseeval.report import plot_mae_vs_k, print_table, versus_best_baseline
from sparseeval.sources import open_data

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "openllm_v1"


def main(argv: list[str] | None = None) -> int:
    # the CLI's own comparison arguments (one front end), with the bench's larger default grid
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap, data=DEFAULT_DATA, method=list(DEFAULT_METHODS), k=[10, 20, 30, 50], seeds=5)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    # --benchmark extends a list (as in every command): the bench's default applies when none is given
    args.benchmark = args.benchmark or ["arc", "gsm8k", "hellaswag", "mmlu", "truthfulqa"]
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open_data(args.data) as data:
        # write as we go: a long run interrupted still leaves its finished benchmarks
        results = compare(args, data, on_benchmark=lambda rs: results_frame(rs).write_csv(
            args.out / "accuracy_runs.csv"))
    summary = summarize(results)
    summary.write_csv(args.out / "accuracy_summary.csv")
    plot_mae_vs_k(summary, args.out / "accuracy_mae_vs_k.png")

    table = summary.select(
        "benchmark", "k", "method",
        pl.format("{} ± {}", pl.col("mae_mean").round(2), pl.col("mae_sd").round(2)).alias("MAE (pts)"),
        pl.format("{} ± {}", pl.col("tau_mean").round(3), pl.col("tau_sd").round(3)).alias("tau"),
        pl.col("seconds_mean").round(2).alias("s/run"),
    ).sort("benchmark", "k", "method")
    print_table(table)
    print("\nSparseEval vs the best baseline (target: mae_ratio <= 0.8, tau >= best baseline tau)")
    print_table(versus_best_baseline(summary))
    print(f"\n{len(results)} runs in {time.perf_counter() - t0:.0f} s; "
          f"wrote {args.out}/accuracy_*.csv and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
