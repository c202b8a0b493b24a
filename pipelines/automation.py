"""The refresh job, its daily schedule, and a sensor for new or changed result files.

Both are on by default (``dagster dev`` starts them). The schedule asks for one run per benchmark
partition; the sensor asks only for the benchmarks that a new or changed source unit contains.
Unchanged files cost nothing either way: ingest skips a file whose sha256 is already stored.
"""


import hashlib
import json
from pathlib import Path

import dagster as dg

from pipelines.assets import (
    anchors,
    benchmark_partitions,
    evaluation,
    predictions,
    predictor,
    raw_results,
    response_matrix,
)
from pipelines.resources import SourceResource
from sparseeval.readers.base import InputError
from sparseeval.readers.detect import iter_sources, read_source

refresh_job = dg.define_asset_job(
    "refresh",
    selection=dg.AssetSelection.assets(raw_results, response_matrix, anchors, predictor, evaluation, predictions),
    partitions_def=benchmark_partitions,
    description="Ingest new results, rebuild matrices, reselect anchors, republish predictors, re-evaluate.",
)


@dg.schedule(job=refresh_job, cron_schedule="0 3 * * *", default_status=dg.DefaultScheduleStatus.RUNNING)
def daily_refresh(context: dg.ScheduleEvaluationContext):
    """Every day at 03:00: refresh every benchmark (one run per partition)."""
    stamp = context.scheduled_execution_time.strftime("%Y-%m-%d")
    for key in benchmark_partitions.get_partition_keys():
        yield dg.RunRequest(run_key=f"daily-{stamp}-{key}", partition_key=key)


def unit_signature(path: Path) -> str:
    """Cheap change signature of a source unit (file or folder): names, sizes, mtimes."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.relative_to(path.parent)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def changed_units(folder: Path, cursor: dict[str, str]) -> tuple[list[Path], dict[str, str]]:
    """Units whose signature differs from the cursor, and the new cursor."""
    new_cursor: dict[str, str] = {}
    changed: list[Path] = []
    for unit in iter_sources(folder) if folder.exists() else []:
        sig = unit_signature(unit)
        new_cursor[str(unit)] = sig
        if cursor.get(str(unit)) != sig:
            changed.append(unit)
    return changed, new_cursor


@dg.sensor(job=refresh_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def new_results_sensor(context: dg.SensorEvaluationContext, source: SourceResource):
    """A new or changed results unit in the source folder -> refresh the benchmarks it contains."""
    folder = source.resolve()
    cursor = json.loads(context.cursor) if context.cursor else {}
    changed, new_cursor = changed_units(folder, cursor)
    known = set(benchmark_partitions.get_partition_keys())
    wanted: set[str] = set()
    for unit in changed:
        try:
            benches = set(read_source(unit).responses["benchmark"].unique().to_list())
        except InputError as exc:
            # still ingest it everywhere: raw_results records the refusal with its reason
            context.log.warning("unreadable source %s: %s", unit, exc)
            benches = known
        unknown = benches - known
        if unknown:
            context.log.warning("%s has benchmarks without a partition (set SPARSEEVAL_BENCHMARKS): %s",
                                unit, ", ".join(sorted(unknown)))
        wanted |= benches & known
    digest = hashlib.sha256(json.dumps(new_cursor, sort_keys=True).encode()).hexdigest()[:16]
    for key in sorted(wanted):
        yield dg.RunRequest(run_key=f"files-{digest}-{key}", partition_key=key)
    context.update_cursor(json.dumps(new_cursor))
