"""Dagster entry point (``workspace.yaml`` loads ``defs`` from here)."""

from __future__ import annotations

import dagster as dg

from pipelines.assets import candidate, champion, evaluation, predictions, raw_results, response_matrix
from pipelines.automation import (
    daily_refresh,
    ingest_job,
    joint_job,
    joint_sensor,
    new_results_sensor,
    refresh_job,
    stale_benchmarks_sensor,
)
from pipelines.checks import publishing_checks
from pipelines.joint import joint_anchors, joint_champion
from pipelines.resources import default_resources

defs = dg.Definitions(
    assets=[raw_results, response_matrix, candidate, champion, evaluation, predictions, joint_anchors,
            joint_champion],
    asset_checks=publishing_checks,
    jobs=[ingest_job, refresh_job, joint_job],
    schedules=[daily_refresh],
    sensors=[new_results_sensor, stale_benchmarks_sensor, joint_sensor],
    resources=default_resources(),
    # one process per run: torch is imported once; runs themselves are queued (see dagster.yaml)
    executor=dg.in_process_executor,
)
