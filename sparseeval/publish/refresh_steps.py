"""The skeleton every refresh runs on (a benchmark's champion, its challenger, the joint predictor), and the one
place a benchmark's candidate is evaluated.

What a refresh does, in this order:

1. **resume or skip** (:func:`resume_or_skip`): publications that already show outside DuckDB are finished;
   a publication of this very fit key still waiting is handed to the publish step; a fit key (data version
   and every setting) already decided does nothing, and says so;
2. **fit and compete** (the subject's :meth:`Subject.fit`), inside one MLflow run and one snapshot publish;
3. **check** (:func:`proposal_checks`, the one place a proposal's checks are computed): the library's
   publishing predicates (:func:`sparseeval.publish.refresh.publishing_checks`) on the proposal's figures;
4. **decide and record** (the subject's :meth:`Subject.record`): proposed, rejected or unchanged, with the
   checks, in the store's state machine;
5. **publish** when asked (``publish=True``): the library's one publisher completes what was proposed and a
   new champion scores the anchor-only models.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from sparseeval.core.settings import RefreshSettings
from sparseeval.data.matrix import ResponseMatrix
from sparseeval.data.store import Store
from sparseeval.estimate.fitting import ProbeSettings, artifact_from_fit, attach_probe, holding_for
from sparseeval.estimate.methods.base import AnchorEstimator
from sparseeval.estimate.methods.device import resolve_device
from sparseeval.estimate.methods.joint import JOINT_METHOD
from sparseeval.estimate.selfcheck import SelfCheck
from sparseeval.estimate.splits import Split
from sparseeval.publish.champion import crossfit_coverage
from sparseeval.publish.publishing import (
    AnchorOnlyScores,
    Publisher,
    record_decision,
    save_version,
    score_anchor_only_models,
)
from sparseeval.publish.refresh import Check, publishing_checks, up_to_date
from sparseeval.publish.refresh_outcome import BenchmarkReport, Candidate, JointReport, Log, Proposal, RefreshResult
from sparseeval.publish.selfcheck_reuse import reusable_fit
from sparseeval.publish.tracking import TrackingConfig
from sparseeval.publish.tracking_runs import TrackedRun, tracked_run


@dataclass
class Context:
    """The refresh's inputs, shared by the skeleton and the subject that fills it in."""

    store: Store
    tracking: TrackingConfig
    predictor_dir: Path
    settings: RefreshSettings
    log: Log
    run_tags: dict[str, str]


def context(store: Store, tracking: TrackingConfig, predictor_dir: str | Path, settings: RefreshSettings,
            log: Log | None, run_tags: Mapping[str, str] | None) -> Context:
    return Context(store, tracking, Path(predictor_dir), settings,
                   log or logging.getLogger("sparseeval.publish.refresh"), dict(run_tags or {}))


class Subject(Protocol):
    """What differs between the phases of a refresh (a benchmark's champion, its challenger, the joint
    predictor): whether it runs, what is fitted and competes, how the decision is recorded, what is
    reported. Everything else is the skeleton's."""

    name: str
    version: str
    key: str
    step: str  #: the MLflow run's step name

    def gate(self, ctx: Context) -> RefreshResult | None: ...

    def run_params(self) -> dict[str, Any]: ...

    def fit(self, ctx: Context, run: TrackedRun) -> Proposal: ...

    def record(self, ctx: Context, proposal: Proposal, checks: list[Check]) -> str: ...

    def report(self, ctx: Context, run: TrackedRun, proposal: Proposal) -> BenchmarkReport | JointReport: ...


# --- 1. resume or skip --------------------------------------------------------------------------

@dataclass(frozen=True)
class Resumed:
    """A publication of this fit key that did not finish: handed to the publish step."""

    decision: str
    evaluated: int


def resume_or_skip(ctx: Context, name: str, key: str) -> Resumed | bool | None:
    """Before a fit: finish ``name``'s publications that already show outside DuckDB; then, when a
    publication of this very fit key is still waiting, what hands it to the publish step; when the key
    is already decided, None after saying why nothing runs; otherwise True (fit)."""
    db = ctx.store
    publisher = Publisher(db, ctx.tracking, ctx.predictor_dir, run_tags=ctx.run_tags)
    for done in publisher.publish_open(name, started_only=True):
        ctx.log.warning("%s: finished the interrupted publication of anchor set #%d as %s (registry version %s)",
                        name, done.anchor_set_id, done.alias, done.registry_version)
    pending = db.open_publications(name)
    if pending and all(p["fit_key"] == key for p in pending):
        ids = ", ".join(f"#{p['anchor_set_id']} as {p['alias']}" for p in pending)
        return Resumed(f"resumed: the publication of {ids} (fit key {key[:12]}) did not finish; the checks it "
                       "passed are reported again and the publish step completes it", int(pending[0]["anchor_set_id"]))
    decided = up_to_date(db, name, key)
    if decided is not None and not pending:
        ctx.log.info("%s: skipped: fit key %s (data version %s and every setting) already decided on %s: %s",
                     name, key[:12], decided["data_version"], decided["decided_at"], decided["reason"])
        return None
    return True


def resume_gate(ctx: Context, name: str, key: str, version: str) -> RefreshResult | None:
    """:func:`resume_or_skip` as the skeleton's gate."""
    resumed = resume_or_skip(ctx, name, key)
    if resumed is None:
        return RefreshResult(name, "skipped", key, version, f"skipped: fit key {key[:12]} already decided")
    if isinstance(resumed, Resumed):
        return RefreshResult(name, "resumed", key, version, resumed.decision, evaluated=resumed.evaluated)
    return None


# --- the skeleton -----------------------------------------------------------------------------------

def run_refresh(subject: Subject, ctx: Context, *, publish: bool) -> RefreshResult:
    """Gate (resume or skip); fit and compete; check; decide and record; publish when asked."""
    name, key, version = subject.name, subject.key, subject.version
    result = subject.gate(ctx)
    if result is None:
        with tracked_run(ctx.tracking, subject.step, benchmark=name, params=subject.run_params(),
                         tags={**ctx.run_tags, "data_version": version}) as run, \
                ctx.store.publishing_once():  # its several writes publish the snapshot once
            proposal = subject.fit(ctx, run)
            checks = proposal_checks(proposal, ctx.settings)
            decision = f"{proposal.reason}; {subject.record(ctx, proposal, checks)}"
            ctx.log.info("%s: %s", name, decision)
            report = subject.report(ctx, run, proposal)
            run.set_tags({"decision": decision[:250], "proposed_anchor_set": proposal.proposed.anchor_set_id})
        result = RefreshResult(name, "decided", key, version, decision, evaluated=proposal.proposed.anchor_set_id,
                               proposed=proposal.proposed.anchor_set_id,
                               challenger=proposal.challenger.anchor_set_id if proposal.challenger else None,
                               checks=tuple(checks), report=report)
    if not publish or result.status == "skipped":
        return result
    publisher = Publisher(ctx.store, ctx.tracking, ctx.predictor_dir, run_tags=ctx.run_tags)
    with ctx.store.publishing_once():
        done = tuple(publisher.publish_open(name))
        # a new champion scores the models that ran only the anchors (as the pipeline's publish step does)
        scored = score_anchor_only_models(ctx.store, name) \
            if name != JOINT_METHOD and any(p.alias == "champion" for p in done) else AnchorOnlyScores()
    if warning := scored.warning(name):
        ctx.log.warning("%s", warning)
    return replace(result, published=done, models_scored=scored.scored, models_not_scored=scored.skipped)


def record_proposal(ctx: Context, name: str, key: str, version: str, proposal: Proposal, checks: list[Check]) -> str:
    return record_decision(ctx.store, name, fit_key=key, data_version=version, proposed=proposal.proposed.row(),
                           challenger=proposal.challenger.row() if proposal.challenger else None, checks=checks)


def proposal_checks(proposal: Proposal, settings: RefreshSettings) -> list[Check]:
    """The publishing checks of a proposal, over every output: the one place they are computed (a
    new per-candidate figure joins :class:`Proposal` and is passed on here)."""
    return publishing_checks(mae=proposal.mae, baseline=proposal.baseline, mean_guess=proposal.mean_guess,
                             coverage=proposal.coverage, nominal=1.0 - settings.alpha,
                             tolerance=settings.coverage_tolerance, items=proposal.items,
                             expected_k=proposal.expected_k, known_items=proposal.known_items,
                             frontier=proposal.frontier, frontier_silent_max=settings.frontier_silent_max)


# --- a benchmark's candidate ------------------------------------------------------------------------

class CandidateSaver:
    """Fit (or reuse) one candidate, calibrate it, save it as a predictor version, measure it and write
    its anchor set once: a benchmark's per-candidate evaluation, in one place."""

    def __init__(self, ctx: Context, matrix: ResponseMatrix, split: Split, metadata: pl.DataFrame, version: str,
                 k: int) -> None:
        self.ctx, self.matrix, self.split, self.metadata = ctx, matrix, split, metadata
        self.version, self.k = version, k
        self.baseline = float("nan")  #: the random-linear bar on the split, set once fitted
        self.extra: dict[str, Any] = {}  #: more parameters stored with the next anchor set
        self.selfcheck: SelfCheck | None = None  #: the frontier self-check, set once measured

    def obtain(self, origin: str, items: list[str] | None, fit: Callable[[], AnchorEstimator]
               ) -> tuple[AnchorEstimator, float, bool]:
        """The estimator (fitted now, or the stored one of exactly this fit), its fit seconds, whether reused."""
        reused = reusable_fit(self.ctx.store, self.matrix.benchmark, self.version, origin, items, self.k,
                              self.ctx.settings)
        if reused is not None:
            self.ctx.log.info("%s: the %s fit of data version %s is stored already: reused, not fitted again",
                              self.matrix.benchmark, origin, self.version)
            return (*reused, True)
        t0 = time.perf_counter()
        est = fit()
        return est, time.perf_counter() - t0, False

    def save(self, origin: str, est: AnchorEstimator, seconds: float, reused: bool) -> Candidate:
        """Calibrate, save the predictor version, measure, write the anchor set: the candidate."""
        s, db, matrix = self.ctx.settings, self.ctx.store, self.matrix
        assert self.selfcheck is not None and est.anchors_ is not None
        probe = ProbeSettings.of(s)
        artifact = artifact_from_fit(matrix, self.split, est, alpha=s.alpha, seed=s.seed, models=self.metadata,
                                     settings=db.training_settings(matrix.benchmark), frontier=self.selfcheck)
        attach_probe(artifact, matrix, self.split, probe, seed=s.seed, alpha=s.alpha)
        selfcheck = holding_for(artifact, self.selfcheck, probe)
        if selfcheck is not self.selfcheck:  # without the probe it could not fit: the figures that hold for it
            artifact.extra["frontier"] = selfcheck.to_json()
        folder, saved = save_version(artifact, self.ctx.predictor_dir, matrix.benchmark)
        mae = saved.calibration["calibration_mae_points"]  # one held-out MAE: the one predictor.json carries
        coverage = crossfit_coverage(matrix, self.split, est, alpha=s.alpha, seed=s.seed,
                                     mode=saved.calibration.get("mode", "binomial"))
        weights = getattr(est, "weights_", None)
        chosen = [matrix.items[i] for i in est.anchors_]
        anchor_set_id = db.save_anchor_set(
            benchmark=matrix.benchmark, method=est.method, k=est.k, items=chosen,
            weights=None if weights is None else [float(w) for w in weights], seed=s.seed,
            n_train_models=len(self.split.train),
            params={"split": s.split_policy, "val_frac": s.val_frac, "test_frac": s.test_frac, "origin": origin,
                    "fit_seconds": round(seconds, 3), "device": resolve_device(s.device).type,
                    "frontier": selfcheck.to_json(), **self.extra},
            artifact_uri=str(folder.resolve()), predictor_hash=saved.content_hash, origin=origin,
            data_version=self.version, test_mae=mae, baseline_mae=self.baseline, coverage=coverage,
            **selfcheck.figures.store_columns())
        return Candidate(anchor_set_id, str(folder), saved.content_hash, origin, chosen, mae, coverage, est, seconds,
                         reused, selfcheck)
