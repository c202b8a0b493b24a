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


import hashlib
import time
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from pipelines.assets import GROUP, OWNERS, PUBLISH_CHECKS, _markdown, publish_proposed, save_version
from pipelines.resources import SettingsResource, StoreResource, TrackingResource
from sparseeval.benchmarks import joint_benchmarks
from sparseeval.champion import joint_baseline_maes, joint_crossfit_coverage
from sparseeval.device import cpu_threads
from sparseeval.evaluation import evaluate_joint, evaluate_per_benchmark, results_frame
from sparseeval.matrix import ResponseMatrix
from sparseeval.methods.joint import JOINT_METHOD, JOINT_SEP, MEAN, common_models, joint_data, restrict_models
from sparseeval.scoring import joint_artifact_from_fit
from sparseeval.sources import model_dates
from sparseeval.splits import make_split
from sparseeval.tracking import log_comparison, tracked_run

#: fewer models with every benchmark than this: no joint fit (its held-out half-splits would be empty)
MIN_JOINT_MODELS = 50


def _skip(context: dg.AssetExecutionContext, reason: str, **metadata: Any):
    context.log.info("%s: %s", JOINT_METHOD, reason)
    yield dg.MaterializeResult(metadata={"decision": reason, "proposed": None, **metadata})
    for name in PUBLISH_CHECKS:
        yield dg.AssetCheckResult(check_name=name, passed=True, metadata={"skipped": reason})


@dg.asset(group_name=GROUP, kinds={"pytorch", "duckdb", "mlflow"}, owners=OWNERS, tags={"layer": "fit"},
          pool="sparseeval_fit", ins={"response_matrix": dg.AssetIn(partition_mapping=dg.AllPartitionMapping())},
          check_specs=[dg.AssetCheckSpec(name, asset="joint_anchors", blocking=True) for name in PUBLISH_CHECKS],
          description="sparseeval-joint: one anchor set for several benchmarks under one item budget (K per "
                      "benchmark in all), fitted on the models that have every benchmark, compared on the same "
                      "held-out models with the per-benchmark method at the same total, checked output by "
                      "output (every benchmark and the mean) before it may be published.")
def joint_anchors(context: dg.AssetExecutionContext, response_matrix: dict[str, ResponseMatrix],
                  store: StoreResource, settings: SettingsResource, tracking: TrackingResource):
    chosen = joint_benchmarks(settings.joint_benchmarks, sorted(response_matrix))
    if len(chosen) < 2:
        yield from _skip(context, f"skipped: a joint predictor needs two benchmarks or more, have "
                                  f"{', '.join(chosen) or 'none'} (SPARSEEVAL_JOINT_BENCHMARKS)")
        return
    matrices = [response_matrix[b] for b in chosen]
    common = set(matrices[0].models).intersection(*(m.models for m in matrices[1:]))
    if len(common) < MIN_JOINT_MODELS:
        yield from _skip(context, f"skipped: only {len(common)} models have every one of {', '.join(chosen)} "
                                  f"(at least {MIN_JOINT_MODELS} needed)", benchmarks=dg.MetadataValue.json(chosen))
        return
    k = min([settings.k, *(len(m.items) for m in matrices)])
    # what the fit sees, exactly: the matrices' content (not the store's, which may have moved on since)
    version = hashlib.sha256("|".join(f"{m.benchmark}={m.digest()}" for m in matrices).encode()).hexdigest()[:16]
    db = store.store()
    champion = db.champion(JOINT_METHOD)
    if champion is not None and champion["data_version"] == version and champion["seed"] == settings.seed \
            and champion["k"] == k * len(chosen):
        yield from _skip(context, f"skipped: matrices and settings unchanged since joint anchor set "
                                  f"#{champion['anchor_set_id']}: nothing refit, nothing to publish",
                         champion=champion["anchor_set_id"], data_version=version)
        return
    with tracked_run(tracking.config(), "candidate", benchmark=JOINT_METHOD,
                     params={"k_per_benchmark": k, "benchmarks": ",".join(chosen), "method": JOINT_METHOD,
                             "reference_method": settings.method, "seed": settings.seed,
                             "split": settings.split_policy, "alpha": settings.alpha, "data_version": version,
                             "threads": cpu_threads()},
                     tags={"dagster.run_id": context.run_id, "data_version": version}) as run, \
            db.publishing_once():
        yield from _joint_fit(context, matrices, k, version, db, settings, run, tracking)


def _joint_fit(context: dg.AssetExecutionContext, matrices: list[ResponseMatrix], k: int, version: str, db: Any,
               settings: SettingsResource, run: Any, tracking: TrackingResource):
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
    folder, saved = save_version(artifact, Path(settings.predictor_dir) / JOINT_METHOD, "selected")
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
        artifact_uri=str(folder.resolve()), origin="selected", data_version=version, test_mae=mae[MEAN],
        baseline_mae=baselines[MEAN], coverage=coverage[MEAN])
    # the joint comparison, under its own names: its test models are the joint split's, not a benchmark's
    frame = results_frame([*joint_results, *reference]).with_columns(
        (pl.lit(f"{JOINT_METHOD}/") + pl.col("benchmark")).alias("benchmark"))
    comparison_id = log_comparison(tracking.config(), benchmark=JOINT_METHOD, rows=frame.to_dicts(),
                                   tags={"dagster.run_id": context.run_id}, run_id=run.run_id)
    db.save_evaluations(frame.with_columns(pl.lit(comparison_id).alias("mlflow_run_id"),
                                           pl.lit(version).alias("data_version")))
    # the publishing checks, every output on the joint split's held-out models
    nominal = 1.0 - settings.alpha
    outputs = [*data.benchmarks, MEAN]
    worse = [o for o in outputs if mae[o] > baselines[o]]
    off = [o for o in outputs if coverage[o] is not None and abs(coverage[o] - nominal) > settings.coverage_tolerance]
    valid = len(set(keys)) == len(keys) == k * len(data.benchmarks) and set(keys) <= set(data.columns)
    results = {
        "beats_random_linear": (not worse, {"test_mae": mae, "random_linear_mae": baselines, "worse": worse}),
        "coverage_near_nominal": (not off, {"coverage": coverage, "nominal": nominal,
                                            "tolerance": settings.coverage_tolerance, "off": off}),
        "anchors_valid": (valid, {"items": len(keys), "unique": len(set(keys)), "expected": k * len(data.benchmarks)}),
    }
    failed = [name for name, (ok, _) in results.items() if not ok]
    db.update_anchor_set(anchor_set_id, role="rejected" if failed else "proposed")
    decision = (f"NOT published: failed {', '.join(failed)} (the champion stays)" if failed else
                f"proposed joint anchor set #{anchor_set_id}: {k} items per benchmark over "
                f"{', '.join(data.benchmarks)}")
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
        "decision": decision, "proposed": anchor_set_id, "benchmarks": dg.MetadataValue.json(data.benchmarks),
        "k_per_benchmark": k, "items": est.k, "models": len(data.models), "train_models": len(split.train),
        "test_models": len(split.test), "data_version": version, "selection_seconds": round(seconds, 2),
        "test_mae_points": round(mae[MEAN], 3), "outputs": dg.MetadataValue.md(_markdown(table)),
    })
    for name, (ok, meta) in results.items():
        yield dg.AssetCheckResult(check_name=name, passed=bool(ok), metadata=meta)


@dg.asset(group_name=GROUP, kinds={"mlflow", "duckdb"}, owners=OWNERS, tags={"layer": "publish"},
          deps=[joint_anchors], pool="duckdb_writer",
          description="Publish the proposed joint predictor (only reached when joint_anchors' blocking checks "
                      "pass): registry entry sparseeval-joint with alias champion, folder "
                      "<predictors>/sparseeval-joint/, champion role in DuckDB.")
def joint_champion(context: dg.AssetExecutionContext, store: StoreResource, tracking: TrackingResource,
                   settings: SettingsResource) -> dg.MaterializeResult:
    return publish_proposed(context, JOINT_METHOD, store, tracking, settings)
