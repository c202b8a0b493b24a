"""What a refresh is given to decide on and what it reports, typed: :class:`Candidate` (one fitted candidate),
:class:`Proposal` (what its publishing checks are decided on), :class:`BenchmarkReport` and
:class:`JointReport` (what a decided refresh measured), and :class:`RefreshResult` (what the refresh did).

Every consumer reads these types: the pipeline's assets turn a result into metadata
(:meth:`RefreshResult.metadata`), ``make run`` and ``sparseeval refresh`` print its
:meth:`RefreshResult.summary_lines`; nobody reads a refresh's figures by string key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import polars as pl

from sparseeval.estimate.methods.base import AnchorEstimator
from sparseeval.estimate.selfcheck import CutFigures, SelfCheck
from sparseeval.publish.publishing import Published
from sparseeval.publish.refresh import Check


class Log(Protocol):
    """Where a refresh says what it does (a :class:`logging.Logger`, Dagster's ``context.log``)."""

    def info(self, msg: str, *args: Any) -> Any: ...

    def warning(self, msg: str, *args: Any) -> Any: ...


@dataclass
class Candidate:
    """One fitted candidate: its anchor set, saved predictor version and held-out figures."""

    anchor_set_id: int
    folder: str
    content_hash: str
    origin: str
    items: list[str]
    mae: float
    coverage: float | None
    estimator: AnchorEstimator
    fit_seconds: float
    reused: bool = False
    #: the frontier self-check as it holds for this candidate (with its probe, or without one)
    selfcheck: SelfCheck | None = None

    def row(self) -> dict[str, Any]:
        """What :func:`sparseeval.publish.publishing.record_decision` reads."""
        return {"anchor_set_id": self.anchor_set_id, "content_hash": self.content_hash}


@dataclass
class Proposal:
    """What the fit step proposes and the figures its checks are decided on (per output: one for a
    benchmark; each benchmark and the mean for the joint predictor)."""

    proposed: Candidate
    challenger: Candidate | None
    reason: str
    mae: dict[str, float]
    baseline: dict[str, float]
    mean_guess: dict[str, float]
    coverage: dict[str, float | None]
    items: list[str]
    expected_k: int
    known_items: set[str]
    #: per output (and a joint predictor's own-score cuts), the frontier self-check's figures (None: not run)
    frontier: dict[str, CutFigures] | None = None


def _rounded(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    return {f"{prefix}{name}": round(value, 4) for name, value in metrics.items()}


@dataclass(frozen=True)
class BenchmarkReport:
    """What a decided benchmark refresh measured on its proposal: its anchors, held-out MAE beside the
    random-linear bar, coverage, and the frontier self-check that holds for it (with the probe it was asked
    for, ``probe_items``; None: no probe)."""

    k: int
    method: str
    origin: str
    anchors: tuple[str, ...]
    test_mae_points: float
    random_linear_mae_points: float
    coverage: float | None
    selection_seconds: float
    train_models: int
    test_models: int
    reused_fits: tuple[str, ...]
    selfcheck: SelfCheck
    probe_items: int | None

    def metadata(self) -> dict[str, Any]:
        """Flat, as the fit step shows it (``frontier_*``: the self-check's figures; ``probe_*`` with a probe)."""
        figures = self.selfcheck.figures
        out: dict[str, Any] = {
            "test_mae_points": round(self.test_mae_points, 3),
            "random_linear_mae_points": round(self.random_linear_mae_points, 3), "coverage": self.coverage,
            "k": self.k, "method": self.method, "origin": self.origin,
            "anchors": pl.DataFrame({"position": range(len(self.anchors)), "item_id": list(self.anchors)}),
            "selection_seconds": round(self.selection_seconds, 2), "train_models": self.train_models,
            "test_models": self.test_models, "reused_fits": list(self.reused_fits),
            **_rounded(figures.metrics(), "frontier_")}
        if self.probe_items is not None:
            out["probe_items"] = self.probe_items
            if figures.probed_with:
                out |= {"probed": round(float(figures.probed or 0), 4),
                        "probe_items_mean": round(float(figures.probe_items_mean or 0), 4),
                        "probe_items_max": round(float(figures.probe_items_max or 0), 4),
                        **_rounded(figures.alone_metrics(), "frontier_anchors_alone_")}
            if figures.probe_note:
                out["probe_note"] = figures.probe_note
        return {**out, "frontier_note": self.selfcheck.note()}

    def headline(self) -> str:
        return (f"K {self.k}, test MAE {self.test_mae_points:.2f} points (random-linear "
                f"{self.random_linear_mae_points:.2f})")

    def probe_line(self) -> str | None:
        """The probe its self-check was measured with, or why it has none (None: no probe asked for)."""
        return None if self.probe_items is None else self.selfcheck.figures.probe_summary()


@dataclass(frozen=True)
class JointReport:
    """What a decided joint refresh measured: per output (each benchmark and the mean), the joint MAE beside
    the per-benchmark method's and the random-linear bar, coverage and the frontier self-check (``outputs``)."""

    benchmarks: tuple[str, ...]
    inputs_behind: tuple[str, ...]
    k_per_benchmark: int
    items: int
    models: int
    train_models: int
    test_models: int
    selection_seconds: float
    test_mae_points: float
    outputs: pl.DataFrame
    selfcheck: SelfCheck

    def metadata(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "benchmarks": list(self.benchmarks), "inputs_behind": list(self.inputs_behind),
            "k_per_benchmark": self.k_per_benchmark, "items": self.items, "models": self.models,
            "train_models": self.train_models, "test_models": self.test_models,
            "selection_seconds": round(self.selection_seconds, 2), "test_mae_points": round(self.test_mae_points, 3),
            "outputs": self.outputs, "frontier_note": self.selfcheck.note()}
        worst = self.selfcheck.worst()
        if worst is not None:  # the output (and cut) that misses silently most: the one the check fails first
            out |= {"frontier_worst_output": worst[0], **_rounded(worst[1].metrics(), "frontier_")}
        return out

    def headline(self) -> str:
        return (f"{self.models} models, {self.items} items ({self.k_per_benchmark} per benchmark), mean-score MAE "
                f"{self.test_mae_points:.2f} points")

    def probe_line(self) -> str | None:
        return None  # the joint predictor has no probe


@dataclass(frozen=True)
class RefreshResult:
    """What a refresh did: ``status`` is ``skipped`` (fit key already decided), ``resumed`` (a waiting
    publication handed on) or ``decided``; ``evaluated`` the anchor set whose checks are reported;
    ``report`` what a decided refresh measured; ``second`` a benchmark's challenger phase when it ran;
    ``published`` what this call published."""

    benchmark: str
    status: str
    fit_key: str
    data_version: str
    decision: str
    evaluated: int | None = None
    proposed: int | None = None
    challenger: int | None = None
    checks: tuple[Check, ...] = ()
    report: BenchmarkReport | JointReport | None = None
    second: RefreshResult | None = None
    published: tuple[Published, ...] = ()
    models_scored: int = 0  #: anchor-only models scored by a champion this call published
    #: anchor-only models it could not score (too few anchors answered), with why
    models_not_scored: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def overrides(self) -> list[str]:
        """What the failed checks tell their operator: how to publish knowingly."""
        return list(dict.fromkeys(c.override for c in self.checks if not c.passed and c.override))

    def metadata(self) -> dict[str, Any]:
        """The outcome as the fit step's metadata (for a benchmark and the joint predictor alike), with the
        summary ``make run`` prints."""
        meta: dict[str, Any] = {"decision": self.decision, "evaluated": self.evaluated, "fit_key": self.fit_key,
                                "data_version": self.data_version}
        if self.status == "decided":
            meta |= {"proposed": self.proposed, "challenger": self.challenger}
        if self.report is not None:
            meta |= self.report.metadata()
        if self.second is not None:
            meta["challenger_phase"] = {"status": self.second.status, "decision": self.second.decision,
                                        "anchor_set": self.second.proposed}
        return {**meta, "summary": "\n".join(self.summary_lines())}

    def summary_lines(self) -> list[str]:
        """What ``make run`` and ``sparseeval refresh`` print of it, line by line."""
        lines = [] if self.report is None else [self.report.headline()]
        if not self.passed:
            failed = ", ".join(c.name for c in self.checks if not c.passed)
            lines.append(f"REJECTED by its publishing checks ({failed}): nothing published")
        lines.append(self.decision)
        if self.second is not None:
            lines.append(f"challenger: {self.second.decision}")
        if self.report is not None and (probe := self.report.probe_line()):
            lines.append(f"probe: {probe}")
        if not self.passed and self.report is not None and (worst := self.report.selfcheck.worst()) is not None:
            label, f = worst
            lines.append(f"frontier self-check ({label}): MAE {float(f.mae or 0):.2f} points, bias "
                         f"{float(f.bias or 0):+.2f}, {100 * float(f.silent_misses or 0):.1f} % of the stronger models "
                         "missed silently")
        lines += self.overrides()
        if self.published:
            lines.append("published " + "; ".join(f"#{p.anchor_set_id} as {p.alias} (registry version "
                                                  f"{p.registry_version})" for p in self.published))
        return lines
