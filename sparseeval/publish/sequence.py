"""The refresh sequence, in one place: each benchmark's refresh, then the joint predictor, then the method
comparisons that are due, and what decides that each step is due.

Three callers follow it: ``sparseeval refresh`` runs every step in this process (:class:`InProcess`),
``make run`` (``pipelines/run_all.py``) runs each step as the pipeline's Dagster job, and the sensors ask the
same questions one tick at a time: which benchmarks are stale
(:func:`sparseeval.publish.refresh.stale_benchmarks`), whether the joint predictor is due
(:func:`joint_due`: its key, the benchmarks it waits for, the same rule the joint refresh applies), which
comparisons are due (:func:`sparseeval.publish.comparison.comparisons_due`, never for a benchmark whose refresh
is pending). Ingesting comes first and is its own step (``sparseeval ingest``, the ``raw_results`` asset: the
same library call).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from sparseeval.core.settings import RefreshSettings
from sparseeval.data.benchmarks import BenchmarkNameError
from sparseeval.data.matrix import ResponseMatrix
from sparseeval.data.store import Store
from sparseeval.estimate.methods.joint import JOINT_METHOD
from sparseeval.publish.comparison import ComparisonDue, compare_methods, comparison_due
from sparseeval.publish.refresh import joint_fit_key
from sparseeval.publish.refresh_joint import joint_plan, refresh_joint, too_few_common
from sparseeval.publish.refresh_outcome import Log, RefreshResult
from sparseeval.publish.refresh_policy import refresh_benchmark
from sparseeval.publish.tracking import TrackingConfig

#: when the comparison runs: when due, always, or never
CompareWhen = Literal["due", "always", "never"]


# --- what is due --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JointDue:
    """Whether the joint predictor's refresh is due now, under which fit key, and why (or why not)."""

    due: bool
    key: str
    reason: str
    benchmarks: tuple[str, ...] = ()


def joint_due(store: Store, settings: RefreshSettings, *, stale: Collection[str],
              failed: Callable[[str], bool] = lambda benchmark: False) -> JointDue:
    """Whether the joint predictor's refresh would do something now: its benchmarks chosen and enough models
    with every one (:func:`~sparseeval.publish.refresh_joint.joint_plan`, as the refresh decides), none of
    them ``stale`` unless its last refresh ``failed`` (then its previous matrix is used), and its fit key
    (the one :class:`~sparseeval.publish.refresh_joint` computes) not decided yet."""
    with store.pinned():  # data versions, model counts and the decided key from one state of the store
        versions = store.data_versions()
        decided = store.latest_fit_keys().get(JOINT_METHOD)
        try:
            chosen, why_not = joint_plan(list(versions), settings)
        except BenchmarkNameError as exc:  # listed benchmarks the store does not hold (yet)
            return JointDue(False, "", f"the joint predictor cannot run: {exc}")
        if why_not is None:
            why_not = too_few_common(chosen, store.models_with_every(chosen))
    if why_not is not None:
        return JointDue(False, "", why_not)
    waiting = [b for b in chosen if b in stale and not failed(b)]
    if waiting:
        return JointDue(False, "", f"waiting for the refresh of {', '.join(waiting)}", tuple(chosen))
    key = joint_fit_key({b: versions[b] for b in chosen}, settings)
    if decided == key:
        return JointDue(False, key, "the joint predictor is up to date with its benchmarks' data and the settings",
                        tuple(chosen))
    behind = [b for b in chosen if b in stale]
    return JointDue(True, key, ("benchmarks whose last refresh failed use their previous matrix: " + ", ".join(behind))
                    if behind else "new data or settings", tuple(chosen))


# --- running it ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StepOutcome:
    """One step of the sequence: what ran (``kind``: refresh, joint, compare; ``name``: its benchmark, or the
    joint predictor), whether it did what it is for (``ok``: a refusal by the publishing checks is an outcome,
    ``rejected``), what it says (``lines``) and how long it took."""

    kind: str
    name: str
    ok: bool
    lines: tuple[str, ...]
    seconds: float = 0.0
    rejected: bool = False
    result: RefreshResult | None = None  #: the refresh's, when it ran in this process
    matrix: str | None = None  #: how the benchmark's matrix was brought up to date
    message: str | None = None  #: a comparison's outcome, or why it did not run


class Steps(Protocol):
    """How each step is carried out: in this process (:class:`InProcess`) or as a Dagster job."""

    def refresh(self, benchmark: str) -> StepOutcome: ...

    def joint(self) -> StepOutcome: ...

    def compare(self, benchmark: str, due: ComparisonDue) -> StepOutcome: ...


def run_sequence(steps: Steps, store: Store, settings: RefreshSettings, benchmarks: Sequence[str], *,
                 joint: bool, compare: CompareWhen = "due") -> list[StepOutcome]:
    """Every benchmark's refresh (publishing what passes), then the joint predictor (``joint``: when every
    benchmark was refreshed: it reads them all), then each benchmark's comparison when due (``compare``:
    or always, or never): a comparison never runs before its benchmark's publication."""
    done = [steps.refresh(b) for b in benchmarks]
    if joint:
        done.append(steps.joint())
    for bench in benchmarks:
        due = comparison_due(store, bench, settings)
        if compare == "always" or (compare == "due" and due.due):
            done.append(steps.compare(bench, due))
        else:
            why = due.reason if compare == "due" else "not run (--compare never)"
            done.append(StepOutcome("compare", bench, True, (f"comparison {why}",), message=why))
    return done


class InProcess:
    """The steps as library calls in this process (``sparseeval refresh``): the same calls the pipeline's
    assets make, publishing at once (no asset checks in between: the publishing checks are the refresh's)."""

    def __init__(self, store: Store, tracking: TrackingConfig, predictor_dir: str | Path, settings: RefreshSettings,
                 *, publish: bool = True, log: Log | None = None) -> None:
        from sparseeval.data.access.matrix_store import MatrixStore

        self.store, self.tracking, self.predictor_dir, self.settings = store, tracking, predictor_dir, settings
        self.publish, self.log = publish, log
        self.matrices = MatrixStore.beside(store)
        self.current: dict[str, ResponseMatrix] = {}

    def refresh(self, benchmark: str) -> StepOutcome:
        t0 = time.perf_counter()
        update = self.matrices.update(self.store, benchmark)
        self.current[benchmark] = update.matrix
        result = refresh_benchmark(update.matrix, self.store, self.tracking, self.predictor_dir, self.settings,
                                   log=self.log, publish=self.publish)
        return StepOutcome("refresh", benchmark, True, (f"matrix {update.describe()}", *result.summary_lines()),
                           time.perf_counter() - t0, rejected=not result.passed, result=result,
                           matrix=update.describe())

    def joint(self) -> StepOutcome:
        t0 = time.perf_counter()
        result = refresh_joint(self.current, self.store, self.tracking, self.predictor_dir, self.settings,
                               log=self.log, publish=self.publish)
        return StepOutcome("joint", JOINT_METHOD, True, tuple(result.summary_lines()), time.perf_counter() - t0,
                           rejected=not result.passed, result=result)

    def compare(self, benchmark: str, due: ComparisonDue) -> StepOutcome:
        t0 = time.perf_counter()
        matrix = self.current.get(benchmark) or self.matrices.update(self.store, benchmark).matrix
        done = compare_methods(matrix, self.store, self.tracking, self.settings, log=self.log)
        return StepOutcome("compare", benchmark, True, (f"comparison: {done.message}",), time.perf_counter() - t0,
                           message=done.message)
