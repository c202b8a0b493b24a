"""Assets: raw_results -> response_matrix -> anchors -> predictor -> evaluation, and predictions.

Every asset is partitioned by benchmark, so each benchmark's optimisation is its own run (and can
go to its own worker). Asset bodies only move data between the library and the stores; the
algorithms live in :mod:`sparseeval`.
"""


import os
import tempfile
import time
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import polars as pl

from pipelines.resources import SettingsResource, SourceResource, StoreResource, TrackingResource
from sparseeval.artifact import load_predictor
from sparseeval.evaluation import fit_on_split, results_frame, run_protocol, score_on_split, split_for_seed, summarize
from sparseeval.matrix import EmptyMatrixError, ResponseMatrix, build_matrix
from sparseeval.metrics import score_metrics
from sparseeval.report import plot_mae_vs_k
from sparseeval.scoring import artifact_from_fit, predict
from sparseeval.sources import model_dates
from sparseeval.synthetic import DEFAULT_BENCHMARKS
from sparseeval.tracking import log_comparison, log_evaluation_run, register_predictor


def configured_benchmarks() -> list[str]:
    """Partition keys: ``SPARSEEVAL_BENCHMARKS`` (comma-separated) or the embedded data's benchmarks."""
    env = os.environ.get("SPARSEEVAL_BENCHMARKS", "")
    names = [b.strip() for b in env.split(",") if b.strip()]
    return names or list(DEFAULT_BENCHMARKS)


benchmark_partitions = dg.StaticPartitionsDefinition(configured_benchmarks())
GROUP = "sparseeval"


@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"duckdb"},
          check_specs=[dg.AssetCheckSpec("every_file_accepted", asset="raw_results",
                                         description="No source file, and no part of one, was refused.")],
          description="Ingest the source folder into DuckDB (idempotent: unchanged files are skipped "
                      "by sha256; a newer run replaces an older one as current; bad files or parts are "
                      "refused and recorded with the reason, good ones stored).")
def raw_results(context: dg.AssetExecutionContext, store: StoreResource, source: SourceResource):
    bench = context.partition_key
    folder = source.resolve()
    db = store.store()
    report = db.ingest(folder)
    refused = [(f.file, f.reason or "") for f in report.files if f.status == "refused"]
    refused += [(n.part, n.reason) for f in report.files for n in f.notes if n.status == "refused"]
    skipped = [(f.file, f.reason or "") for f in report.files if f.status == "skipped"]
    skipped += [(n.part, n.reason) for f in report.files for n in f.notes if n.status in ("skipped", "warning")]
    for file, reason in refused:
        context.log.warning("refused %s: %s", file, reason)
    counts = db.query(
        "SELECT count(*) AS responses, count(DISTINCT model) AS models, count(DISTINCT item_id) AS items "
        "FROM responses WHERE benchmark = ?", [bench]).row(0, named=True)
    summary = {"benchmark": bench, **counts, "source": str(folder)}

    def listing(rows: list[tuple[str, str]]) -> dg.MetadataValue:
        return dg.MetadataValue.md("\n".join(f"- `{file}`: {reason}" for file, reason in rows[:200]) or "none")

    yield dg.Output(summary, metadata={
        "source": str(folder),
        "files_stored": len(report.by_status("ok")) + len(report.by_status("partial")),
        "files_skipped": len(report.by_status("skipped")),
        "files_refused": len(refused),
        "refused": listing(refused),
        "skipped": listing(skipped),
        "runs_superseded": sum(f.n_superseded for f in report.files),
        "responses": counts["responses"],
        "models": counts["models"],
        "items": counts["items"],
        "tables": dg.MetadataValue.json(db.table_counts()),
    })
    # fails visibly (the run is marked in the UI) without holding back what was stored
    yield dg.AssetCheckResult(check_name="every_file_accepted", passed=not refused,
                              severity=dg.AssetCheckSeverity.ERROR,
                              metadata={"refused": listing(refused), "files_refused": len(refused)})


@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"polars"},
          deps=[raw_results],
          check_specs=[dg.AssetCheckSpec("matrix_not_empty", asset="response_matrix"),
                       dg.AssetCheckSpec("scores_within_unit_interval", asset="response_matrix")],
          description="Dense float32 models x items matrix of the benchmark with observed mask and targets.")
def response_matrix(context: dg.AssetExecutionContext, store: StoreResource):
    bench = context.partition_key
    responses, scores = store.store().load_long(bench, lazy=True)
    try:
        matrix = build_matrix(responses, scores, bench)
    except EmptyMatrixError as exc:
        raise dg.Failure(description=str(exc)) from exc
    n_models, n_items = matrix.shape
    yield dg.Output(matrix, metadata={
        "models": n_models, "items": n_items, "density": round(matrix.density, 4),
        "targets_reported": sum(1 for s in matrix.score_source if s == "reported"),
        "dropped_models": len(matrix.dropped_models),
    })
    yield dg.AssetCheckResult(check_name="matrix_not_empty", passed=bool(n_models > 0 and n_items > 0),
                              metadata={"models": n_models, "items": n_items})
    in_range = bool(np.all((matrix.scores >= 0) & (matrix.scores <= 1))
                    and np.all((matrix.values >= 0) & (matrix.values <= 1)))
    yield dg.AssetCheckResult(check_name="scores_within_unit_interval", passed=in_range,
                              metadata={"score_min": float(matrix.scores.min()),
                                        "score_max": float(matrix.scores.max())})


def _dates(store: StoreResource, matrix: ResponseMatrix, policy: str) -> list[Any] | None:
    """Model dates for a split by date (read from the store only when that policy is chosen)."""
    return model_dates(store.store().model_metadata(), matrix.models) if policy == "date" else None


@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"pytorch", "duckdb"},
          check_specs=[dg.AssetCheckSpec("anchors_unique_and_k", asset="anchors")],
          description="Anchor selection on the training models of the configured split (never test models).")
def anchors(context: dg.AssetExecutionContext, response_matrix: ResponseMatrix, store: StoreResource,
            settings: SettingsResource):
    matrix = response_matrix
    k = min(settings.k, len(matrix.items))
    split = split_for_seed(matrix, settings.seed, settings.protocol(), _dates(store, matrix, settings.split_policy))
    t0 = time.perf_counter()
    est = fit_on_split(matrix, split, settings.method, k, settings.seed, device=settings.device)
    seconds = time.perf_counter() - t0
    assert est.anchors_ is not None
    items = [matrix.items[i] for i in est.anchors_]
    weights = getattr(est, "weights_", None)
    anchor_set_id = store.store().save_anchor_set(
        benchmark=matrix.benchmark, method=settings.method, k=k, items=items,
        weights=None if weights is None else [float(w) for w in weights], seed=settings.seed,
        n_train_models=len(split.train), params={"split": settings.split_policy, "val_frac": settings.val_frac,
                                                 "test_frac": settings.test_frac})
    selection = getattr(est, "selection_", {})
    yield dg.Output({"estimator": est, "split": split, "items": items, "anchor_set_id": anchor_set_id,
                     "seconds": seconds}, metadata={
        "k": k, "method": settings.method, "seed": settings.seed, "anchor_set_id": anchor_set_id,
        "anchors": dg.MetadataValue.json(items), "seconds": round(seconds, 2),
        "train_models": len(split.train), "val_models": len(split.val), "test_models": len(split.test),
        "start": str(selection.get("start", "")), "swaps": int(selection.get("swaps", 0)),
    })
    yield dg.AssetCheckResult(check_name="anchors_unique_and_k", passed=len(set(items)) == k == len(items),
                              metadata={"k": k, "unique": len(set(items))})


@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"mlflow"},
          check_specs=[dg.AssetCheckSpec("test_mae_finite", asset="predictor")],
          description="Publish the fitted predictor: conformal calibration on the held-out test models, a "
                      "versioned folder, an MLflow run (params, metrics, anchors, state) and a registered model.")
def predictor(context: dg.AssetExecutionContext, response_matrix: ResponseMatrix, anchors: dict[str, Any],
              store: StoreResource, tracking: TrackingResource, settings: SettingsResource):
    matrix, est, split = response_matrix, anchors["estimator"], anchors["split"]
    pred = score_on_split(matrix, split, est)
    metrics = score_metrics(pred, matrix.scores[split.test])
    artifact = artifact_from_fit(matrix, split, est, alpha=settings.alpha, seed=settings.seed,
                                 models=store.store().model_metadata(),
                                 settings=store.store().training_settings(matrix.benchmark))
    folder = Path(settings.predictor_dir) / matrix.benchmark
    artifact = artifact.save(folder)
    cfg = tracking.config()
    run_id = log_evaluation_run(
        cfg, benchmark=matrix.benchmark, method=est.method, k=est.k, seed=settings.seed,
        params={"split_policy": settings.split_policy, "val_frac": settings.val_frac,
                "test_frac": settings.test_frac, "n_train": len(split.train), "n_items": len(matrix.items),
                "content_hash": artifact.content_hash},
        metrics={**metrics.as_dict(), "seconds": anchors["seconds"]},
        anchors=[{"position": i, "item_id": item} for i, item in enumerate(anchors["items"])],
        predictor_state_path=folder, tags={"dagster.run_id": context.run_id})
    version = register_predictor(cfg, benchmark=matrix.benchmark, predictor_dir=folder, run_id=run_id)
    store.store().save_anchor_set(benchmark=matrix.benchmark, method=est.method, k=est.k, items=anchors["items"],
                                  seed=settings.seed, n_train_models=len(split.train),
                                  mlflow_run_id=run_id, artifact_uri=str(folder.resolve()))
    result = {"folder": str(folder), "mae": metrics.mae, "tau": metrics.tau, "run_id": run_id,
              "version": version, "content_hash": artifact.content_hash}
    yield dg.Output(result, metadata={
        "test_mae_points": round(metrics.mae, 3), "test_kendall_tau": round(metrics.tau, 4),
        "test_models": metrics.n, "k": est.k, "folder": str(folder), "mlflow_run_id": run_id,
        "registered_version": version, "content_hash": artifact.content_hash,
    })
    yield dg.AssetCheckResult(check_name="test_mae_finite", passed=bool(np.isfinite(metrics.mae)),
                              metadata={"mae": float(metrics.mae)})


@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"duckdb", "mlflow"},
          deps=[predictor],
          description="SparseEval and baselines on identical splits and seeds -> DuckDB evaluations, MLflow.")
def evaluation(context: dg.AssetExecutionContext, response_matrix: ResponseMatrix, store: StoreResource,
               tracking: TrackingResource, settings: SettingsResource) -> dg.Output[pl.DataFrame]:
    matrix = response_matrix
    ks = [k for k in settings.ks() if k <= len(matrix.items)]
    seeds = list(range(settings.seed, settings.seed + settings.compare_seeds))
    results = run_protocol(matrix, settings.methods(), ks, seeds, config=settings.protocol(),
                           device=settings.device, dates=_dates(store, matrix, settings.split_policy),
                           progress=lambda r: context.log.info("%s %s k=%d seed=%d: MAE %.2f tau %.3f",
                                                               r.benchmark, r.method, r.k, r.seed, r.mae, r.tau))
    frame = results_frame(results)
    summary = summarize(results)
    with tempfile.TemporaryDirectory() as tmp:
        plot = plot_mae_vs_k(summary, Path(tmp) / f"mae_vs_k_{matrix.benchmark}.png")
        run_id = log_comparison(tracking.config(), benchmark=matrix.benchmark, rows=frame.to_dicts(),
                                plot_path=plot, tags={"dagster.run_id": context.run_id})
    store.store().save_evaluations(frame.with_columns(pl.lit(run_id).alias("mlflow_run_id")))
    table = summary.select("method", "k", "seeds", pl.col("mae_mean").round(2), pl.col("mae_sd").round(2),
                           pl.col("tau_mean").round(3), pl.col("seconds_mean").round(2))
    return dg.Output(frame, metadata={
        "runs": frame.height, "mlflow_run_id": run_id,
        "summary": dg.MetadataValue.md(_markdown(table)),
    })


def _markdown(frame: pl.DataFrame) -> str:
    head = "| " + " | ".join(frame.columns) + " |\n|" + "---|" * len(frame.columns) + "\n"
    return head + "\n".join("| " + " | ".join(str(v) for v in row) + " |" for row in frame.iter_rows())


@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"duckdb"},
          description="Score every stored model that has anchor answers but no full score (with intervals).")
def predictions(context: dg.AssetExecutionContext, predictor: dict[str, Any],
                store: StoreResource) -> dg.MaterializeResult:
    bench = context.partition_key
    artifact = load_predictor(predictor["folder"])
    db = store.store()
    answers = db.query(
        "SELECT r.model, r.benchmark, r.item_id, r.score FROM responses r "
        "WHERE r.benchmark = ? AND r.item_id IN (SELECT unnest(?::VARCHAR[])) "
        "AND NOT EXISTS (SELECT 1 FROM scores s WHERE s.model = r.model AND s.benchmark = r.benchmark)",
        [bench, artifact.anchor_item_ids])
    rows: list[dict[str, Any]] = []
    if answers.height:
        anchor_set = db.query("SELECT anchor_set_id FROM anchor_sets WHERE mlflow_run_id = ? "
                              "ORDER BY created_at DESC LIMIT 1", [predictor["run_id"]])
        anchor_set_id = anchor_set.item() if anchor_set.height else None
        for p in predict(artifact, answers):
            rows.append({**p.as_dict(), "anchor_set_id": anchor_set_id})
        db.save_predictions(rows)
    return dg.MaterializeResult(metadata={"models_scored": len(rows),
                                          "ood_flagged": sum(bool(r["ood"]) for r in rows)})
