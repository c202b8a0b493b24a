"""Run the refresh job for every benchmark partition in-process, then print a short summary.

This is ``make run``: the same job the schedule launches, executed against the persistent
Dagster instance (``DAGSTER_HOME``), so every run, materialization and asset check is visible
in the Dagster UI afterwards.
"""

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import dagster as dg

from pipelines.assets import benchmark_partitions
from pipelines.definitions import defs

#: step-level DEBUG events stay in the Dagster UI; the terminal gets INFO (progress and results)
INFO_LOGS = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


def _summary_line(bench: str, result: dg.ExecuteInProcessResult, seconds: float) -> str:
    if not result.success:
        failed = [e.step_key for e in result.all_events if e.is_step_failure]
        return f"  {bench:<12} FAILED in {', '.join(failed) or 'run'} ({seconds:.0f} s)"
    matrix = result.output_for_node("response_matrix")
    anchors = result.output_for_node("anchors")
    published = result.output_for_node("predictor")
    n_models, n_items = matrix.shape
    shown = ", ".join(anchors["items"][:6]) + (", ..." if len(anchors["items"]) > 6 else "")
    return (f"  {bench:<12} models {n_models:>5}  items {n_items:>5}  K {len(anchors['items']):>3}  "
            f"test MAE {published['mae']:5.2f} pts  tau {published['tau']:.3f}  {seconds:5.1f} s\n"
            f"  {'':<12} anchors: {shown}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--benchmarks", help="comma-separated subset of the partitions (default: all)")
    args = ap.parse_args(argv)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    keys = benchmark_partitions.get_partition_keys()
    if args.benchmarks:
        keys = [k for k in args.benchmarks.split(",") if k in keys]
    job = defs.resolve_job_def("refresh")
    instance = dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else dg.DagsterInstance.ephemeral()
    lines, ok = [], True
    t_all = time.perf_counter()
    for key in keys:
        t0 = time.perf_counter()
        result = job.execute_in_process(partition_key=key, instance=instance, raise_on_error=False,
                                        run_config=INFO_LOGS)
        ok &= result.success
        lines.append(_summary_line(key, result, time.perf_counter() - t0))
    resources = defs.resources or {}
    db = Path(resources["store"].path).resolve()
    tracking = resources["tracking"].config()
    print("\n=== sparseeval: refresh finished " + ("" if ok else "WITH FAILURES ") +
          f"in {time.perf_counter() - t_all:.0f} s ===")
    print("\n".join(lines))
    print(f"\n  DuckDB store : {db}  (analysts: read {db.with_suffix('.snapshot.duckdb').name} read-only;"
          f" views in sql/views.sql)")
    print(f"  MLflow store : {tracking.resolved_tracking_uri}  artifacts: {tracking.resolved_artifact_location}")
    print(f"  Predictors   : {Path(resources['settings'].predictor_dir).resolve()}")
    print("\n  Dagster UI   : make ui        (dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000)")
    print(f"  MLflow UI    : make mlflow-ui (mlflow ui --backend-store-uri {tracking.resolved_tracking_uri}"
          " -h 127.0.0.1 -p 5000)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
