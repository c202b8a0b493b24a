"""Jobs, the daily schedule and the sensors: refresh only what changed, whoever changed it.

* ``ingest`` job (``raw_results``): ingests the source folder once.
* ``refresh`` job (partitioned by benchmark): matrix (new models appended) -> candidate -> checks ->
  champion -> challenger, predictions; ``compare`` job (partitioned): evaluation, after the refresh.
* ``new_results_sensor``: a source unit whose bytes are not in the store yet -> one ``ingest`` run.
  Its cursor starts from what the store has already ingested (sha256 in ``ingests``), so opening
  the UI after ``make run`` launches nothing.
* ``hub_sources_sensor``: a ``hf://datasets/...`` repo whose commit the store has not ingested -> one
  ``ingest`` run; an unchanged repo costs one metadata call per tick (:mod:`sparseeval.data.access.hub_sources`).
* ``stale_benchmarks_sensor``: asks the **store** which benchmarks are stale: a data version or a
  setting whose fit key has no decision yet (:func:`sparseeval.publish.refresh.stale_benchmarks`). So results
  ingested by ``sparseeval ingest`` into the same store refresh too, a changed setting refreshes what
  it changes, and after ``make run`` (everything decided) it requests nothing. It adds partitions for
  new benchmarks. Its run key names the stale state, so one state is requested once (a run that
  failed is retried by Dagster's run retries, not by asking again every tick).
* ``joint_sensor``: once no refresh is queued or running and every joint benchmark is up to date
  (or its last refresh failed: the joint fit then uses its previous matrix and says so), requests the
  ``joint`` job when the joint predictor's fit key has no decision yet.
* ``comparison_sensor``: the method comparison is its own ``compare`` job, so it never delays a
  publication: once a benchmark's refresh is decided, one run when its comparison is due now (never
  compared under these settings, or new models at least ``$SPARSEEVAL_COMPARE_NEW_SHARE`` of it:
  :func:`sparseeval.publish.comparison.comparison_due`); a smaller share is left to ``weekly_comparison``.
* ``daily_refresh``: launches the ``ingest`` job; the sensors refresh what it changed.
* ``weekly_comparison``: Sundays at 04:00, compares every benchmark whose current data is not compared.
"""


import hashlib
import json
from pathlib import Path

import dagster as dg

from pipelines.assets import candidate, challenger, champion, evaluation, predictions, raw_results, response_matrix
from pipelines.joint import joint_anchors, joint_champion
from pipelines.partitions import BENCHMARK_PARTITIONS, benchmark_partitions, partition_key
from pipelines.resources import SettingsResource, SourceResource, StoreResource
from sparseeval.core import settings as defaults
from sparseeval.core.settings import FIT
from sparseeval.data.access.hub_sources import HubFetcher
from sparseeval.data.readers.detect import discover
from sparseeval.data.store.pinning import unit_sha256
from sparseeval.publish.comparison import comparisons_due
from sparseeval.publish.refresh import stale_benchmarks
from sparseeval.publish.sequence import joint_due

#: seconds between sensor evaluations (``SPARSEEVAL_SENSOR_INTERVAL``; read when the code location loads)
SENSOR_INTERVAL: int = defaults.SETTINGS["sensor_interval"].value()

ingest_job = dg.define_asset_job(
    "ingest", selection=dg.AssetSelection.assets(raw_results),
    description="Ingest the source folder into DuckDB (once per refresh, for every benchmark).")

refresh_job = dg.define_asset_job(
    "refresh",
    selection=dg.AssetSelection.assets(response_matrix, candidate, champion, challenger, predictions),
    partitions_def=benchmark_partitions,
    description="Bring one benchmark's matrix up to date (new models appended), refit the champion's anchors "
                "and publish it when it passes the checks, then select a challenger against it, score "
                "anchor-only models. Fit key "
                "already decided: skips. The method comparison is its own job (compare): it never delays a "
                "publication.",
)

compare_job = dg.define_asset_job(
    "compare", selection=dg.AssetSelection.assets(evaluation), partitions_def=benchmark_partitions,
    description="Compare the methods on one benchmark's current matrix (after its refresh published). "
                "Requested by comparison_sensor when many models are new, else by the weekly schedule.")

#: the comparison's own schedule: Sundays at 04:00, after the daily refresh (``weekly_comparison``)
COMPARE_CRON = "0 4 * * 0"


@dg.schedule(job=ingest_job, cron_schedule="0 3 * * *", default_status=dg.DefaultScheduleStatus.RUNNING)
def daily_refresh(context: dg.ScheduleEvaluationContext):
    """Every day at 03:00: ingest; the sensors refresh the benchmarks that changed."""
    stamp = context.scheduled_execution_time.strftime("%Y-%m-%d")
    return dg.RunRequest(run_key=f"daily-{stamp}")

@dg.schedule(job=compare_job, cron_schedule=COMPARE_CRON, default_status=dg.DefaultScheduleStatus.RUNNING)
def weekly_comparison(context: dg.ScheduleEvaluationContext, store: StoreResource, settings: SettingsResource):
    """Every week: compare every benchmark whose current data has not been compared yet (the comparisons
    the refreshes deferred because few models were new)."""
    db = store.store()
    with db.pinned():
        due = comparisons_due(db, settings.settings(), scheduled=True)
    if not due:
        return dg.SkipReason("every benchmark's current data is compared already")
    stamp = context.scheduled_execution_time.strftime("%Y-%m-%d")
    return [dg.RunRequest(run_key=f"compare-{stamp}-{partition_key(b)}-{d.key[:16]}", partition_key=partition_key(b),
                          tags={"sparseeval/why": d.reason[:200]}) for b, d in sorted(due.items())]


joint_job = dg.define_asset_job(
    "joint", selection=dg.AssetSelection.assets(joint_anchors, joint_champion),
    description="Fit, check and publish the joint predictor (one anchor set for every benchmark) from the "
                "benchmarks' current matrices. Fit key already decided: skips.")


def unit_signature(path: Path) -> str:
    """Cheap change signature of a source unit (file or folder): names, sizes, mtimes."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.relative_to(path.parent)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def new_units(folder: Path, cursor: dict[str, str], ingested: set[str]) -> tuple[list[Path], dict[str, str]]:
    """Units not yet in the store, and the new cursor.

    A unit whose signature is unchanged since the last tick is not looked at again; otherwise its
    sha256 (the store's own unit hash) is compared with the store's ``ingests``: a unit the store
    already holds is not new, whatever the cursor said (a first tick after ``make run``).
    """
    new_cursor: dict[str, str] = {}
    fresh: list[Path] = []
    units = discover(folder)[0] if folder.exists() else []
    for unit in units:
        sig = unit_signature(unit)
        new_cursor[str(unit)] = sig
        if cursor.get(str(unit)) == sig:
            continue
        if unit_sha256(unit) not in ingested:
            fresh.append(unit)
    return fresh, new_cursor


@dg.sensor(job=ingest_job, minimum_interval_seconds=SENSOR_INTERVAL, default_status=dg.DefaultSensorStatus.RUNNING)
def new_results_sensor(context: dg.SensorEvaluationContext, source: SourceResource, store: StoreResource):
    """A source unit the store does not hold yet -> one ``ingest`` run (never one per benchmark)."""
    folders = source.folders()
    if not folders:
        return dg.SkipReason("no local source folder configured (Hub sources: hub_sources_sensor)")
    folder = ", ".join(map(str, folders))
    cursor = json.loads(context.cursor) if context.cursor else {}
    ingested = store.store().ingested_hashes()
    fresh, new_cursor = [], {}
    for each in folders:  # the cursor is keyed by unit path: the folders' entries do not collide
        more, seen = new_units(each, cursor, ingested)
        fresh += more
        new_cursor |= seen
    context.update_cursor(json.dumps(new_cursor))
    if not fresh:
        return dg.SkipReason(f"no new results in {folder} ({len(new_cursor)} unit(s), all already ingested)")
    digest = hashlib.sha256("\n".join(sorted(str(u) for u in fresh) + sorted(new_cursor.values())).encode())
    return dg.RunRequest(run_key=f"files-{digest.hexdigest()[:16]}",
                         tags={"sparseeval/new_units": ", ".join(u.name for u in fresh)[:200]})


@dg.sensor(job=ingest_job, minimum_interval_seconds=SENSOR_INTERVAL, default_status=dg.DefaultSensorStatus.RUNNING)
def hub_sources_sensor(context: dg.SensorEvaluationContext, source: SourceResource, store: StoreResource):
    """A Hub repo whose commit the store has not ingested -> one ``ingest`` run (one metadata call per repo)."""
    sources = source.hub()
    if not sources:
        return dg.SkipReason("no hf://datasets/... source configured")
    fetcher = HubFetcher(store.store(), log=context.log.info, tasks=source.wanted_tasks())
    fresh, failed = fetcher.new_revisions(sources)
    for f in failed:
        context.log.warning("%s: %s", f.repo, f.error)
    if not fresh:
        return dg.SkipReason(f"no new revision on the Hub ({len(failed)} repo(s) failed: see the log)" if failed
                             else "every Hub repo is at the revision already ingested")
    names = sorted(f"{f.repo}@{f.sha}" for f in fresh)
    # the wanted tasks are in the key: a widened list on an unchanged commit is a new request, not a duplicate
    key = hashlib.sha256("\n".join([*names, f"tasks={fetcher.wanted_key}"]).encode()).hexdigest()[:16]
    return dg.RunRequest(run_key=f"hub-{key}",
                         tags={"sparseeval/new_revisions": ", ".join(n[:len(n) - 32] for n in names)[:200]})


@dg.sensor(job=refresh_job, minimum_interval_seconds=SENSOR_INTERVAL, default_status=dg.DefaultSensorStatus.RUNNING)
def stale_benchmarks_sensor(context: dg.SensorEvaluationContext, store: StoreResource, settings: SettingsResource):
    """Benchmarks the store says are stale (new data from any writer, changed settings) -> one ``refresh``
    run each; new benchmarks get their partition first."""
    db = store.store()
    with db.pinned():  # staleness and the benchmark list from one state of the store
        stale = stale_benchmarks(db, settings.settings().key_settings(FIT))
        benchmarks = db.benchmarks()
    known = set(context.instance.get_dynamic_partitions(BENCHMARK_PARTITIONS))
    new = sorted({partition_key(b) for b in benchmarks} - known)
    if not stale and not new:
        return dg.SkipReason("every benchmark is up to date: its fit key is decided")
    requests = [dg.RunRequest(run_key=f"refresh-{partition_key(b)}-{key}", partition_key=partition_key(b),
                              tags={"sparseeval/why": why[:200]})
                for b, (key, why) in sorted(stale.items())]
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[benchmark_partitions.build_add_request(new)] if new else [])


#: a run that has not finished yet (the joint predictor waits for the last refresh)
IN_PROGRESS = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED]


@dg.sensor(job=compare_job, minimum_interval_seconds=SENSOR_INTERVAL, default_status=dg.DefaultSensorStatus.RUNNING)
def comparison_sensor(context: dg.SensorEvaluationContext, store: StoreResource, settings: SettingsResource):
    """After a benchmark's refresh (its fit key decided, so its publication came first): one ``compare``
    run when its comparison is due now (never compared under these settings, or many new models);
    a comparison deferred for a small share of new models is left to ``weekly_comparison``."""
    db = store.store()
    with db.pinned():  # staleness and what is due from one state of the store
        stale = stale_benchmarks(db, settings.settings().key_settings(FIT))
        due = comparisons_due(db, settings.settings(), skip=list(stale))
    busy = {r.dagster_run.tags.get("dagster/partition") for r in context.instance.get_run_records(
        dg.RunsFilter(job_name=refresh_job.name, statuses=IN_PROGRESS))}
    requests = [dg.RunRequest(run_key=f"compare-{partition_key(b)}-{d.key[:16]}", partition_key=partition_key(b),
                              tags={"sparseeval/why": d.reason[:200]})
                for b, d in sorted(due.items()) if partition_key(b) not in busy]
    if not requests:
        return dg.SkipReason("no comparison due now (refreshes pending, compared already, or deferred to the "
                             "weekly schedule)")
    return requests



def _last_refresh_failed(instance: dg.DagsterInstance, bench: str) -> bool:
    records = instance.get_run_records(dg.RunsFilter(job_name=refresh_job.name,
                                                     tags={"dagster/partition": partition_key(bench)}),
                                       limit=1)
    return bool(records) and records[0].dagster_run.status == dg.DagsterRunStatus.FAILURE


@dg.sensor(job=joint_job, minimum_interval_seconds=SENSOR_INTERVAL, default_status=dg.DefaultSensorStatus.RUNNING)
def joint_sensor(context: dg.SensorEvaluationContext, store: StoreResource, settings: SettingsResource):
    """After the refreshes of a batch (failed ones included): one ``joint`` run, when the library says it is due
    (:func:`sparseeval.publish.sequence.joint_due`: its key, the benchmarks it waits for, enough common models)."""
    busy = context.instance.get_run_records(dg.RunsFilter(job_name=refresh_job.name, statuses=IN_PROGRESS), limit=1)
    if busy:
        return dg.SkipReason("refresh runs still in progress: the joint predictor waits for the last one")
    db, chosen = store.store(), settings.settings()
    with db.pinned():  # staleness, data versions and the decided keys from one state of the store
        due = joint_due(db, chosen, stale=stale_benchmarks(db, chosen.key_settings(FIT)),
                        failed=lambda bench: _last_refresh_failed(context.instance, bench))
    if not due.due:
        return dg.SkipReason(due.reason)
    return dg.RunRequest(run_key=f"joint-{due.key[:16]}", tags={"sparseeval/why": due.reason[:200]})
