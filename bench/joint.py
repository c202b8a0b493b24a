"""Joint anchors vs per-benchmark anchors at the same total budget on the real leaderboard data.

Runs :func:`sparseeval.estimate.evaluation.run_joint_protocol` (models that have every benchmark, one split per
seed shared by every method; the joint method spends K x benchmarks items, each per-benchmark method K
per benchmark) and prints, per benchmark and for the mean score, MAE and Kendall tau (mean +- sd over
seeds), the joint / per-benchmark MAE ratio (goal: at most 0.8) and the seconds per fit. Also reads the
JSON of ``sparseeval evaluate ... --json`` instead of running (``--from-json``).

    python bench/joint.py [--k 20] [--seeds 5] [--baseline sparseeval-mlp] [--from-json RUNS.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import polars as pl

from sparseeval.data.access.sources import read_data
from sparseeval.data.matrix import build_matrix
from sparseeval.estimate.evaluation import ProtocolConfig, results_frame, run_joint_protocol

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "openllm_v1"
JOINT = "sparseeval-joint"


def table(runs: pl.DataFrame, baseline: str) -> pl.DataFrame:
    """One row per benchmark (``mean`` last): joint and baseline MAE/tau (mean, sd), ratio, seconds."""
    agg = runs.group_by("benchmark", "method").agg(
        pl.len().alias("seeds"), pl.col("mae").mean().alias("mae"), pl.col("mae").std().alias("mae_sd"),
        pl.col("tau").mean().alias("tau"), pl.col("tau").std().alias("tau_sd"),
        pl.col("seconds").mean().alias("seconds"))
    j = agg.filter(pl.col("method") == JOINT).drop("method")
    b = agg.filter(pl.col("method") == baseline).drop("method", "seeds")
    out = j.join(b, on="benchmark", suffix="_base").with_columns(
        (pl.col("mae") / pl.col("mae_base")).alias("ratio"))
    return out.sort(pl.col("benchmark") == "mean", "benchmark")


def markdown(t: pl.DataFrame, baseline: str) -> str:
    lines = [f"| benchmark | joint MAE | {baseline} MAE | ratio | joint tau | {baseline} tau | joint s/fit "
             f"| {baseline} s/fit |", "|---|---|---|---|---|---|---|---|"]
    def sd(value: float | None) -> str:  # one seed has no spread (polars' std is null)
        return "-" if value is None else f"{value:.2f}"

    for r in t.iter_rows(named=True):
        lines.append(f"| {r['benchmark']} | {r['mae']:.2f} +- {sd(r['mae_sd'])} | {r['mae_base']:.2f} +- "
                     f"{sd(r['mae_sd_base'])} | {r['ratio']:.2f} | {r['tau']:.3f} | {r['tau_base']:.3f} | "
                     f"{r['seconds']:.0f} | {r['seconds_base']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--benchmarks", default="arc,gsm8k,hellaswag,mmlu,truthfulqa")
    ap.add_argument("--baseline", default="sparseeval-mlp")
    ap.add_argument("--k", type=int, default=20, help="items per benchmark")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--from-json", type=Path, help="summarise the records of `sparseeval evaluate --json` instead")
    ap.add_argument("--out", type=Path, help="write the summary as CSV (and the markdown table beside it)")
    args = ap.parse_args(argv)
    if args.from_json:
        runs = pl.DataFrame([{k: v for k, v in r.items() if k != "anchors"}
                             for r in json.loads(args.from_json.read_text())])
    else:
        parsed = read_data(args.data)
        mats = [build_matrix(parsed.responses, parsed.scores, b) for b in args.benchmarks.split(",")]
        res = run_joint_protocol(mats, [JOINT, args.baseline], [args.k], range(args.seeds),
                                 config=ProtocolConfig(), device=args.device,
                                 progress=lambda r: print(f"{r.benchmark} {r.method} seed={r.seed} mae={r.mae:.2f}",
                                                          file=sys.stderr, flush=True))
        runs = results_frame(res)
    t = table(runs, args.baseline)
    md = markdown(t, args.baseline)
    print(md)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        t.write_csv(args.out)
        args.out.with_suffix(".md").write_text(md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
