"""Ingest once, add the benchmarks as partitions, refresh each in-process (publishing what passes),
then the joint predictor, then the method comparisons that are due; print a short summary.

This is ``make run``: the same jobs the schedule and sensors launch, executed against the
persistent Dagster instance (``DAGSTER_HOME``), so every run, materialization and asset check is
visible in the Dagster UI afterwards. Run again on unchanged data, every benchmark skips its fit
and says why, and nothing is republished. The comparison of methods comes last, in its own runs, so
it never delays a publication; a benchmark with few new models keeps its last comparison until the
weekly schedule (:func:`sparseeval.publish.comparison.comparison_due` says which).
"""

import argparse
import logging
import os
import sys
import time

import dagster as dg

from pipelines.definitions import defs
from pipelines.partitions import add_benchmarks, partition_key
from sparseeval.core import settings
from sparseeval.data.store import Store
from sparseeval.publish.comparison import ComparisonSettings, comparison_due
from sparseeval.publish.refresh_probe import summary as probe_summary

#: step-level DEBUG events stay in the Dagster UI; the terminal gets INFO (progress and results)
INFO_LOGS = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}


def _metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        if mat.asset_key.to_user_string() == asset:
            return {k: v.value for k, v in mat.metadata.items()}
    return {}


def _failed_steps(result: dg.ExecuteInProcessResult) -> tuple[list[str], list[str]]:
    """(blocking publishing checks that failed: a rejection, an outcome the run reports; every other
    failed step: an error)."""
    rejected, errors = [], []
    for event in result.all_events:
        if event.is_step_failure:
            error = event.event_specific_data.error
            checked = error is not None and error.cls_name == "DagsterAssetCheckFailedError"
            (rejected if checked else errors).append(event.step_key)
    return rejected, errors


def succeeded(result: dg.ExecuteInProcessResult) -> bool:
    """The run did what it is for: it succeeded, or its only failures are publishing checks that refused
    a proposal (the champion stays, and the summary says why)."""
    return result.success or not _failed_steps(result)[1]


def summary_line(bench: str, result: dg.ExecuteInProcessResult, seconds: float) -> str:
    rejected, errors = _failed_steps(result)
    matrix, fit, published = (_metadata(result, a) for a in ("response_matrix", "candidate", "champion"))
    if errors or (rejected and not fit):
        return f"  {bench:<12} FAILED in {', '.join(errors or rejected) or 'run'} ({seconds:.0f} s)"
    if rejected:
        return (f"  {bench:<12} REJECTED by its publishing checks ({', '.join(rejected)}) in {seconds:.0f} s: "
                f"nothing published\n  {'':<12} {fit.get('decision', '')}{_frontier_line(fit)}{_probe_line(fit)}"
                + "".join(f"\n  {'':<12} {hint}" for hint in _override_hints(result)))
    line = f"  {bench:<12} models {matrix.get('models', 0):>5}  items {matrix.get('items', 0):>5}  "
    if not fit:
        return line + (f"{seconds:5.1f} s\n  {'':<12} skipped: up to date (data version "
                       f"{matrix.get('data_version', '?')} and every setting already decided; nothing refit)")
    if fit.get("proposed") is None:
        return line + f"{seconds:5.1f} s\n  {'':<12} {fit.get('decision', '')}"
    rival = _metadata(result, "challenger")
    return (line + f"K {fit['k']:>3}  test MAE {fit['test_mae_points']:5.2f} pts (random-linear "
            f"{fit['random_linear_mae_points']:.2f})  {seconds:5.1f} s\n"
            f"  {'':<12} {published.get('decision') or fit.get('decision', '')}"
            + (f"\n  {'':<12} challenger: {rival['decision']}" if rival else "") + _probe_line(fit))


def _frontier_line(fit: dict) -> str:
    """The frontier self-check's figures under a rejection (a joint predictor's: its worst output's)."""
    if "frontier_silent_misses" not in fit:
        return ""
    which = f" (worst: {fit['frontier_worst_output']})" if "frontier_worst_output" in fit else ""
    return (f"\n  {'':<12} frontier self-check{which}: MAE {fit['frontier_mae']:.2f} points, bias "
            f"{fit['frontier_bias']:+.2f}, {100 * fit['frontier_silent_misses']:.1f} % of the stronger models "
            f"missed silently")


def _override_hints(result: dg.ExecuteInProcessResult) -> list[str]:
    """What the failed publishing checks tell their operator (their ``to_publish_anyway``: how to publish
    knowingly), read from the checks themselves as ``sparseeval refresh`` reads them."""
    return list(dict.fromkeys(str(e.metadata["to_publish_anyway"].value) for e in result.get_asset_check_evaluations()
                              if not e.passed and "to_publish_anyway" in e.metadata))


def _probe_line(fit: dict) -> str:
    """With ``SPARSEEVAL_PROBE_ITEMS``: the probe a benchmark's predictor carries, or why it has none."""
    line = probe_summary(fit)
    return f"\n  {'':<12} probe: {line}" if line else ""


def _joint_line(result: dg.ExecuteInProcessResult, seconds: float) -> str:
    rejected, errors = _failed_steps(result)
    fit, published = _metadata(result, "joint_anchors"), _metadata(result, "joint_champion")
    if errors or (rejected and not fit):
        return f"  {'joint':<12} FAILED in {', '.join(errors or rejected) or 'run'} ({seconds:.0f} s)"
    if rejected:
        return (f"  {'joint':<12} REJECTED by its publishing checks ({', '.join(rejected)}) in {seconds:.0f} s: "
                f"nothing published\n  {'':<12} {fit.get('decision', '')}{_frontier_line(fit)}")
    if not fit:
        return (f"  {'joint':<12} skipped: up to date, or too few benchmarks (the run's log says which) "
                f"({seconds:.1f} s)")
    if fit.get("proposed") is None:
        return f"  {'joint':<12} {fit.get('decision', '')} ({seconds:.1f} s)"
    return (f"  {'joint':<12} models {fit['models']:>5}  items {fit['items']:>5} ({fit['k_per_benchmark']} per "
            f"benchmark)  mean-score MAE {fit['test_mae_points']:5.2f} pts  {seconds:5.1f} s\n"
            f"  {'':<12} {published.get('decision') or fit.get('decision', '')}")


def _comparisons(instance: dg.DagsterInstance, names: list[str]) -> tuple[list[str], bool]:
    """The ``compare`` job for every benchmark whose comparison is due now; the others say why not."""
    # the store and settings the resources read from the environment (their EnvVars resolve only inside a run)
    db, cmp = Store(settings.db_path()), ComparisonSettings.from_environment()
    job = defs.resolve_job_def("compare")
    lines, ok = [], True
    for name in names:
        due = comparison_due(db, name, cmp)
        if not due.due:
            lines.append(f"  {name:<12} comparison: {due.reason}")
            continue
        t0 = time.perf_counter()
        result = job.execute_in_process(partition_key=partition_key(name), instance=instance, raise_on_error=False,
                                        run_config=INFO_LOGS)
        ok &= result.success
        meta = _metadata(result, "evaluation") if result.success else {}
        lines.append(f"  {name:<12} comparison ({due.reason}): " + (
            f"{meta.get('runs', 0)} runs, {meta.get('plan', '')}" if result.success else "FAILED")
            + f" ({time.perf_counter() - t0:.0f} s)")
    return lines, ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--benchmarks", help="comma-separated subset of the partitions (default: all)")
    args = ap.parse_args(argv)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    instance = dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else dg.DagsterInstance.ephemeral()
    t_all = time.perf_counter()
    ingest = defs.resolve_job_def("ingest").execute_in_process(instance=instance, raise_on_error=False,
                                                               run_config=INFO_LOGS)
    ingested = _metadata(ingest, "raw_results")
    if not ingest.success:
        print("=== sparseeval: ingest FAILED ===")
        return 1
    names = list(ingested.get("benchmarks", []))
    add_benchmarks(instance, names)
    if args.benchmarks:
        names = [b for b in args.benchmarks.split(",") if b in names]
    print(f"ingest: {ingested.get('files_stored', 0)} stored, {ingested.get('files_skipped', 0)} skipped, "
          f"{ingested.get('files_refused', 0)} refused; benchmarks changed: "
          f"{', '.join(ingested.get('changed_benchmarks', [])) or 'none'}")
    job = defs.resolve_job_def("refresh")
    lines, ok = [], ingested.get("files_refused", 0) == 0
    for name in names:
        t0 = time.perf_counter()
        result = job.execute_in_process(partition_key=partition_key(name), instance=instance, raise_on_error=False,
                                        run_config=INFO_LOGS)
        ok &= succeeded(result)
        lines.append(summary_line(name, result, time.perf_counter() - t0))
    if not args.benchmarks:  # the joint predictor reads every benchmark's matrix
        t0 = time.perf_counter()
        result = defs.resolve_job_def("joint").execute_in_process(instance=instance, raise_on_error=False,
                                                                  run_config=INFO_LOGS)
        ok &= succeeded(result)
        lines.append(_joint_line(result, time.perf_counter() - t0))
    resources = defs.resources or {}
    compared, compared_ok = _comparisons(instance, names)
    lines += compared
    ok &= compared_ok
    db = settings.db_path().resolve()
    tracking = resources["tracking"].config()
    print("\n=== sparseeval: refresh finished " + ("" if ok else "WITH FAILURES ") +
          f"in {time.perf_counter() - t_all:.0f} s ===")
    print("\n".join(lines))
    print(f"\n  DuckDB store : {db}  (analysts: read {db.with_suffix('.snapshot.duckdb').name} read-only;"
          f" views in sql/views.sql)")
    print(f"  MLflow store : {tracking.resolved_tracking_uri}  artifacts: {tracking.resolved_artifact_location}")
    print(f"  Predictors   : {settings.predictor_dir().resolve()}")
    print("\n  Dagster UI   : make ui        (dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000)")
    print(f"  MLflow UI    : make mlflow-ui (mlflow ui --backend-store-uri {tracking.resolved_tracking_uri}"
          " -h 127.0.0.1 -p 5000)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
