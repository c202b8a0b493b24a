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
from tqdm import tqdm

from sparseeval.evaluation import DEFAULT_METHODS, ProtocolConfig, results_frame, run_protocol, summarize
from sparseeval.matrix import build_matrix
from sparseeval.report import plot_mae_vs_k, print_table, versus_best_baseline
from sparseeval.sources import read_data

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "openllm_v1"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--benchmarks", default="arc,gsm8k,hellaswag,mmlu,truthfulqa")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    ap.add_argument("--k", default="10,20,30,50")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--test-frac", type=float, default=0.2)
    ap.add_argument("--val-frac", type=float, default=0.1)
    ap.add_argument("--split", default="random", choices=("random", "family", "date"))
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)

    parsed = read_data(args.data)
    methods = args.methods.split(",")
    ks = [int(k) for k in args.k.split(",")]
    seeds = list(range(args.seeds))
    config = ProtocolConfig(split_policy=args.split, val_frac=args.val_frac, test_frac=args.test_frac)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    benchmarks = args.benchmarks.split(",")
    t0 = time.perf_counter()
    with tqdm(total=len(benchmarks) * len(methods) * len(ks) * len(seeds), file=sys.stderr) as bar:
        for bench in benchmarks:
            matrix = build_matrix(parsed.responses, parsed.scores, bench)
            def tick(r: object) -> None:
                bar.set_postfix_str(f"{r.benchmark} {r.method} k={r.k}")  # type: ignore[attr-defined]
                bar.update(1)

            results += run_protocol(matrix, methods, ks, seeds, config=config, progress=tick)
            # write as we go: a long run interrupted still leaves its finished benchmarks
            results_frame(results).write_csv(args.out / "accuracy_runs.csv")
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
