"""Dagster entry point (``workspace.yaml`` loads ``defs`` from here)."""

from __future__ import annotations

import dagster as dg

from pipelines.assets import anchors, evaluation, predictions, predictor, raw_results, response_matrix
from pipelines.automation import daily_refresh, new_results_sensor, refresh_job
from pipelines.resources import default_resources

defs = dg.Definitions(
    assets=[raw_results, response_matrix, anchors, predictor, evaluation, predictions],
    jobs=[refresh_job],
    schedules=[daily_refresh],
    sensors=[new_results_sensor],
    resources=default_resources(),
    # one process: torch is imported once, and the DuckDB writer lock is never contended in a run
    executor=dg.in_process_executor,
)
