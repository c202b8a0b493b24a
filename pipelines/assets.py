"""Assets: raw_results -> response_matrix[b] -> candidate[b] -> champion[b] -> evaluation[b], predictions[b].

Thin: each asset moves data between the library and the stores; algorithms live in
:mod:`sparseeval`. Every fact has one home and one writer:

* ``raw_results`` (one per refresh, not per benchmark) is the only writer of results into DuckDB;
* ``response_matrix`` is the only value passed between steps (an ``.npz`` through
  :class:`~pipelines.io_managers.MatrixIOManager`); its data version is the store's fingerprint of
  the benchmark's current runs;
* ``candidate`` fits (keeping the champion's anchors and refitting its predictor, plus a fresh
  selection as challenger), writes each anchor set once, saves each predictor version folder, and
  runs the **blocking** publishing checks; when the data and settings are unchanged it does nothing
  and says so;
* ``champion`` publishes only what passed the checks (registry alias, published folder, DuckDB role);
* ``evaluation`` compares methods on the same splits, reusing the candidate's fit for its own cell.
"""


import base64
import json
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import polars as pl

from pipelines.partitions import benchmark_partitions
from pipelines.resources import SettingsResource, SourceResource, StoreResource, TrackingResource
from sparseeval.artifact import PredictorArtifact, load_predictor
from sparseeval.budget import comparison_plan
from sparseeval.champion import baseline_mae, crossfit_coverage, decide, refit_on_anchors
from sparseeval.device import cpu_threads
from sparseeval.evaluation import fit_on_split, results_frame, run_protocol, split_for_seed, summarize
from sparseeval.matrix import EmptyMatrixError, ResponseMatrix, build_matrix
from sparseeval.plots import coverage_by_level, heldout_intervals, plot_coverage_by_level, plot_predicted_vs_true
from sparseeval.report import plot_mae_vs_k
from sparseeval.scoring import artifact_from_fit, predict
from sparseeval.sources import model_dates
from sparseeval.tracking import log_comparison, log_evaluation_run, register_predictor, tracked_run

GROUP = "sparseeval"
OWNERS = ["team:sparseeval"]
PUBLISH_CHECKS = ("beats_random_linear", "coverage_near_nominal", "anchors_valid")


def _markdown(frame: pl.DataFrame) -> str:
    head = "| " + " | ".join(frame.columns) + " |\n|" + "---|" * len(frame.columns) + "\n"
    return head + "\n".join("| " + " | ".join(str(v) for v in row) + " |" for row in frame.iter_rows())


def _image(path: Path, title: str) -> dg.MetadataValue:
    """A PNG shown in the asset's page (markdown with the image inlined: no file server needed)."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return dg.MetadataValue.md(f"![{title}](data:image/png;base64,{data})")


def _listing(rows: list[tuple[str, str]]) -> dg.MetadataValue:
    return dg.MetadataValue.md("\n".join(f"- `{file}`: {reason}" for file, reason in rows[:200]) or "none")


# --- ingest ---------------------------------------------------------------------------------------

@dg.asset(group_name=GROUP, kinds={"duckdb"}, owners=OWNERS, tags={"layer": "ingest"}, pool="duckdb_writer",
          check_specs=[dg.AssetCheckSpec("every_file_accepted", asset="raw_results",
                                         description="No source file, and no part of one, was refused.")],
          description="Ingest the source folder into DuckDB, once per refresh: unchanged files are skipped by "
                      "sha256, a newer run replaces an older one as current (kept as history), bad files or "
                      "parts are refused with the reason. Reports which benchmarks changed.")
def raw_results(context: dg.AssetExecutionContext, store: StoreResource, source: SourceResource):
    folder = source.resolve()
    db = store.store()
    before = {b: db.data_version(b) for b in db.benchmarks()}
    report = db.ingest(folder)
    after = {b: db.data_version(b) for b in db.benchmarks()}
    changed = sorted(b for b, v in after.items() if before.get(b) != v)
    refused = [(f.file, f.reason or "") for f in report.files if f.status == "refused"]
    refused += [(n.part, n.reason) for f in report.files for n in f.notes if n.status == "refused"]
    skipped = [(f.file, f.reason or "") for f in report.files if f.status == "skipped"]
    skipped += [(n.part, n.reason) for f in report.files for n in f.notes if n.status in ("skipped", "warning")]
    for file, reason in refused:
        context.log.warning("refused %s: %s", file, reason)
    context.log.info("ingest of %s: %d benchmark(s) changed: %s", folder, len(changed), ", ".join(changed) or "none")
    yield dg.MaterializeResult(metadata={
        "source": str(folder),
        "benchmarks": dg.MetadataValue.json(sorted(after)),
        "changed_benchmarks": dg.MetadataValue.json(changed),
        "data_versions": dg.MetadataValue.json(after),
        "files_stored": len(report.by_status("ok")) + len(report.by_status("partial")),
        "files_skipped": len(report.by_status("skipped")),
        "files_refused": len(refused),
        "refused": _listing(refused),
        "skipped": _listing(skipped),
        "runs_superseded": sum(f.n_superseded for f in report.files),
        "tables": dg.MetadataValue.json(db.table_counts()),
    }, data_version=dg.DataVersion("|".join(f"{b}={v}" for b, v in sorted(after.items()))))
    # fails visibly (the run is marked in the UI) without holding back what was stored
    yield dg.AssetCheckResult(check_name="every_file_accepted", passed=not refused,
                              severity=dg.AssetCheckSeverity.ERROR,
                              metadata={"refused": _listing(refused), "files_refused": len(refused)})


# --- matrix ---------------------------------------------------------------------------------------

@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"polars"}, owners=OWNERS,
          tags={"layer": "matrix"}, deps=[raw_results],
          check_specs=[dg.AssetCheckSpec("matrix_not_empty", asset="response_matrix", blocking=True),
                       dg.AssetCheckSpec("scores_within_unit_interval", asset="response_matrix", blocking=True)],
          description="Dense float32 models x items matrix of the benchmark with observed mask and targets, "
                      "built from the store's current runs (data version = their fingerprint).")
def response_matrix(context: dg.AssetExecutionContext, store: StoreResource):
    bench = context.partition_key
    db = store.store()
    version = db.data_version(bench)
    try:
        matrix = build_matrix(*db.load_long(bench, lazy=True), bench)
    except EmptyMatrixError as exc:
        raise dg.Failure(description=str(exc)) from exc
    n_models, n_items = matrix.shape
    yield dg.Output(matrix, data_version=dg.DataVersion(version), metadata={
        "models": n_models, "items": n_items, "density": round(matrix.density, 4),
        "dropped_models": len(matrix.dropped_models), "data_version": version,
    })
    yield dg.AssetCheckResult(check_name="matrix_not_empty", passed=bool(n_models > 0 and n_items > 0),
                              metadata={"models": n_models, "items": n_items})
    in_range = bool(np.all((matrix.scores >= 0) & (matrix.scores <= 1))
                    and np.all((matrix.values >= 0) & (matrix.values <= 1)))
    yield dg.AssetCheckResult(check_name="scores_within_unit_interval", passed=in_range,
                              metadata={"score_min": float(matrix.scores.min()),
                                        "score_max": float(matrix.scores.max())})


# --- fit: champion refit + challenger, with the blocking publishing checks --------------------------

def _dates(store: StoreResource, matrix: ResponseMatrix, policy: str) -> list[Any] | None:
    """Model dates for a split by date (read from the store only when that policy is chosen)."""
    return model_dates(store.store().model_metadata(), matrix.models) if policy == "date" else None


def _fit_version(matrix: ResponseMatrix, split: Any, est: Any, settings: SettingsResource,
                 store: StoreResource, origin: str, version: str, baseline: float,
                 fit_seconds: float) -> dict[str, Any]:
    """Calibrate, save as a versioned predictor folder, and write the anchor set once; its scores."""
    db = store.store()
    artifact = artifact_from_fit(matrix, split, est, alpha=settings.alpha, seed=settings.seed,
                                 models=db.model_metadata(), settings=db.training_settings(matrix.benchmark))
    folder, saved = save_version(artifact, Path(settings.predictor_dir) / matrix.benchmark, origin)
    items = [matrix.items[i] for i in est.anchors_]
    mae = saved.calibration["calibration_mae_points"]  # one held-out MAE: the one predictor.json carries
    coverage = crossfit_coverage(matrix, split, est, alpha=settings.alpha, seed=settings.seed,
                                 mode=saved.calibration.get("mode", "binomial"))
    weights = getattr(est, "weights_", None)
    anchor_set_id = db.save_anchor_set(
        benchmark=matrix.benchmark, method=est.method, k=est.k, items=items,
        weights=None if weights is None else [float(w) for w in weights], seed=settings.seed,
        n_train_models=len(split.train), params={"split": settings.split_policy, "val_frac": settings.val_frac,
                                                 "test_frac": settings.test_frac, "origin": origin,
                                                 "fit_seconds": round(fit_seconds, 3)},
        artifact_uri=str(folder.resolve()), origin=origin, data_version=version, test_mae=mae,
        baseline_mae=baseline, coverage=coverage)
    return {"anchor_set_id": anchor_set_id, "folder": str(folder), "mae": mae, "coverage": coverage,
            "items": items, "origin": origin, "content_hash": saved.content_hash}


def save_version(artifact: PredictorArtifact, root: Path, origin: str) -> tuple[Path, PredictorArtifact]:
    """Save ``artifact`` as the version folder ``<root>/versions/<content hash>`` (written once per
    content: the same fit again reuses it); the folder and the saved artifact."""
    staging = root / "versions" / f".staging-{origin}"
    shutil.rmtree(staging, ignore_errors=True)
    saved = artifact.save(staging)
    folder = staging.parent / saved.content_hash.removeprefix("sha256:")[:16]
    if folder.exists():
        shutil.rmtree(staging)
    else:
        staging.rename(folder)
    return folder, saved


@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"pytorch", "duckdb"}, owners=OWNERS,
          tags={"layer": "fit"}, pool="sparseeval_fit",
          check_specs=[dg.AssetCheckSpec(name, asset="candidate", blocking=True) for name in PUBLISH_CHECKS],
          description="Fit on the training models of the split: the champion's anchors kept and its predictor "
                      "refit on the new data, and a fresh selection as challenger; each anchor set written once "
                      "and each predictor saved as a version. Blocking checks decide whether the proposed one "
                      "may be published. Unchanged data and settings: nothing is refit.")
def candidate(context: dg.AssetExecutionContext, response_matrix: ResponseMatrix, store: StoreResource,
              settings: SettingsResource, tracking: TrackingResource):
    matrix, db = response_matrix, store.store()
    bench = matrix.benchmark
    version = db.data_version(bench)
    k = min(settings.k, len(matrix.items))
    champion = db.champion(bench)
    same_setup = champion is not None and champion["method"] == settings.method and champion["k"] == k \
        and champion["seed"] == settings.seed
    if same_setup and champion["data_version"] == version:
        reason = (f"skipped: data version {version} and settings unchanged since champion anchor set "
                  f"#{champion['anchor_set_id']}: nothing refit, nothing to publish")
        context.log.info("%s: %s", bench, reason)
        yield dg.MaterializeResult(metadata={"decision": reason, "proposed": None,
                                             "champion": champion["anchor_set_id"], "data_version": version})
        for name in PUBLISH_CHECKS:
            yield dg.AssetCheckResult(check_name=name, passed=True, metadata={"skipped": reason})
        return
    with tracked_run(tracking.config(), "candidate", benchmark=bench,
                     params={"k": k, "method": settings.method, "seed": settings.seed, "split": settings.split_policy,
                             "alpha": settings.alpha, "data_version": version,
                             "threads": cpu_threads()},  # with the seed, what reproduces the fit
                     tags={"dagster.run_id": context.run_id, "data_version": version}) as run, \
            db.publishing_once():  # its several writes publish the snapshot once
        run.log_matrix(matrix, source=db.path, digest=version)
        yield from _candidate_fit(context, matrix, db, store, settings, run, version, k, champion, same_setup)


def _candidate_fit(context: dg.AssetExecutionContext, matrix: ResponseMatrix, db: Any, store: StoreResource,
                   settings: SettingsResource, run: Any, version: str, k: int, champion: dict[str, Any] | None,
                   same_setup: bool):
    """The fitting body of :func:`candidate`, inside its MLflow run (which records its real duration)."""
    bench = matrix.benchmark
    split = split_for_seed(matrix, settings.seed, settings.protocol(), _dates(store, matrix, settings.split_policy))
    t0 = time.perf_counter()
    selected_est = fit_on_split(matrix, split, settings.method, k, settings.seed, device=settings.device)
    seconds = time.perf_counter() - t0
    baseline = baseline_mae(matrix, split, k, settings.seed, device=settings.device)
    selected = _fit_version(matrix, split, selected_est, settings, store, "selected", version, baseline, seconds)
    proposed, challenger, decision = selected, None, "first publication: the selected anchors"
    refit_est = None
    if same_setup:
        try:
            t1 = time.perf_counter()
            refit_est = refit_on_anchors(matrix, split, settings.method, champion["items"], settings.seed,
                                         device=settings.device)
        except ValueError as exc:
            decision = f"champion cannot be refit ({exc}): the selected anchors are proposed"
        else:
            refit = _fit_version(matrix, split, refit_est, settings, store, "refit", version, baseline,
                                 time.perf_counter() - t1)
            choice = decide(refit["mae"], selected["mae"], margin=settings.challenger_margin,
                            published_at=champion["published_at"], now=datetime.now(UTC).replace(tzinfo=None),
                            min_days=settings.challenger_min_days)
            decision = choice.reason
            if choice.publish == "refit" and refit["anchor_set_id"] != selected["anchor_set_id"]:
                proposed, challenger = refit, selected
            elif refit["anchor_set_id"] != selected["anchor_set_id"]:
                proposed, challenger = selected, None
    # the publishing checks, on the proposed predictor's held-out models
    valid = len(set(proposed["items"])) == k == len(proposed["items"]) and set(proposed["items"]) <= set(matrix.items)
    nominal = 1.0 - settings.alpha
    coverage = proposed["coverage"]
    results = {
        "beats_random_linear": (proposed["mae"] <= baseline,
                                {"test_mae": proposed["mae"], "random_linear_mae": baseline}),
        "coverage_near_nominal": (coverage is None or abs(coverage - nominal) <= settings.coverage_tolerance,
                                  {"coverage": coverage, "nominal": nominal,
                                   "tolerance": settings.coverage_tolerance,
                                   "note": "too few held-out models to measure" if coverage is None else ""}),
        "anchors_valid": (valid, {"k": k, "unique": len(set(proposed["items"]))}),
    }
    passed = all(ok for ok, _ in results.values())
    db.update_anchor_set(proposed["anchor_set_id"], role="proposed" if passed else "rejected")
    if challenger is not None:
        db.update_anchor_set(challenger["anchor_set_id"], role="challenger" if passed else "rejected")
    failed = [name for name, (ok, _) in results.items() if not ok]
    if failed:
        decision += f"; NOT published: failed {', '.join(failed)} (the champion stays)"
    context.log.info("%s: %s", bench, decision)
    proposed_est = selected_est if proposed is selected else refit_est
    cover = coverage_by_level(matrix, split, proposed_est, seed=settings.seed)
    run.log_metrics({"test_mae": proposed["mae"], "random_linear_mae": baseline, "coverage": coverage,
                     "selection_seconds": seconds, **{f"coverage/level_{lv:g}": v for lv, v in cover.items()}})
    run.set_tags({"decision": decision[:250], "proposed_anchor_set": proposed["anchor_set_id"]})
    with tempfile.TemporaryDirectory() as tmp:
        held = heldout_intervals(matrix, split, proposed_est, alpha=settings.alpha, seed=settings.seed)
        run.log_artifact(plot_predicted_vs_true(held, Path(tmp) / "predicted_vs_true.png",
                                                title=f"{bench}: held-out models"), "plots")
        run.log_artifact(plot_coverage_by_level(cover, Path(tmp) / "coverage_by_level.png", title=bench,
                                                n_models=len(split.test)), "plots")
    yield dg.MaterializeResult(metadata={
        "decision": decision, "proposed": proposed["anchor_set_id"],
        "challenger": challenger["anchor_set_id"] if challenger else None,
        "test_mae_points": round(proposed["mae"], 3), "random_linear_mae_points": round(baseline, 3),
        "coverage": coverage, "k": k, "method": settings.method, "data_version": version,
        "anchors": dg.MetadataValue.md(_markdown(pl.DataFrame({"position": range(k), "item_id": proposed["items"]}))),
        "selection_seconds": round(seconds, 2), "train_models": len(split.train), "test_models": len(split.test),
    })
    for name, (ok, meta) in results.items():
        yield dg.AssetCheckResult(check_name=name, passed=bool(ok), metadata=meta)


# --- publish ----------------------------------------------------------------------------------------

@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"mlflow", "duckdb"}, owners=OWNERS,
          tags={"layer": "publish"}, deps=[candidate], pool="duckdb_writer",
          description="Publish the proposed predictor (only reached when candidate's blocking checks pass): "
                      "registered in MLflow with alias champion (a challenger with alias challenger), copied "
                      "to <predictors>/<benchmark>/, and recorded as champion in DuckDB. Earlier versions stay "
                      "in <predictors>/<benchmark>/versions/ and in the registry.")
def champion(context: dg.AssetExecutionContext, store: StoreResource, tracking: TrackingResource,
             settings: SettingsResource) -> dg.MaterializeResult:
    return publish_proposed(context, context.partition_key, store, tracking, settings)


def publish_proposed(context: dg.AssetExecutionContext, bench: str, store: StoreResource, tracking: TrackingResource,
                     settings: SettingsResource) -> dg.MaterializeResult:
    """Publish ``bench``'s proposed anchor set (a benchmark's, or the joint predictor's): registry
    alias, published folder, DuckDB role; the challenger beside it."""
    db = store.store()
    proposed = db.anchor_sets_by_role(bench, "proposed")
    current = db.champion(bench)
    if not proposed:
        reason = f"unchanged: champion #{current['anchor_set_id']} kept" if current else "nothing proposed"
        return dg.MaterializeResult(metadata={"decision": reason,
                                              "champion": current["anchor_set_id"] if current else None})
    chosen = db.anchor_set(proposed[-1])
    cfg = tracking.config()
    published: dict[str, Any] = {}
    challengers = [db.anchor_set(i) for i in db.anchor_sets_by_role(bench, "challenger", unregistered=True)]
    with tracked_run(cfg, "champion", benchmark=bench, tags={"dagster.run_id": context.run_id}) as parent:
        for role, row in [("champion", chosen), *[("challenger", c) for c in challengers]]:
            published[role] = _register(cfg, bench, role, row, context.run_id, parent.run_id)
    with db.publishing_once():  # the role changes publish the snapshot once
        _record_publication(db, bench, chosen, challengers, published, settings)
    champ = published["champion"]
    context.log.info("%s: published anchor set #%s (K=%d, held-out MAE %.2f points) as champion, registry version %s",
                     bench, champ["anchor_set_id"], chosen["k"], chosen["test_mae"], champ["registry_version"])
    return dg.MaterializeResult(metadata={
        "decision": f"published anchor set #{champ['anchor_set_id']} as champion (registry version "
                    f"{champ['registry_version']}; previous champion #{champ['previous']})",
        "champion": champ["anchor_set_id"], "registry_version": champ["registry_version"],
        "challenger": published.get("challenger", {}).get("anchor_set_id"),
        "test_mae_points": chosen["test_mae"], "folder": str(Path(settings.predictor_dir) / bench),
    })


def _record_publication(db: Any, bench: str, chosen: dict[str, Any], challengers: list[dict[str, Any]],
                        published: dict[str, Any], settings: SettingsResource) -> None:
    """Copy the champion's folder to the published place and record both roles in DuckDB."""
    for role, row in [("champion", chosen), *[("challenger", c) for c in challengers]]:
        folder, version, run_id = Path(row["artifact_uri"]), *published[role]
        published[role] = {"anchor_set_id": row["anchor_set_id"], "registry_version": version, "run_id": run_id}
        if role == "champion":
            target = Path(settings.predictor_dir) / bench
            _publish_folder(folder, target)
            previous = db.publish_champion(bench, row["anchor_set_id"], registry_version=version,
                                           mlflow_run_id=run_id)
            published[role]["previous"] = previous
        else:
            db.update_anchor_set(row["anchor_set_id"], registry_version=version, mlflow_run_id=run_id)


def _register(cfg: Any, bench: str, role: str, row: dict[str, Any], dagster_run_id: str,
              parent_run_id: str) -> tuple[str, str]:
    """One nested MLflow run per published predictor (champion, challenger) and its registry version."""
    folder = Path(row["artifact_uri"])
    artifact = load_predictor(folder)
    with tracked_run(cfg, role, benchmark=bench, parent_run_id=parent_run_id,
                     tags={"dagster.run_id": dagster_run_id, "role": role}) as run:
        log_evaluation_run(
            cfg, benchmark=bench, method=row["method"], k=row["k"], seed=row["seed"],
            params={"role": role, "origin": row["origin"], "data_version": row["data_version"],
                    "n_train": row["n_train_models"], "content_hash": artifact.content_hash},
            metrics={"test_mae": row["test_mae"], "random_linear_mae": row["baseline_mae"],
                     **({"coverage": row["coverage"]} if row["coverage"] is not None else {})},
            anchors=[{"position": i, "item_id": item} for i, item in enumerate(row["items"])],
            predictor_state_path=folder, tags={"dagster.run_id": dagster_run_id, "role": role}, run_id=run.run_id)
        version = register_predictor(cfg, benchmark=bench, predictor_dir=folder, run_id=run.run_id, alias=role,
                                     tags={"data_version": row["data_version"], "anchor_set_id": row["anchor_set_id"]})
    return version, run.run_id


def _publish_folder(version: Path, target: Path) -> None:
    """Copy a predictor version into the published folder ``target`` (replaced atomically enough:
    the new copy is complete before the old one is moved away)."""
    staging = target.with_name(f".{target.name}.publishing")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(version, staging, ignore=shutil.ignore_patterns("versions"))
    versions = target / "versions"
    target.mkdir(parents=True, exist_ok=True)
    for child in list(target.iterdir()):
        if child != versions:
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    for child in staging.iterdir():
        child.rename(target / child.name)
    staging.rmdir()


# --- comparison and predictions ----------------------------------------------------------------------

@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"duckdb", "mlflow"}, owners=OWNERS,
          tags={"layer": "compare"}, deps=[champion], pool="sparseeval_fit",
          description="SparseEval and baselines on identical splits and seeds -> DuckDB evaluations, one MLflow "
                      "comparison run with the MAE-vs-K plot. Skipped when the data version already has one.")
def evaluation(context: dg.AssetExecutionContext, response_matrix: ResponseMatrix, store: StoreResource,
               tracking: TrackingResource, settings: SettingsResource) -> dg.MaterializeResult:
    matrix, db = response_matrix, store.store()
    version = db.data_version(matrix.benchmark)
    done = db.evaluation_count(matrix.benchmark, version)
    if done:
        return dg.MaterializeResult(metadata={"decision": f"skipped: {done} evaluation rows already exist for "
                                                          f"data version {version}"})
    # bounded by a time budget at leaderboard scale (fewer seeds, then methods, then Ks), and said so
    plan = comparison_plan(*matrix.shape, settings.methods(), settings.ks(),
                           list(range(settings.seed, settings.seed + settings.compare_seeds)))
    if plan.reduced:
        context.log.warning("%s: comparison reduced to fit its budget: %s", matrix.benchmark, plan.describe())
    ks, seeds = list(plan.ks), list(plan.seeds)
    # the candidate's selection on this data version is exactly the (method, K, seed) cell: reuse it
    selected = db.anchor_sets_by_role(matrix.benchmark, None, origin="selected", data_version=version)
    fitted = {}
    if selected:
        row = db.anchor_set(selected[-1])
        fit_seconds = float(json.loads(row["params"] or "{}").get("fit_seconds", 0.0))
        fitted[(row["method"], row["k"], row["seed"])] = (load_predictor(row["artifact_uri"]).estimator, fit_seconds)
    cfg = tracking.config()
    with tracked_run(cfg, "evaluation", benchmark=matrix.benchmark,
                     params={"methods": ",".join(settings.methods()), "ks": ",".join(map(str, ks)),
                             "seeds": len(seeds), "split": settings.split_policy, "data_version": version},
                     tags={"dagster.run_id": context.run_id, "data_version": version}) as run:
        run.log_matrix(matrix, source=db.path, digest=version)
        results = run_protocol(matrix, list(plan.methods), ks, seeds, config=settings.protocol(),
                               device=settings.device, dates=_dates(store, matrix, settings.split_policy),
                               fitted=fitted,
                               progress=lambda r: context.log.info("%s %s k=%d seed=%d: MAE %.2f tau %.3f",
                                                                   r.benchmark, r.method, r.k, r.seed, r.mae, r.tau))
        frame = results_frame(results)
        summary = summarize(results)
        with tempfile.TemporaryDirectory() as tmp:
            plot = plot_mae_vs_k(summary, Path(tmp) / f"mae_vs_k_{matrix.benchmark}.png")
            run_id = log_comparison(cfg, benchmark=matrix.benchmark, rows=frame.to_dicts(), plot_path=plot,
                                    tags={"dagster.run_id": context.run_id}, run_id=run.run_id)
            picture = _image(plot, f"MAE vs K, {matrix.benchmark}")
    db.save_evaluations(frame.with_columns(pl.lit(run_id).alias("mlflow_run_id"),
                                           pl.lit(version).alias("data_version")))
    table = summary.select("method", "k", "seeds", pl.col("mae_mean").round(2), pl.col("mae_sd").round(2),
                           pl.col("tau_mean").round(3), pl.col("seconds_mean").round(2))
    best = table.sort("mae_mean").row(0, named=True)
    context.log.info("%s: best method %s at K=%d, MAE %.2f points (%d runs compared)", matrix.benchmark,
                     best["method"], best["k"], best["mae_mean"], frame.height)
    return dg.MaterializeResult(metadata={"runs": frame.height, "mlflow_run_id": run_id, "data_version": version,
                                          "plan": plan.describe(), "plan_reduced": plan.reduced,
                                          "method_ranking": dg.MetadataValue.md(_markdown(table.sort("k", "mae_mean"))),
                                          "mae_vs_k": picture})


@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"duckdb"}, owners=OWNERS,
          tags={"layer": "publish"}, deps=[champion],
          description="Score every stored model that has anchor answers but no full score (with intervals), "
                      "with the published champion.")
def predictions(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    bench = context.partition_key
    db = store.store()
    current = db.champion(bench)
    if current is None:
        return dg.MaterializeResult(metadata={"models_scored": 0, "decision": "no champion published"})
    artifact = load_predictor(current["artifact_uri"])
    answers = db.anchor_answers_without_score(bench, artifact.anchor_item_ids)
    rows = [{**p.as_dict(), "anchor_set_id": current["anchor_set_id"]}
            for p in (predict(artifact, answers) if answers.height else [])]
    if rows:
        db.save_predictions(rows)
    return dg.MaterializeResult(metadata={"models_scored": len(rows), "anchor_set_id": current["anchor_set_id"],
                                          "ood_flagged": sum(bool(r["ood"]) for r in rows)})
