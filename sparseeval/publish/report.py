"""Figures and text summaries of evaluation results (shared by bench/ and the pipeline)."""

from __future__ import annotations

from pathlib import Path

import polars as pl


def print_table(table: pl.DataFrame, *, width: int = 160) -> None:
    """Print a table in full: every row and column, no shape or dtype lines (terminal reports)."""
    with pl.Config(tbl_rows=-1, tbl_cols=-1, float_precision=3, tbl_hide_dataframe_shape=True,
                   tbl_hide_column_data_types=True, tbl_width_chars=width):
        print(table)


def plot_mae_vs_k(summary: pl.DataFrame, out: str | Path) -> Path:
    """MAE (mean +- sd over seeds) against K, one panel per benchmark, one line per method.

    ``summary`` is :func:`sparseeval.estimate.evaluation.summarize` output.
    """
    import matplotlib  # imported here: only plotting needs it, not every command that prints a table

    matplotlib.use("Agg")  # files only: never needs a display, also inside Dagster workers
    import matplotlib.pyplot as plt

    out = Path(out)
    benchmarks = sorted(summary["benchmark"].unique().to_list())
    fig, axes = plt.subplots(1, len(benchmarks), figsize=(4.2 * len(benchmarks), 3.6), squeeze=False)
    for ax, bench in zip(axes[0], benchmarks, strict=True):
        part = summary.filter(pl.col("benchmark") == bench)
        for method in sorted(part["method"].unique().to_list()):
            rows = part.filter(pl.col("method") == method).sort("k")
            ax.errorbar(rows["k"].to_list(), rows["mae_mean"].to_list(),
                        yerr=rows["mae_sd"].fill_null(0).to_list(), marker="o", ms=3, capsize=2,
                        label=method, linewidth=2.2 if method.startswith("sparseeval") else 1.0)
        ax.set_title(bench)
        ax.set_xlabel("K anchors")
        ax.set_ylabel("test MAE (points)")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def versus_best_baseline(summary: pl.DataFrame) -> pl.DataFrame:
    """SparseEval rows beside the best baseline's mean MAE and tau at the same (benchmark, k)."""
    base = summary.filter(~pl.col("method").str.starts_with("sparseeval"))
    best = base.group_by("benchmark", "k").agg(pl.col("mae_mean").min().alias("best_baseline_mae"),
                                               pl.col("tau_mean").max().alias("best_baseline_tau"))
    se = summary.filter(pl.col("method").str.starts_with("sparseeval")).join(best, on=["benchmark", "k"])
    return se.select("benchmark", "k", "method", pl.col("mae_mean").round(2).alias("mae"),
                     pl.col("best_baseline_mae").round(2),
                     (pl.col("mae_mean") / pl.col("best_baseline_mae")).round(3).alias("mae_ratio"),
                     pl.col("tau_mean").round(3).alias("tau"), pl.col("best_baseline_tau").round(3),
                     ).sort("benchmark", "k", "method")


def protocol_markdown(summary: pl.DataFrame) -> str:
    """One markdown table per protocol (split policy) of :func:`sparseeval.estimate.evaluation.summarize` output:
    MAE (mean +- sd over seeds) and, when measured, bias, coverage, half-width, share flagged and share
    missed silently (outside the interval, not flagged); for ``docs/results``."""
    cols = [("mae", "MAE (pts)"), ("bias", "bias (pts)"), ("coverage", "coverage"), ("halfwidth", "half-width"),
            ("flagged", "flagged"), ("silent_misses", "silent misses")]
    present = [(c, h) for c, h in cols if f"{c}_mean" in summary.columns]
    parts = []
    for policy in summary.get_column("split_policy").unique().sort().to_list():
        rows = summary.filter(pl.col("split_policy") == policy).sort("benchmark", "k", "mae_mean")
        head = ["benchmark", "K", "method", "seeds", *[h for _, h in present]]
        lines = [f"### {policy}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in rows.iter_rows(named=True):
            cells = [r["benchmark"], str(r["k"]), r["method"], str(r["seeds"])]
            for c, _ in present:
                mean, sd = r[f"{c}_mean"], r.get(f"{c}_sd")
                digits = 2 if c in ("mae", "bias", "halfwidth") else 3
                cells.append("-" if mean is None else f"{mean:.{digits}f}" + (f" ± {sd:.{digits}f}" if c == "mae"
                                                                             and sd is not None else ""))
            lines.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"
