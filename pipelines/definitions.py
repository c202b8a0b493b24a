"""Dagster entry point (``workspace.yaml`` loads ``defs`` from here)."""

from __future__ import annotations

import dagster as dg

from pipelines.assets import candidate, champion, evaluation, predictions, raw_results, response_matrix
from pipelines.automation import (
    benchmarks_changed_sensor,
    daily_refresh,
    ingest_job,
    joint_after_refresh_sensor,
    joint_job,
    new_results_sensor,
    refresh_job,
)
from pipelines.joint import joint_anchors, joint_champion
from pipelines.resources import default_resources

defs = dg.Definitions(
    assets=[raw_results, response_matrix, candidate, champion, evaluation, predictions, joint_anchors,
            joint_champion],
    jobs=[ingest_job, refresh_job, joint_job],
    schedules=[daily_refresh],
    sensors=[new_results_sensor, benchmarks_changed_sensor, joint_after_refresh_sensor],
    resources=default_resources(),
    # one process per run: torch is imported once; runs themselves are queued (see dagster.yaml)
    executor=dg.in_process_executor,
)
