"""Dagster entry point (``workspace.yaml`` loads ``defs`` from here)."""

from __future__ import annotations

from typing import Any

import dagster as dg

from pipelines.assets import candidate, challenger, champion, evaluation, predictions, raw_results, response_matrix
from pipelines.automation import (
    compare_job,
    comparison_sensor,
    daily_refresh,
    hub_sources_sensor,
    ingest_job,
    joint_job,
    joint_sensor,
    new_results_sensor,
    refresh_job,
    stale_benchmarks_sensor,
    weekly_comparison,
)
from pipelines.checks import publishing_checks
from pipelines.console import console
from pipelines.joint import joint_anchors, joint_champion
from pipelines.resources import default_resources


def build_definitions(resources: dict[str, Any] | None = None) -> dg.Definitions:
    """The pipeline's definitions with ``resources`` (default: from :mod:`sparseeval.core.settings`); the
    lifecycle simulation builds its own with the settings of the simulated day."""
    return dg.Definitions(
        assets=[raw_results, response_matrix, candidate, champion, challenger, evaluation, predictions, joint_anchors,
                joint_champion],
        asset_checks=publishing_checks,
        jobs=[ingest_job, refresh_job, compare_job, joint_job],
        schedules=[daily_refresh, weekly_comparison],
        sensors=[new_results_sensor, hub_sources_sensor, stale_benchmarks_sensor, comparison_sensor, joint_sensor],
        resources=resources if resources is not None else default_resources(),
        # one process per run: torch is imported once; runs themselves are queued (see dagster.yaml)
        executor=dg.in_process_executor,
        loggers={"console": console},  # a refused publishing check in one line (pipelines/console.py)
    )


defs = build_definitions()
