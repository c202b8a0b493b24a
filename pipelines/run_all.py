"""Ingest once, add the benchmarks as partitions, then the refresh sequence (:mod:`sparseeval.publish.sequence`:
each benchmark's refresh, publishing what passes, then the joint predictor, then the method comparisons that
are due), each step as the pipeline's job; print a short summary (what the library said of each step).

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
from pipelines.resources import default_resources
from sparseeval.core import settings
from sparseeval.publish.comparison import ComparisonDue
from sparseeval.publish.sequence import StepOutcome, run_sequence

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


def _lines(result: dg.ExecuteInProcessResult, *assets: str) -> list[str]:
    """What the library said of each step (its ``summary``: :meth:`RefreshResult.summary_lines`), and what
    the publish steps did."""
    out = []
    for asset in assets:
        meta = _metadata(result, asset)
        out += str(meta.get("summary") or meta.get("decision") or "").splitlines()
    return [line for line in dict.fromkeys(out) if line]


def outcome(kind: str, name: str, result: dg.ExecuteInProcessResult, seconds: float, lines: list[str]) -> StepOutcome:
    """A job's run as a step of the sequence: ``lines`` and how it ended (a publishing check's refusal is an
    outcome, any other failed step an error)."""
    rejected, errors = _failed_steps(result)
    if errors:
        lines = [*lines, f"FAILED in {', '.join(errors)}"]
    return StepOutcome(kind, name, not errors, (*lines, f"({seconds:.0f} s)"), seconds, rejected=bool(rejected))


def refresh_outcome(benchmark: str, result: dg.ExecuteInProcessResult, seconds: float) -> StepOutcome:
    """A ``refresh`` run of ``benchmark``: its matrix, then what the refresh and the publish steps said."""
    matrix = _metadata(result, "response_matrix")
    lines = _lines(result, "candidate", "champion", "challenger") or [
        "skipped: up to date (data version and every setting already decided; nothing refit)"]
    head = f"models {matrix.get('models', 0)}, items {matrix.get('items', 0)}" if matrix else "no matrix"
    return outcome("refresh", benchmark, result, seconds, [head, *lines])


def summary_line(benchmark: str, result: dg.ExecuteInProcessResult, seconds: float) -> str:
    """What ``make run`` prints of a ``refresh`` run."""
    return "\n".join(refresh_outcome(benchmark, result, seconds).lines)


class DagsterSteps:
    """The refresh sequence's steps as the pipeline's jobs, executed in this process against the Dagster
    instance (every run, materialization and check visible in the UI afterwards)."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self.instance = instance

    def _run(self, job: str, partition: str | None = None) -> tuple[dg.ExecuteInProcessResult, float]:
        t0 = time.perf_counter()
        result = defs.resolve_job_def(job).execute_in_process(
            partition_key=partition, instance=self.instance, raise_on_error=False, run_config=INFO_LOGS)
        return result, time.perf_counter() - t0

    def refresh(self, benchmark: str) -> StepOutcome:
        return refresh_outcome(benchmark, *self._run("refresh", partition_key(benchmark)))

    def joint(self) -> StepOutcome:
        result, seconds = self._run("joint")
        lines = _lines(result, "joint_anchors", "joint_champion") or [
            "skipped: up to date, or too few benchmarks (the run's log says which)"]
        return outcome("joint", "joint", result, seconds, lines)

    def compare(self, benchmark: str, due: ComparisonDue) -> StepOutcome:
        result, seconds = self._run("compare", partition_key(benchmark))
        lines = _lines(result, "evaluation") if result.success else []
        return outcome("compare", benchmark, result, seconds,
                       [f"comparison ({due.reason}): " + ("; ".join(lines) or "FAILED")])


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
    resources = default_resources()  # the store and settings the pipeline's jobs read
    outcomes = run_sequence(DagsterSteps(instance), resources["store"].store(), resources["settings"].settings(),
                            names, joint=not args.benchmarks)
    ok = ingested.get("files_refused", 0) == 0 and all(step.ok for step in outcomes)
    lines = [f"  {step.name if i == 0 else '':<12} {line}" for step in outcomes for i, line in enumerate(step.lines)]
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
