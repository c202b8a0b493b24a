"""The joint predictor: one anchor set for several benchmarks (``sparseeval-joint``).

``joint_anchors`` reads every benchmark's matrix (all partitions of ``response_matrix``), fits
``sparseeval-joint`` on the models that have every chosen benchmark, calibrates it on that split's
held-out models, compares it there with the per-benchmark method at the same total number of items,
and runs the same **blocking** publishing checks as a benchmark's candidate, output by output.
``joint_champion`` publishes what passed, through the same code as a benchmark's champion: registry
entry ``sparseeval-joint`` with alias ``champion``, folder ``<predictors>/sparseeval-joint/`` (which
``sparseeval predict --benchmark sparseeval-joint`` reads), DuckDB role. Unchanged matrices and
settings: nothing is refit.

The joint set is re-selected whenever its data changes (unlike a benchmark's champion, whose anchors
are kept and refit); earlier versions stay in ``versions/`` and in the registry.
"""


import time
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import polars as pl

from pipelines.assets import GROUP, OWNERS, _markdown, publish_open, resume_or_skip
from pipelines.resources import SettingsResource, StoreResource, TrackingResource
from sparseeval.benchmarks import joint_benchmarks
from sparseeval.champion import joint_baseline_maes, joint_crossfit_coverage, mean_guess_mae
from sparseeval.device import cpu_threads
from sparseeval.evaluation import evaluate_joint, evaluate_per_benchmark, results_frame
from sparseeval.matrix import ResponseMatrix
from sparseeval.methods.joint import JOINT_METHOD, JOINT_SEP, MEAN, common_models, joint_data, restrict_models
from sparseeval.publishing import record_decision, save_version
from sparseeval.refresh import fit_key, joint_data_version, publishing_checks
from sparseeval.scoring import joint_artifact_from_fit
from sparseeval.sources import model_dates
from sparseeval.splits import make_split
from sparseeval.tracking import log_comparison, tracked_run

#: fewer models with every benchmark than this: no joint fit (its held-out half-splits would be empty)
MIN_JOINT_MODELS = 50


def _skip(context: dg.AssetExecutionContext, reason: str, **_: Any) -> None:
    """Nothing to fit: said in the log (no materialization: the checks and the publish step are
    skipped, and shown as skipped)."""
    context.log.info("%s: %s", JOINT_METHOD, reason)


def _stale_inputs(matrices: list[ResponseMatrix], store_versions: dict[str, str]) -> list[str]:
    """Benchmarks whose matrix (from its last refresh) is behind the store: their refresh failed or has
    not run, so the joint fit uses their previous data, and says so."""
    return [f"{m.benchmark} (matrix at data version {m.data_version or '?'}, store at "
            f"{store_versions.get(m.benchmark, '?')})" for m in matrices
            if m.data_version and store_versions.get(m.benchmark) not in (None, m.data_version)]


@dg.asset(group_name=GROUP, kinds={"pytorch", "duckdb", "mlflow"}, owners=OWNERS, tags={"layer": "fit"},
          pool="sparseeval_fit", ins={"response_matrix": dg.AssetIn(partition_mapping=dg.AllPartitionMapping())},
          output_required=False,
          description="sparseeval-joint: one anchor set for several benchmarks under one item budget (K per "
                      "benchmark in all), fitted on the models that have every benchmark, compared on the same "
                      "held-out models with the per-benchmark method at the same total, checked output by "
                      "output (every benchmark and the mean) before it may be published.")
def joint_anchors(context: dg.AssetExecutionContext, response_matrix: dict[str, ResponseMatrix],
                  store: StoreResource, settings: SettingsResource, tracking: TrackingResource):
    chosen = joint_benchmarks(settings.joint_benchmarks, sorted(response_matrix))
    if len(chosen) < 2:
        _skip(context, f"skipped: a joint predictor needs two benchmarks or more, have "
                                  f"{', '.join(chosen) or 'none'} (SPARSEEVAL_JOINT_BENCHMARKS)")
        return
    matrices = [response_matrix[b] for b in chosen]
    common = set(matrices[0].models).intersection(*(m.models for m in matrices[1:]))
    if len(common) < MIN_JOINT_MODELS:
        _skip(context, f"skipped: only {len(common)} models have every one of {', '.join(chosen)} "
                                  f"(at least {MIN_JOINT_MODELS} needed)", benchmarks=dg.MetadataValue.json(chosen))
        return
    k = min([settings.k, *(len(m.items) for m in matrices)])
    # what the fit sees, exactly: the data versions its matrices were built from (they travel with them)
    version = joint_data_version({m.benchmark: m.data_version or m.digest() for m in matrices})
    db = store.store()
    key = fit_key(version, {**settings.joint_settings(), "benchmarks": chosen})
    behind = _stale_inputs(matrices, db.data_versions())
    for line in behind:
        context.log.warning("%s: %s: its refresh has not completed; the joint predictor uses its previous matrix",
                            JOINT_METHOD, line)
    resumed = resume_or_skip(context, db, tracking, settings.predictor_dir, JOINT_METHOD, key)
    if resumed is None:
        return
    if resumed:
        yield dg.MaterializeResult(metadata={**resumed, "data_version": version})
        return
    with tracked_run(tracking.config(), "candidate", benchmark=JOINT_METHOD,
                     params={"k_per_benchmark": k, "benchmarks": ",".join(chosen), "method": JOINT_METHOD,
                             "reference_method": settings.method, "seed": settings.seed,
                             "split": settings.split_policy, "alpha": settings.alpha, "data_version": version,
                             "threads": cpu_threads()},
                     tags={"dagster.run_id": context.run_id, "data_version": version}) as run, \
            db.publishing_once():
        yield from _joint_fit(context, matrices, k, version, db, settings, run, tracking, key, behind)


def _joint_fit(context: dg.AssetExecutionContext, matrices: list[ResponseMatrix], k: int, version: str, db: Any,
               settings: SettingsResource, run: Any, tracking: TrackingResource, key: str, behind: list[str]):
    """The fitting body of :func:`joint_anchors`, inside its MLflow run."""
    models = common_models(matrices)
    parts = [restrict_models(m, models) for m in matrices]
    data = joint_data(parts)
    config = settings.protocol()
    metadata = db.model_metadata()  # one read: the date split and the artifact's model list
    dates = model_dates(metadata, data.models) if settings.split_policy == "date" else None
    split = make_split(data.models, policy=config.split_policy, val_frac=config.val_frac,
                       test_frac=config.test_frac, seed=settings.seed, dates=dates)
    t0 = time.perf_counter()
    joint_results, est = evaluate_joint(data, split, k, settings.seed, config=config, device=settings.device)
    seconds = time.perf_counter() - t0
    reference = evaluate_per_benchmark(parts, split, settings.method, k, settings.seed, config=config,
                                       device=settings.device)
    baselines = joint_baseline_maes(parts, split, k, settings.seed, device=settings.device)
    artifact = joint_artifact_from_fit(data, split, est, alpha=settings.alpha, seed=settings.seed,
                                       models=metadata,
                                       settings={b: db.training_settings(b) for b in data.benchmarks})
    folder, saved = save_version(artifact, Path(settings.predictor_dir), JOINT_METHOD)
    modes = {name: c.get("mode", "binomial") for name, c in saved.calibration["outputs"].items()}
    coverage = joint_crossfit_coverage(data, split, est, alpha=settings.alpha, seed=settings.seed, modes=modes)
    mae = {r.benchmark: r.mae for r in joint_results}
    ref_mae = {r.benchmark: r.mae for r in reference}
    keys = [data.columns[c] for c in est.anchors_]
    owners, items = zip(*(key.split(JOINT_SEP, 1) for key in keys), strict=True)
    anchor_set_id = db.save_anchor_set(
        benchmark=JOINT_METHOD, method=JOINT_METHOD, k=est.k, items=list(items), item_benchmarks=list(owners),
        seed=settings.seed, n_train_models=len(split.train),
        params={"benchmarks": data.benchmarks, "k_per_benchmark": k, "allocation": est.allocation(),
                "split": settings.split_policy, "val_frac": settings.val_frac, "test_frac": settings.test_frac,
                "origin": "selected", "fit_seconds": round(seconds, 3), "test_mae": mae, "baseline_mae": baselines,
                "coverage": coverage, "reference_method": settings.method, "reference_mae": ref_mae},
        artifact_uri=str(folder.resolve()), predictor_hash=saved.content_hash,
        origin="selected", data_version=version, test_mae=mae[MEAN],
        baseline_mae=baselines[MEAN], coverage=coverage[MEAN])
    # the joint comparison, under its own names: its test models are the joint split's, not a benchmark's
    frame = results_frame([*joint_results, *reference]).with_columns(
        (pl.lit(f"{JOINT_METHOD}/") + pl.col("benchmark")).alias("benchmark"))
    comparison_id = log_comparison(tracking.config(), benchmark=JOINT_METHOD, rows=frame.to_dicts(),
                                   tags={"dagster.run_id": context.run_id}, run_id=run.run_id)
    db.save_evaluations(frame.with_columns(pl.lit(comparison_id).alias("mlflow_run_id"),
                                           pl.lit(version).alias("data_version")))
    # the publishing checks, every output on the joint split's held-out models
    outputs = [*data.benchmarks, MEAN]
    scores = np.concatenate([data.S, data.S.mean(axis=1, keepdims=True)], axis=1)
    checks = publishing_checks(mae={o: mae[o] for o in outputs}, baseline={o: baselines[o] for o in outputs},
                               mean_guess={o: mean_guess_mae(scores[:, i], split) for i, o in enumerate(outputs)},
                               coverage={o: coverage[o] for o in outputs}, nominal=1.0 - settings.alpha,
                               tolerance=settings.coverage_tolerance, items=keys, expected_k=k * len(data.benchmarks),
                               known_items=set(data.columns))
    outcome = record_decision(db, JOINT_METHOD, fit_key=key, data_version=version,
                              proposed={"anchor_set_id": anchor_set_id, "content_hash": saved.content_hash},
                              challenger=None, checks=checks)
    decision = f"joint anchor set #{anchor_set_id}: {k} items per benchmark over {', '.join(data.benchmarks)}; " \
               f"{outcome}" + (f"; behind the store: {'; '.join(behind)}" if behind else "")
    context.log.info("%s: %s", JOINT_METHOD, decision)
    run.log_metrics({**{f"test_mae/{o}": mae[o] for o in outputs},
                     **{f"{settings.method}_mae/{o}": ref_mae[o] for o in outputs},
                     **{f"random_linear_mae/{o}": baselines[o] for o in outputs},
                     **{f"coverage/{o}": c for o, c in coverage.items() if c is not None},
                     "selection_seconds": seconds})
    run.set_tags({"decision": decision[:250], "proposed_anchor_set": anchor_set_id})
    table = pl.DataFrame({"output": outputs, "joint_mae": [round(mae[o], 3) for o in outputs],
                          f"{settings.method}_mae": [round(ref_mae[o], 3) for o in outputs],
                          "random_linear_mae": [round(baselines[o], 3) for o in outputs],
                          "anchors": [est.allocation().get(o, est.k) for o in outputs],
                          "coverage": [coverage[o] for o in outputs]})
    yield dg.MaterializeResult(metadata={
        "decision": decision, "proposed": anchor_set_id, "evaluated": anchor_set_id, "fit_key": key,
        "benchmarks": dg.MetadataValue.json(data.benchmarks), "inputs_behind": dg.MetadataValue.json(behind),
        "k_per_benchmark": k, "items": est.k, "models": len(data.models), "train_models": len(split.train),
        "test_models": len(split.test), "data_version": version, "selection_seconds": round(seconds, 2),
        "test_mae_points": round(mae[MEAN], 3), "outputs": dg.MetadataValue.md(_markdown(table)),
    })


@dg.asset(group_name=GROUP, kinds={"mlflow", "duckdb"}, owners=OWNERS, tags={"layer": "publish"},
          deps=[joint_anchors], pool="duckdb_writer",
          description="Publish the proposed joint predictor (only reached when joint_anchors' blocking checks "
                      "pass): registry entry sparseeval-joint with alias champion, folder "
                      "<predictors>/sparseeval-joint/, champion role in DuckDB.")
def joint_champion(context: dg.AssetExecutionContext, store: StoreResource, tracking: TrackingResource,
                   settings: SettingsResource) -> dg.MaterializeResult:
    return publish_open(context, JOINT_METHOD, store, tracking, settings)
