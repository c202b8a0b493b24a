"""Assets: raw_results -> response_matrix[b] -> candidate[b] -> checks -> champion[b] -> challenger[b];
then, in their own job, evaluation[b].

Thin: each asset moves data between the library and the stores and reports what happened; the
refresh policy itself (what is fitted, what competes, what is decided, recorded, resumed) is one
library operation, :func:`sparseeval.publish.refresh_policy.refresh_benchmark` (its joint twin in
:mod:`pipelines.joint`). Every fact has one home and one writer:

* ``raw_results`` (one per refresh, not per benchmark) is the only writer of results into DuckDB;
* ``response_matrix`` is the only value passed between steps: the benchmark's stored matrix
  (:mod:`sparseeval.data.access.matrix_store`, new models appended), passed by reference
  (:class:`~pipelines.io_managers.MatrixIOManager`); its data version is the store's fingerprint of
  the benchmark's current runs;
* ``candidate`` calls the refresh policy (champion refit, challenger, the **blocking** publishing
  checks decided and recorded); when the data and settings are unchanged it does nothing and says so;
* ``champion`` publishes only what passed the checks (registry alias, published folder, DuckDB role);
* ``challenger`` then selects fresh anchors against the published refit and publishes them (as
  challenger, or as the new champion when clearly better) only with their own checks passed;
* ``evaluation`` compares methods, in its own job after publication (:mod:`sparseeval.publish.comparison`):
  it never delays a publication.
"""


import base64
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from pipelines.partitions import benchmark_of, benchmark_partitions
from pipelines.resources import SettingsResource, SourceResource, StoreResource, TrackingResource
from sparseeval.data.access.ingesting import ingest_sources
from sparseeval.data.matrix import EmptyMatrixError, ResponseMatrix
from sparseeval.data.store import Store
from sparseeval.estimate.methods.joint import JOINT_METHOD
from sparseeval.publish.comparison import compare_methods
from sparseeval.publish.publishing import Publisher, published_path, score_anchor_only_models
from sparseeval.publish.refresh import matrix_range_check
from sparseeval.publish.refresh_outcome import RefreshResult
from sparseeval.publish.refresh_policy import refresh_benchmark, select_challenger

GROUP = "sparseeval"
OWNERS = ["team:sparseeval"]


def _markdown(frame: pl.DataFrame) -> str:
    head = "| " + " | ".join(frame.columns) + " |\n|" + "---|" * len(frame.columns) + "\n"
    return head + "\n".join("| " + " | ".join(str(v) for v in row) + " |" for row in frame.iter_rows())


def _image(png: bytes, title: str) -> dg.MetadataValue:
    """A PNG shown in the asset's page (markdown with the image inlined: no file server needed)."""
    data = base64.b64encode(png).decode("ascii")
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
    done = ingest_sources(db, folders, source.hub(), tasks=source.wanted_tasks(), log=context.log.info)
    report, hub, after, changed = done.report, done.fetches, done.after, done.changed
    for fetch in hub:
        if fetch.error:
            context.log.warning("%s: %s", fetch.repo, fetch.error)
    refused, skipped = done.refused(), done.skipped()
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
                      "kept beside the store: new models are appended when that is exact, else it is rebuilt "
                      "from the current runs (the metadata says which and why); the matrix and its data version "
                      "are read in one state of the store and travel together. No usable model or item: the "
                      "step fails and says why.")
def response_matrix(context: dg.AssetExecutionContext, store: StoreResource):
    db = store.store()
    bench = benchmark_of(context.partition_key, db.benchmarks())
    try:
        update = store.matrices().update(db, bench)
    except EmptyMatrixError as exc:
        raise dg.Failure(description=str(exc)) from exc
    matrix = update.matrix
    context.log.info("%s: matrix %s", bench, update.describe())
    n_models, n_items = matrix.shape
    yield dg.Output(matrix, data_version=dg.DataVersion(matrix.data_version), metadata={
        "models": n_models, "items": n_items, "density": round(matrix.density, 4),
        "dropped_models": len(matrix.dropped_models), "data_version": matrix.data_version,
        "update": update.how, "update_reason": update.reason, "models_added": update.added_models,
        "update_seconds": round(update.seconds, 2),
    })
    check = matrix_range_check(matrix)
    yield dg.AssetCheckResult(check_name=check.name, passed=check.passed, metadata=check.metadata)


# --- fit: the refresh policy (sparseeval.publish.refresh_policy); the blocking publishing checks
# --- (pipelines/checks.py) read its decision ---------------------------------------------------------

def refresh_metadata(result: RefreshResult) -> dict[str, Any]:
    """A refresh's outcome (:meth:`RefreshResult.metadata`) as the fit step's Dagster metadata: tables as
    markdown, lists and mappings as JSON."""
    meta: dict[str, Any] = {}
    for name, value in result.metadata().items():
        if isinstance(value, pl.DataFrame):
            meta[name] = dg.MetadataValue.md(_markdown(value))
        elif isinstance(value, list | dict):
            meta[name] = dg.MetadataValue.json(value)
        else:
            meta[name] = value
    return meta


@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"pytorch", "duckdb"}, owners=OWNERS,
          tags={"layer": "fit"}, pool="sparseeval_fit", output_required=False,
          description="The refresh policy (sparseeval.publish.refresh_policy.refresh_benchmark), its first phase: the "
                      "champion's anchors kept and its predictor refit on the new data (the first refresh selects "
                      "anchors instead; a fit already stored for the same data and settings is reused); the "
                      "anchor set written once and the predictor saved as a version; the publishing checks "
                      "decided and recorded (proposed or rejected). The challenger follows the publication. "
                      "Fit key (data version and every setting) already decided: no materialization, and the "
                      "steps after it are skipped.")
def candidate(context: dg.AssetExecutionContext, response_matrix: ResponseMatrix, store: StoreResource,
              settings: SettingsResource, tracking: TrackingResource):
    result = refresh_benchmark(response_matrix, store.store(), tracking.config(), settings.predictor_dir,
                               settings.settings(), log=context.log, run_tags={"dagster.run_id": context.run_id},
                               challenger=False)  # the challenger asset selects it after the publication
    if result.status != "skipped":  # skipped: no materialization, so the checks and the publish step skip
        yield dg.MaterializeResult(metadata=refresh_metadata(result))


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
        scored = _score_newcomers(context, db, bench) if done and bench != JOINT_METHOD else {"models_scored": 0}
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
        "folder": str(published_path(Path(settings.predictor_dir), bench)), **scored,
    })


@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"pytorch", "mlflow", "duckdb"},
          owners=OWNERS, tags={"layer": "fit"}, deps=[champion], pool="sparseeval_fit", output_required=False,
          description="After the refit champion is published (never before): a fresh selection competes with it "
                      "(sparseeval.publish.refresh_policy.select_challenger). Clearly better and the champion old "
                      "enough: it replaces the champion; otherwise it is published beside it under the alias "
                      "challenger; either only with its own publishing checks passed (pipelines/checks.py reports "
                      "them). No refit "
                      "published by this refresh, or its challenger decided already: no materialization.")
def challenger(context: dg.AssetExecutionContext, response_matrix: ResponseMatrix, store: StoreResource,
               settings: SettingsResource, tracking: TrackingResource):
    result = select_challenger(response_matrix, store.store(), tracking.config(), settings.predictor_dir,
                               settings.settings(), log=context.log, run_tags={"dagster.run_id": context.run_id},
                               publish=True)
    if result.status == "skipped":
        context.log.info("%s: %s", response_matrix.benchmark, result.decision)
        return
    published = [f"#{p.anchor_set_id} as {p.alias} (registry version {p.registry_version})" for p in result.published]
    yield dg.MaterializeResult(metadata={**refresh_metadata(result), "published": dg.MetadataValue.json(published),
                                         "models_scored": result.models_scored})


# --- comparison (its own job, after publication) and predictions --------------------------------------

@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"duckdb", "mlflow"}, owners=OWNERS,
          tags={"layer": "compare"}, pool="sparseeval_fit", output_required=False,
          description="SparseEval and baselines on identical splits and seeds -> DuckDB evaluations, one MLflow "
                      "comparison run with the MAE-vs-K plot (sparseeval.publish.comparison). Its own job, run after "
                      "the refresh has published: right away when many models are new, else by its weekly schedule. "
                      "Its key (data version and every comparison setting) already compared: no materialization.")
def evaluation(context: dg.AssetExecutionContext, response_matrix: ResponseMatrix, store: StoreResource,
               tracking: TrackingResource, settings: SettingsResource):
    result = compare_methods(response_matrix, store.store(), tracking.config(), settings.settings(),
                             log=context.log, run_tags={"dagster.run_id": context.run_id})
    if result.status == "skipped":
        return
    assert result.plan is not None and result.table is not None and result.plot_png is not None
    yield dg.MaterializeResult(metadata={
        "summary": f"{result.message}; {result.plan.describe()}",
        "runs": result.rows, "mlflow_run_id": result.mlflow_run_id, "data_version": result.data_version,
        "comparison_key": result.key, "plan": result.plan.describe(), "plan_reduced": result.plan.reduced,
        "method_ranking": dg.MetadataValue.md(_markdown(result.table.sort("k", "mae_mean"))),
        "mae_vs_k": _image(result.plot_png, f"MAE vs K, {result.benchmark}")})


@dg.asset(partitions_def=benchmark_partitions, group_name=GROUP, kinds={"duckdb"}, owners=OWNERS,
          tags={"layer": "publish"}, deps=[response_matrix], pool="duckdb_writer",
          op_tags={"dagster/priority": "-1"},  # after the checks and the publication, which it must not delay
          description="Score every stored model that has anchor answers but no full score (with intervals) "
                      "with the published champion, whether or not this refresh published a new one (a "
                      "rejected refresh keeps the old champion, which still scores the new models). Runs "
                      "after the publication when both are ready: it never delays it.")
def predictions(context: dg.AssetExecutionContext, store: StoreResource) -> dg.MaterializeResult:
    db = store.store()
    bench = benchmark_of(context.partition_key, db.benchmarks())
    current = db.champion(bench)
    if current is None:
        return dg.MaterializeResult(metadata={"models_scored": 0, "decision": "no champion published"})
    return dg.MaterializeResult(metadata={**_score_newcomers(context, db, bench),
                                          "anchor_set_id": current["anchor_set_id"]})


def _score_newcomers(context: dg.AssetExecutionContext, db: Store, bench: str) -> dict[str, Any]:
    """The champion scores the models with anchor answers and no full score (the library's
    :func:`~sparseeval.publish.publishing.score_anchor_only_models`); those it could not score are logged, and the
    metadata names them with why."""
    scored = score_anchor_only_models(db, bench)
    if warning := scored.warning(bench):
        context.log.warning(warning)
    return {"models_scored": scored.scored,
            **({"models_not_scored": dg.MetadataValue.json(scored.skipped)} if scored.skipped else {})}
