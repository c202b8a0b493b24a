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
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import polars as pl

from pipelines.partitions import benchmark_of, benchmark_partitions
from pipelines.resources import SettingsResource, SourceResource, StoreResource, TrackingResource
from sparseeval.artifact import load_predictor
from sparseeval.budget import comparison_plan
from sparseeval.champion import baseline_mae, crossfit_coverage, decide, mean_guess_mae, refit_on_anchors
from sparseeval.device import cpu_threads
from sparseeval.evaluation import (
    fit_on_split,
    frontier_fields,
    frontier_metrics,
    frontier_selfcheck,
    results_frame,
    run_protocol,
    split_for_seed,
    summarize,
)
from sparseeval.hub_sources import HubFetcher
from sparseeval.matrix import EmptyMatrixError, ResponseMatrix
from sparseeval.methods.joint import JOINT_METHOD
from sparseeval.names import slug
from sparseeval.plots import coverage_by_level, heldout_intervals, plot_coverage_by_level, plot_predicted_vs_true
from sparseeval.publishing import Publisher, published_path, record_decision, save_version, score_anchor_only_models
from sparseeval.refresh import comparison_key, fit_key, matrix_range_check, publishing_checks, up_to_date
from sparseeval.report import plot_mae_vs_k
from sparseeval.scoring import artifact_from_fit
from sparseeval.sources import model_dates
from sparseeval.store import IngestReport
from sparseeval.tracking import log_comparison, tracked_run

GROUP = "sparseeval"
OWNERS = ["team:sparseeval"]


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
    folders = source.folders()
    folder = ", ".join(map(str, folders)) or None
    db = store.store()
    before = {b: db.data_version(b) for b in db.benchmarks()}
    report = db.ingest(folders) if folders else IngestReport()
    hub_sources = source.hub()
    hub = HubFetcher(db, log=context.log.info, tasks=source.wanted_tasks()).refresh(hub_sources) if hub_sources else []
    for fetch in hub:
        if fetch.error:
            context.log.warning("%s: %s", fetch.repo, fetch.error)
    after = {b: db.data_version(b) for b in db.benchmarks()}
    changed = sorted(b for b, v in after.items() if before.get(b) != v)
    refused = [(f.file, f.reason or "") for f in report.files if f.status == "refused"]
    refused += [(n.part, n.reason) for f in report.files for n in f.notes if n.status == "refused"]
    refused += [(f"{fetch.repo}: {part}", reason) for fetch in hub for part, reason in fetch.refused]
    skipped = [(f.file, f.reason or "") for f in report.files if f.status == "skipped"]
    skipped += [(n.part, n.reason) for f in report.files for n in f.notes if n.status in ("skipped", "warning")]
    for file, reason in refused:
        context.log.warning("refused %s: %s", file, reason)
    context.log.info("ingest of %s: %d benchmark(s) changed: %s", folder, len(changed), ", ".join(changed) or "none")
    yield dg.MaterializeResult(metadata={
        "source": source.path or str(folder),
        "hub_fetched": dg.MetadataValue.json([f.row() for f in hub]),
        "hub_files": sum(len(f.files) for f in hub),
        "hub_bytes": sum(f.bytes for f in hub),
        "hub_seconds": round(sum(f.seconds for f in hub), 3),
        "hub_failed": sum(f.status == "failed" for f in hub),
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
          check_specs=[dg.AssetCheckSpec("scores_within_unit_interval", asset="response_matrix", blocking=True)],
          description="Dense float32 models x items matrix of the benchmark with observed mask and targets, "
                      "built from the store's current runs; the matrix and its data version are read in one "
                      "state of the store and travel together. No usable model or item: the step fails and "
                      "says why.")
def response_matrix(context: dg.AssetExecutionContext, store: StoreResource):
    db = store.store()
    bench = benchmark_of(context.partition_key, db.benchmarks())
    try:
        matrix = db.read_benchmark(bench)
    except EmptyMatrixError as exc:
        raise dg.Failure(description=str(exc)) from exc
    n_models, n_items = matrix.shape
    yield dg.Output(matrix, data_version=dg.DataVersion(matrix.data_version), metadata={
        "models": n_models, "items": n_items, "density": round(matrix.density, 4),
        "dropped_models": len(matrix.dropped_models), "data_version": matrix.data_version,
    })
    check = matrix_range_check(matrix)
    yield dg.AssetCheckResult(check_name=check.name, passed=check.passed, metadata=check.metadata)


# --- fit: champion refit + challenger; the blocking publishing checks (pipelines/checks.py) read its
# --- decision ---------------------------------------------------------------------------------------

def _dates(store: StoreResource, matrix: ResponseMatrix, policy: str) -> list[Any] | None:
    """Model dates for a split by date (read from the store only when that policy is chosen)."""
    return model_dates(store.store().model_metadata(), matrix.models) if policy == "date" else None


def _fit_version(matrix: ResponseMatrix, split: Any, est: Any, settings: SettingsResource,
                 store: StoreResource, origin: str, version: str, baseline: float,
                 fit_seconds: float, frontier: dict[str, Any]) -> dict[str, Any]:
    """Calibrate, save as a versioned predictor folder (with its frontier figures), and write the anchor
    set once; its scores."""
    db = store.store()
    artifact = artifact_from_fit(matrix, split, est, alpha=settings.alpha, seed=settings.seed,
                                 models=db.model_metadata(), settings=db.training_settings(matrix.benchmark),
                                 frontier=frontier)
    folder, saved = save_version(artifact, Path(settings.predictor_dir), matrix.benchmark)
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
        artifact_uri=str(folder.resolve()), predictor_hash=saved.content_hash,
        origin=origin, data_version=version, test_mae=mae,
        baseline_mae=baseline, coverage=coverage, **frontier_fields(frontier))
    return {"anchor_set_id": anchor_set_id, "folder": str(folder), "mae": mae, "coverage": coverage,
            "items": items, "origin": origin, "content_hash": saved.content_hash}


def resume_or_skip(context: dg.AssetExecutionContext, db: Any, tracking: TrackingResource, predictor_dir: str,
                   bench: str, key: str) -> dict[str, Any] | None:
    """Before a fit: finish publications that already show outside DuckDB; then, when a publication of
    this very fit key is still waiting, the metadata that hands it to the publish step; when the key
    is already decided, None after logging why nothing runs (no materialization: downstream steps and
    checks are skipped, and shown as skipped)."""
    publisher = Publisher(db, tracking.config(), Path(predictor_dir), run_tags={"dagster.run_id": context.run_id})
    for done in publisher.publish_open(bench, started_only=True):
        context.log.warning("%s: finished the interrupted publication of anchor set #%d as %s (registry version "
                            "%s)", bench, done.anchor_set_id, done.alias, done.registry_version)
    pending = db.open_publications(bench)
    if pending and all(p["fit_key"] == key for p in pending):
        ids = ", ".join(f"#{p['anchor_set_id']} as {p['alias']}" for p in pending)
        return {"decision": f"resumed: the publication of {ids} (fit key {key[:12]}) did not finish; "
                            f"the checks it passed are reported again and the publish step completes it",
                "evaluated": int(pending[0]["anchor_set_id"]), "fit_key": key}
    decided = up_to_date(db, bench, key)
    if decided is not None and not pending:
        context.log.info("%s: skipped: fit key %s (data version %s and every setting) already decided on %s: %s",
                         bench, key[:12], decided["data_version"], decided["decided_at"], decided["reason"])
        return None
    return {}


@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"pytorch", "duckdb"}, owners=OWNERS,
          tags={"layer": "fit"}, pool="sparseeval_fit", output_required=False,
          description="Fit on the training models of the split: the champion's anchors kept and its predictor "
                      "refit on the new data, and a fresh selection as challenger; each anchor set written once "
                      "and each predictor saved as a version; the publishing checks decided and recorded "
                      "(proposed or rejected). Fit key (data version and every setting) already decided: no "
                      "materialization, and the steps after it are skipped.")
def candidate(context: dg.AssetExecutionContext, response_matrix: ResponseMatrix, store: StoreResource,
              settings: SettingsResource, tracking: TrackingResource):
    matrix, db = response_matrix, store.store()
    bench = matrix.benchmark
    version = matrix.data_version or db.data_version(bench)  # an .npz of an older release carries none
    k = min(settings.k, len(matrix.items))
    key = fit_key(version, settings.fit_settings())
    resumed = resume_or_skip(context, db, tracking, settings.predictor_dir, bench, key)
    if resumed is None:
        return
    if resumed:
        yield dg.MaterializeResult(metadata={**resumed, "data_version": version})
        return
    champion = db.champion(bench)
    same_setup = champion is not None and champion["method"] == settings.method and champion["k"] == k \
        and champion["seed"] == settings.seed
    with tracked_run(tracking.config(), "candidate", benchmark=bench,
                     params={"k": k, "method": settings.method, "seed": settings.seed, "split": settings.split_policy,
                             "alpha": settings.alpha, "data_version": version, "fit_key": key,
                             "threads": cpu_threads()},  # with the seed, what reproduces the fit
                     tags={"dagster.run_id": context.run_id, "data_version": version}) as run, \
            db.publishing_once():  # its several writes publish the snapshot once
        run.log_matrix(matrix, source=db.path, digest=version)
        yield from _candidate_fit(context, matrix, db, store, settings, run, version, k, champion, same_setup, key)


def _candidate_fit(context: dg.AssetExecutionContext, matrix: ResponseMatrix, db: Any, store: StoreResource,
                   settings: SettingsResource, run: Any, version: str, k: int, champion: dict[str, Any] | None,
                   same_setup: bool, key: str):
    """The fitting body of :func:`candidate`, inside its MLflow run (which records its real duration)."""
    bench = matrix.benchmark
    split = split_for_seed(matrix, settings.seed, settings.protocol(), _dates(store, matrix, settings.split_policy))
    t0 = time.perf_counter()
    selected_est = fit_on_split(matrix, split, settings.method, k, settings.seed, device=settings.device)
    seconds = time.perf_counter() - t0
    baseline = baseline_mae(matrix, split, k, settings.seed, device=settings.device)
    # the method on models stronger than every model it learned from: its own fitting models, cut at the top
    frontier = frontier_selfcheck(matrix, np.concatenate([split.train, split.val]), settings.method, k, settings.seed,
                                  alpha=settings.alpha, device=settings.device)
    selected = _fit_version(matrix, split, selected_est, settings, store, "selected", version, baseline, seconds,
                            frontier)
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
                                 time.perf_counter() - t1, frontier)
            choice = decide(refit["mae"], selected["mae"], margin=settings.challenger_margin,
                            published_at=champion["published_at"], now=datetime.now(UTC).replace(tzinfo=None),
                            min_days=settings.challenger_min_days)
            decision = choice.reason
            if choice.publish == "refit" and refit["anchor_set_id"] != selected["anchor_set_id"]:
                proposed, challenger = refit, selected
            elif refit["anchor_set_id"] != selected["anchor_set_id"]:
                proposed, challenger = selected, None
    # the publishing checks, on the proposed predictor's held-out models
    checks = publishing_checks(mae={bench: proposed["mae"]}, baseline={bench: baseline},
                               mean_guess={bench: mean_guess_mae(matrix.scores, split)},
                               coverage={bench: proposed["coverage"]}, nominal=1.0 - settings.alpha,
                               tolerance=settings.coverage_tolerance, items=proposed["items"], expected_k=k,
                               known_items=set(matrix.items), frontier={bench: frontier},
                               frontier_silent_max=settings.frontier_silent_max)
    outcome = record_decision(db, bench, fit_key=key, data_version=version, proposed=proposed,
                              challenger=challenger, checks=checks)
    decision += f"; {outcome}"
    context.log.info("%s: %s", bench, decision)
    proposed_est = selected_est if proposed is selected else refit_est
    cover = coverage_by_level(matrix, split, proposed_est, seed=settings.seed)
    run.log_metrics({"test_mae": proposed["mae"], "random_linear_mae": baseline, "coverage": proposed["coverage"],
                     "selection_seconds": seconds, **{f"coverage/level_{lv:g}": v for lv, v in cover.items()},
                     **{f"frontier/{name}": v for name, v in frontier_metrics(frontier).items()}})
    run.set_tags({"decision": decision[:250], "proposed_anchor_set": proposed["anchor_set_id"]})
    with tempfile.TemporaryDirectory() as tmp:
        held = heldout_intervals(matrix, split, proposed_est, alpha=settings.alpha, seed=settings.seed)
        run.log_artifact(plot_predicted_vs_true(held, Path(tmp) / "predicted_vs_true.png",
                                                title=f"{bench}: held-out models"), "plots")
        run.log_artifact(plot_coverage_by_level(cover, Path(tmp) / "coverage_by_level.png", title=bench,
                                                n_models=len(split.test)), "plots")
    yield dg.MaterializeResult(metadata={
        "decision": decision, "evaluated": proposed["anchor_set_id"], "proposed": proposed["anchor_set_id"],
        "challenger": challenger["anchor_set_id"] if challenger else None, "fit_key": key,
        "test_mae_points": round(proposed["mae"], 3), "random_linear_mae_points": round(baseline, 3),
        "coverage": proposed["coverage"], "k": k, "method": settings.method, "data_version": version,
        "anchors": dg.MetadataValue.md(_markdown(pl.DataFrame({"position": range(k), "item_id": proposed["items"]}))),
        "selection_seconds": round(seconds, 2), "train_models": len(split.train), "test_models": len(split.test),
        **{f"frontier_{name}": round(v, 4) for name, v in frontier_metrics(frontier).items()},
        "frontier_note": frontier.get("note", ""),
    })


# --- publish ----------------------------------------------------------------------------------------

@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"mlflow", "duckdb"}, owners=OWNERS,
          tags={"layer": "publish"}, deps=[candidate], pool="duckdb_writer",
          description="Publish what the candidate proposed (only reached when its blocking checks pass), through "
                      "the library's one publisher: registry version (reused for the same content), the "
                      "published folder swapped in one rename, the MLflow alias, then the DuckDB role; each step "
                      "recorded, so an interrupted publication is finished by the next one. Then the anchor-only "
                      "models are scored with the new champion.")
def champion(context: dg.AssetExecutionContext, store: StoreResource, tracking: TrackingResource,
             settings: SettingsResource) -> dg.MaterializeResult:
    return publish_open(context, benchmark_of(context.partition_key, store.store().benchmarks()), store, tracking,
                        settings)


def publish_open(context: dg.AssetExecutionContext, bench: str, store: StoreResource, tracking: TrackingResource,
                 settings: SettingsResource) -> dg.MaterializeResult:
    """Publish ``bench``'s open publications (a benchmark's, or the joint predictor's) and report them."""
    db = store.store()
    publisher = Publisher(db, tracking.config(), Path(settings.predictor_dir),
                          run_tags={"dagster.run_id": context.run_id})
    with db.publishing_once():  # the role changes publish the snapshot once
        done = publisher.publish_open(bench)
        scored = score_anchor_only_models(db, bench) if done and bench != JOINT_METHOD else 0
    current = db.champion(bench)
    if not done:
        reason = f"unchanged: champion #{current['anchor_set_id']} kept" if current else "nothing proposed"
        return dg.MaterializeResult(metadata={"decision": reason,
                                              "champion": current["anchor_set_id"] if current else None})
    lines = [f"#{p.anchor_set_id} as {p.alias} (registry version {p.registry_version}"
             f"{', reused' if p.reused_version else ''}; previous #{p.previous})" for p in done]
    context.log.info("%s: published %s", bench, "; ".join(lines))
    champ = next((p for p in done if p.alias == "champion"), None)
    return dg.MaterializeResult(metadata={
        "decision": "published " + "; ".join(lines),
        "champion": current["anchor_set_id"] if current else None,
        "registry_version": champ.registry_version if champ else None,
        "challenger": next((p.anchor_set_id for p in done if p.alias == "challenger"), None),
        "test_mae_points": current["test_mae"] if current else None,
        "folder": str(published_path(Path(settings.predictor_dir), bench)), "models_scored": scored,
    })


# --- comparison and predictions ----------------------------------------------------------------------

@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"duckdb", "mlflow"}, owners=OWNERS,
          tags={"layer": "compare"}, pool="sparseeval_fit", output_required=False,
          description="SparseEval and baselines on identical splits and seeds -> DuckDB evaluations, one MLflow "
                      "comparison run with the MAE-vs-K plot. Its key (data version and every comparison "
                      "setting) already compared: no materialization.")
def evaluation(context: dg.AssetExecutionContext, response_matrix: ResponseMatrix, store: StoreResource,
               tracking: TrackingResource, settings: SettingsResource):
    matrix, db = response_matrix, store.store()
    version = matrix.data_version or db.data_version(matrix.benchmark)
    key = comparison_key(version, settings.comparison_settings())
    done = db.evaluation_count(matrix.benchmark, run_key=key)
    if done:
        context.log.info("%s: comparison skipped: %d rows already stored for its key %s (data version %s)",
                         matrix.benchmark, done, key[:12], version)
        return
    # bounded by a time budget at leaderboard scale (fewer seeds, then methods, then Ks), and said so
    plan = comparison_plan(*matrix.shape, settings.methods(), settings.ks(),
                           list(range(settings.seed, settings.seed + settings.compare_seeds)),
                           budget_s=settings.compare_budget_s)
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
            plot = plot_mae_vs_k(summary, Path(tmp) / f"mae_vs_k_{slug(matrix.benchmark)}.png")
            run_id = log_comparison(cfg, benchmark=matrix.benchmark, rows=frame.to_dicts(), plot_path=plot,
                                    tags={"dagster.run_id": context.run_id}, run_id=run.run_id)
            picture = _image(plot, f"MAE vs K, {matrix.benchmark}")
    db.save_evaluations(frame.with_columns(pl.lit(run_id).alias("mlflow_run_id"),
                                           pl.lit(version).alias("data_version"), pl.lit(key).alias("run_key")))
    table = summary.select("method", "k", "seeds", pl.col("mae_mean").round(2), pl.col("mae_sd").round(2),
                           pl.col("tau_mean").round(3), pl.col("seconds_mean").round(2))
    best = table.sort("mae_mean").row(0, named=True)
    context.log.info("%s: best method %s at K=%d, MAE %.2f points (%d runs compared)", matrix.benchmark,
                     best["method"], best["k"], best["mae_mean"], frame.height)
    yield dg.MaterializeResult(metadata={"runs": frame.height, "mlflow_run_id": run_id, "data_version": version,
                                         "comparison_key": key,
                                          "plan": plan.describe(), "plan_reduced": plan.reduced,
                                          "method_ranking": dg.MetadataValue.md(_markdown(table.sort("k", "mae_mean"))),
                                          "mae_vs_k": picture})


@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"duckdb"}, owners=OWNERS,
          tags={"layer": "publish"}, deps=[response_matrix], pool="duckdb_writer",
          description="Score every stored model that has anchor answers but no full score (with intervals) "
                      "with the published champion, whether or not this refresh published a new one (a "
                      "rejected refresh keeps the old champion, which still scores the new models).")
def predictions(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    db = store.store()
    bench = benchmark_of(context.partition_key, db.benchmarks())
    current = db.champion(bench)
    if current is None:
        return dg.MaterializeResult(metadata={"models_scored": 0, "decision": "no champion published"})
    scored = score_anchor_only_models(db, bench)
    return dg.MaterializeResult(metadata={"models_scored": scored, "anchor_set_id": current["anchor_set_id"]})
