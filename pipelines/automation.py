"""Jobs, the daily schedule and the two sensors: refresh only what changed.

* ``ingest`` job (``raw_results``): ingests the source folder once.
* ``refresh`` job (partitioned by benchmark): matrix -> candidate -> champion -> evaluation, predictions.
* ``new_results_sensor``: a source unit whose bytes are not in the store yet -> one ``ingest`` run.
  Its cursor starts from what the store has already ingested (sha256 in ``ingests``), so opening
  the UI after ``make run`` launches nothing.
* ``benchmarks_changed_sensor``: after each ``raw_results`` materialization, adds partitions for
  new benchmarks (dynamic partitions: nothing to configure) and requests ``refresh`` runs for the
  benchmarks whose data version changed, and only those.
* ``daily_refresh``: launches the ``ingest`` job; when nothing changed, the sensor requests no
  refresh (and a refresh of an unchanged benchmark skips its fit and says why).
* ``joint`` job (``joint_anchors`` -> ``joint_champion``): the predictor spanning every benchmark;
  ``joint_after_refresh_sensor`` requests it when the last queued ``refresh`` run has succeeded
  (it reads every benchmark's matrix; unchanged matrices: it skips its fit and says why).
"""


import hashlib
import json
from pathlib import Path

import dagster as dg

from pipelines.assets import candidate, champion, evaluation, predictions, raw_results, response_matrix
from pipelines.joint import joint_anchors, joint_champion
from pipelines.partitions import BENCHMARK_PARTITIONS, benchmark_partitions
from pipelines.resources import SourceResource, StoreResource
from sparseeval.readers.detect import discover
from sparseeval.store.pinning import unit_sha256

ingest_job = dg.define_asset_job(
    "ingest", selection=dg.AssetSelection.assets(raw_results),
    description="Ingest the source folder into DuckDB (once per refresh, for every benchmark).")

refresh_job = dg.define_asset_job(
    "refresh",
    selection=dg.AssetSelection.assets(response_matrix, candidate, champion, evaluation, predictions),
    partitions_def=benchmark_partitions,
    description="Rebuild one benchmark's matrix, refit (champion kept, challenger re-selected), publish what "
                "passes the checks, compare methods, score anchor-only models. Unchanged data: skips.",
)


@dg.schedule(job=ingest_job, cron_schedule="0 3 * * *", default_status=dg.DefaultScheduleStatus.RUNNING)
def daily_refresh(context: dg.ScheduleEvaluationContext):
    """Every day at 03:00: ingest; the sensor below refreshes the benchmarks that changed."""
    stamp = context.scheduled_execution_time.strftime("%Y-%m-%d")
    return dg.RunRequest(run_key=f"daily-{stamp}")

joint_job = dg.define_asset_job(
    "joint", selection=dg.AssetSelection.assets(joint_anchors, joint_champion),
    description="Fit, check and publish the joint predictor (one anchor set for every benchmark) from the "
                "benchmarks' current matrices. Unchanged matrices and settings: skips.")


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


@dg.sensor(job=ingest_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def new_results_sensor(context: dg.SensorEvaluationContext, source: SourceResource, store: StoreResource):
    """A source unit the store does not hold yet -> one ``ingest`` run (never one per benchmark)."""
    folder = source.resolve()
    cursor = json.loads(context.cursor) if context.cursor else {}
    ingested = set(store.store().query("SELECT DISTINCT sha256 FROM ingests WHERE status IN ('ok', 'partial')")
                   .get_column("sha256").to_list())
    fresh, new_cursor = new_units(folder, cursor, ingested)
    context.update_cursor(json.dumps(new_cursor))
    if not fresh:
        return dg.SkipReason(f"no new results in {folder} ({len(new_cursor)} unit(s), all already ingested)")
    digest = hashlib.sha256("\n".join(sorted(str(u) for u in fresh) + sorted(new_cursor.values())).encode())
    return dg.RunRequest(run_key=f"files-{digest.hexdigest()[:16]}",
                         tags={"sparseeval/new_units": ", ".join(u.name for u in fresh)[:200]})


@dg.asset_sensor(asset_key=raw_results.key, job=refresh_job, default_status=dg.DefaultSensorStatus.RUNNING)
def benchmarks_changed_sensor(context: dg.SensorEvaluationContext, asset_event: dg.EventLogEntry):
    """After an ingest: add partitions for new benchmarks and refresh the ones whose data changed."""
    materialization = asset_event.asset_materialization
    assert materialization is not None
    metadata = materialization.metadata
    benchmarks = list(metadata["benchmarks"].value) if "benchmarks" in metadata else []
    changed = list(metadata["changed_benchmarks"].value) if "changed_benchmarks" in metadata else []
    known = set(context.instance.get_dynamic_partitions(BENCHMARK_PARTITIONS))
    new = sorted(set(benchmarks) - known)
    requests = [dg.RunRequest(run_key=f"{asset_event.run_id}-{b}", partition_key=b) for b in sorted(changed)]
    if not requests and not new:
        return dg.SkipReason("the last ingest changed no benchmark: nothing to refresh")
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[benchmark_partitions.build_add_request(new)] if new else [])


#: a refresh run that has not finished yet (the joint predictor waits for the last one)
IN_PROGRESS = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED]


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, monitored_jobs=[refresh_job], request_job=joint_job,
                      default_status=dg.DefaultSensorStatus.RUNNING)
def joint_after_refresh_sensor(context: dg.RunStatusSensorContext):
    """After a successful ``refresh`` run, once no other refresh is queued or running: one ``joint`` run."""
    busy = context.instance.get_run_records(dg.RunsFilter(job_name=refresh_job.name, statuses=IN_PROGRESS), limit=1)
    if busy:
        return dg.SkipReason("refresh runs still in progress: the joint predictor waits for the last one")
    return dg.RunRequest(run_key=f"joint-after-{context.dagster_run.run_id}")
