"""The method comparison: its own operation, after publication, and on its own schedule when little changed.

The comparison (every method x K x seed on identical splits, :func:`sparseeval.estimate.evaluation.run_protocol`)
is what tells a maintainer which method to publish; it is the refresh's most expensive step (about
100 s at 7,000 models x 30,000 items even cut to its budget) and nothing published depends on it. So:

* it never runs before a publication: the pipeline runs it in its own job after the refresh, and
  :func:`compare_methods` is a separate call from :func:`sparseeval.publish.refresh_policy.refresh_benchmark`;
* it is **due** (:func:`comparison_due`) when the benchmark was never compared under the current
  comparison settings, or when the models added since the last comparison are at least
  ``compare_new_share`` of the benchmark (``$SPARSEEVAL_COMPARE_NEW_SHARE``, default 10 %): a day's few dozen
  models on a leaderboard of thousands cannot change which method wins, and the comparison of the
  day before still stands;
* otherwise it is **deferred** to its own weekly schedule, which compares every benchmark whose
  current data has not been compared yet (``scheduled=True``); the refresh says which happened.

Its key (data version and every comparison setting) makes it idempotent: a key already compared is
skipped. Within one comparison the published method's own cell reuses the refresh's fit on the same
data version (the costliest fit is never run twice).
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from sparseeval.core.settings import COMPARISON, RefreshSettings
from sparseeval.data.access.sources import model_dates
from sparseeval.data.matrix import ResponseMatrix
from sparseeval.data.names import slug
from sparseeval.data.store import Store, StoredComparison
from sparseeval.estimate.artifact import load_predictor
from sparseeval.estimate.budget import ComparisonPlan, comparison_plan
from sparseeval.estimate.evaluation import ProtocolConfig, results_frame, run_protocol, summarize
from sparseeval.publish.refresh import comparison_key
from sparseeval.publish.refresh_outcome import Log
from sparseeval.publish.report import plot_mae_vs_k
from sparseeval.publish.tracking import TrackingConfig
from sparseeval.publish.tracking_runs import log_comparison, tracked_run


@dataclass(frozen=True)
class ComparisonDue:
    """Whether a comparison of a benchmark runs now (``due``), under which key, and why (or why not)."""

    benchmark: str
    due: bool
    key: str
    reason: str


def comparison_due(store: Store, benchmark: str, settings: RefreshSettings, *, version: str | None = None,
                   scheduled: bool = False) -> ComparisonDue:
    """Whether ``benchmark``'s comparison is due now (see the module docstring); ``scheduled``: asked by
    the comparison's own schedule, which compares whatever is not compared yet."""
    version = version or store.data_version(benchmark)
    key = comparison_key(version, settings.key_settings(COMPARISON))
    if store.evaluation_count(benchmark, run_key=key):
        return ComparisonDue(benchmark, False, key, f"up to date: compared already at data version {version}")
    if scheduled:
        return ComparisonDue(benchmark, True, key, f"scheduled: data version {version} not compared yet")
    last = last_comparison(store, benchmark, settings)
    if last is None:
        return ComparisonDue(benchmark, True, key, "never compared under the current comparison settings")
    now = store.scored_model_count(benchmark)
    new = max(0, now - last.models)
    share = new / now if now else 0.0
    if share >= settings.compare_new_share:
        return ComparisonDue(benchmark, True, key, f"{new} new models since the comparison at data version "
                                                   f"{last.data_version} ({share:.1%} >= "
                                                   f"{settings.compare_new_share:.0%})")
    return ComparisonDue(benchmark, False, key,
                         f"deferred to the weekly comparison schedule: {new} new models since the comparison at "
                         f"data version {last.data_version} ({share:.1%} < {settings.compare_new_share:.0%}); "
                         f"that comparison stands")


def last_comparison(store: Store, benchmark: str, settings: RefreshSettings) -> StoredComparison | None:
    """The latest comparison of ``benchmark`` under ``settings`` (any data version): its data version
    and how many models it had; None when there is none."""
    wanted = settings.key_settings(COMPARISON)
    return next((c for c in store.stored_comparisons(benchmark)
                 if c.run_key == comparison_key(c.data_version, wanted)), None)


def comparisons_due(store: Store, settings: RefreshSettings, *, scheduled: bool = False,
                    skip: Sequence[str] = ()) -> dict[str, ComparisonDue]:
    """:func:`comparison_due` of every benchmark of the store (but ``skip``), the due ones only."""
    out = {}
    for bench, version in store.data_versions().items():
        if bench in skip:
            continue
        due = comparison_due(store, bench, settings, version=version, scheduled=scheduled)
        if due.due:
            out[bench] = due
    return out


@dataclass(frozen=True)
class ComparisonResult:
    """What :func:`compare_methods` did: ``compared`` (rows stored) or ``skipped`` (its key was)."""

    benchmark: str
    status: str
    key: str
    data_version: str
    message: str
    rows: int = 0
    plan: ComparisonPlan | None = None
    table: pl.DataFrame | None = None
    best: dict[str, Any] = field(default_factory=dict)
    mlflow_run_id: str | None = None
    plot_png: bytes | None = None


def compare_methods(matrix: ResponseMatrix, store: Store, tracking: TrackingConfig, settings: RefreshSettings,
                    *, log: Log | None = None, run_tags: Mapping[str, str] | None = None) -> ComparisonResult:
    """Compare the methods on ``matrix`` (identical splits and seeds), cut to the time budget
    (:func:`sparseeval.estimate.budget.comparison_plan`, said when reduced); rows into DuckDB under the
    comparison key, one MLflow run with the MAE-vs-K plot. A key already compared is skipped."""
    log = log or logging.getLogger("sparseeval.publish.comparison")
    bench = matrix.benchmark
    version = matrix.data_version or store.data_version(bench)
    key = comparison_key(version, settings.key_settings(COMPARISON))
    done = store.evaluation_count(bench, run_key=key)
    if done:
        message = (f"comparison skipped: {done} rows already stored for its key {key[:12]} (data version "
                   f"{version})")
        log.info("%s: %s", bench, message)
        return ComparisonResult(bench, "skipped", key, version, message)
    plan = comparison_plan(*matrix.shape, list(settings.compare_methods), list(settings.compare_ks),
                           list(range(settings.seed, settings.seed + settings.compare_seeds)),
                           budget_s=settings.compare_budget_s)
    if plan.reduced:
        log.warning("%s: comparison reduced to fit its budget: %s", bench, plan.describe())
    ks, seeds = list(plan.ks), list(plan.seeds)
    # the refresh's selection on this data version is exactly the (method, K, seed) cell: reuse it
    fitted = {}
    selected = store.anchor_sets_by_role(bench, None, origin="selected", data_version=version)
    if selected:
        row = store.anchor_set(selected[-1])
        fit_seconds = float(json.loads(row["params"] or "{}").get("fit_seconds", 0.0))
        fitted[(row["method"], row["k"], row["seed"])] = (load_predictor(row["artifact_uri"]).estimator, fit_seconds)
    dates = model_dates(store.model_metadata(), matrix.models) if settings.split_policy == "date" else None
    tags = dict(run_tags or {})
    with tracked_run(tracking, "evaluation", benchmark=bench,
                     params={"methods": ",".join(settings.compare_methods), "ks": ",".join(map(str, ks)),
                             "seeds": len(seeds), "split": settings.split_policy, "data_version": version},
                     tags={**tags, "data_version": version}) as run:
        run.log_matrix(matrix, source=store.path, digest=version)
        results = run_protocol(matrix, list(plan.methods), ks, seeds, config=ProtocolConfig.of(settings),
                               device=settings.device, dates=dates, fitted=fitted,
                               progress=lambda r: log.info("%s %s k=%d seed=%d: MAE %.2f tau %.3f", r.benchmark,
                                                           r.method, r.k, r.seed, r.mae, r.tau))
        frame = results_frame(results)
        summary = summarize(results)
        with tempfile.TemporaryDirectory() as tmp:
            plot = plot_mae_vs_k(summary, Path(tmp) / f"mae_vs_k_{slug(bench)}.png")
            run_id = log_comparison(tracking, benchmark=bench, rows=frame.to_dicts(), plot_path=plot, tags=tags,
                                    run_id=run.run_id)
            png = plot.read_bytes()
    store.save_evaluations(frame.with_columns(pl.lit(run_id).alias("mlflow_run_id"),
                                              pl.lit(version).alias("data_version"), pl.lit(key).alias("run_key")))
    table = summary.select("method", "k", "seeds", pl.col("mae_mean").round(2), pl.col("mae_sd").round(2),
                           pl.col("tau_mean").round(3), pl.col("seconds_mean").round(2))
    best = table.sort("mae_mean").row(0, named=True)
    message = (f"best method {best['method']} at K={best['k']}, MAE {best['mae_mean']:.2f} points "
               f"({frame.height} runs compared)")
    log.info("%s: %s", bench, message)
    return ComparisonResult(bench, "compared", key, version, message, rows=frame.height, plan=plan, table=table,
                            best=best, mlflow_run_id=run_id, plot_png=png)
