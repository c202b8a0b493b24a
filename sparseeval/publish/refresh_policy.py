"""The refresh policy as one library operation: :func:`refresh_benchmark` and its joint twin
:func:`refresh_joint`, on one skeleton (:func:`_refresh`).

What a refresh does, in this order, for a benchmark and for the joint predictor alike:

1. **resume or skip** (:func:`resume_or_skip`): publications that already show outside DuckDB are
   finished; a publication of this very fit key still waiting is handed to the publish step; a fit
   key (data version and every setting) already decided does nothing, and says so;
2. **fit and compete**, inside one MLflow run and one snapshot publish. A benchmark is refreshed in
   two phases so that nothing delays its champion: first its champion's anchors are kept and its
   predictor refit on the new data (the first refresh, or one whose settings change the method, K or
   seed, selects anchors instead), decided and published alone; then, once that refit is published,
   a fresh selection competes with it as challenger (:func:`select_challenger`,
   :func:`sparseeval.publish.champion.decide`). The joint predictor is re-selected and compared with the
   per-benchmark method on the same held-out models. Each candidate is calibrated, saved as a
   predictor version and written as an anchor set once (:class:`_CandidateSaver`, the one place a
   candidate is evaluated);
3. **check** (:func:`proposal_checks`, the one place a proposal's checks are computed): the library's
   publishing predicates (:func:`sparseeval.publish.refresh.publishing_checks`) on the proposal's figures;
4. **decide and record** (:func:`sparseeval.publish.publishing.record_decision`, or
   :func:`~sparseeval.publish.publishing.record_challenger` for a challenger beside its champion): proposed,
   rejected or unchanged, with the checks, in the store's state machine;
5. **publish** when asked (``publish=True``: the CLI, the benches, and the pipeline's challenger step):
   the library's one publisher completes what was proposed and a new champion scores the anchor-only
   models. The Dagster pipeline publishes a champion in its own step instead, right after the
   blocking asset checks; the method comparison never runs before it (:mod:`sparseeval.publish.comparison`).
   A crash between the two phases leaves the published champion; that data version has no challenger.

**Reuse of what is provably unchanged.** A fit depends on the matrix (named by its data version),
the method, K, the seed and the split (its policy and fractions), nothing else; so a fit already
stored for exactly those (a changed alpha, check tolerance or challenger rule on unchanged data; a
refresh retried after a crash) is loaded from its saved predictor instead of being fitted again, and
only its calibration and the decision are redone. A split by date also depends on model metadata that
the data version does not cover, so under that policy every fit is redone.

The caller supplies the matrix (:class:`sparseeval.data.access.matrix_store.MatrixStore` keeps it incremental),
the store, the MLflow configuration, the predictors folder and a :class:`FitSettings`; the result is
a :class:`RefreshResult` (what was decided, the figures, what was published) that the pipeline's
assets turn into metadata and the CLI into a table.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import polars as pl

from sparseeval.core import settings as defaults
from sparseeval.data.access.sources import model_dates
from sparseeval.data.matrix import ResponseMatrix
from sparseeval.data.store import Store
from sparseeval.estimate.artifact import load_predictor
from sparseeval.estimate.evaluation import (
    FRONTIER_METRICS,
    ProtocolConfig,
    evaluate_joint,
    evaluate_per_benchmark,
    fit_on_split,
    frontier_fields,
    frontier_metrics,
    joint_frontier_selfcheck,
    joint_own_cut_selfcheck,
    results_frame,
    split_for_seed,
)
from sparseeval.estimate.fitting import ProbeSettings, artifact_from_fit, joint_artifact_from_fit
from sparseeval.estimate.frontier import OWN_CUT, gated_figures, own_cut_outputs, selfcheck_outputs
from sparseeval.estimate.methods.base import AnchorEstimator
from sparseeval.estimate.methods.device import cpu_threads, resolve_device
from sparseeval.estimate.methods.joint import JOINT_METHOD, JOINT_SEP, MEAN, common_models, joint_data, restrict_models
from sparseeval.estimate.splits import Split, make_split
from sparseeval.publish.champion import (
    baseline_mae,
    crossfit_coverage,
    decide,
    joint_baseline_maes,
    joint_crossfit_coverage,
    mean_guess_mae,
    refit_on_anchors,
)
from sparseeval.publish.plots import (
    coverage_by_level,
    heldout_intervals,
    plot_coverage_by_level,
    plot_predicted_vs_true,
)
from sparseeval.publish.publishing import (
    AnchorOnlyScores,
    Published,
    Publisher,
    record_challenger,
    record_decision,
    save_version,
    score_anchor_only_models,
)
from sparseeval.publish.refresh import Check, fit_key, joint_data_version, publishing_checks, up_to_date
from sparseeval.publish.refresh_probe import attach as attach_probe
from sparseeval.publish.refresh_probe import selfcheck as probed_selfcheck
from sparseeval.publish.tracking import TrackedRun, TrackingConfig, log_comparison, tracked_run

#: fewer models with every benchmark than this: no joint fit (its held-out half-splits would be empty)
MIN_JOINT_MODELS = 50


class Log(Protocol):
    """Where a refresh says what it does (a :class:`logging.Logger`, Dagster's ``context.log``)."""

    def info(self, msg: str, *args: Any) -> Any: ...

    def warning(self, msg: str, *args: Any) -> Any: ...


@dataclass(frozen=True)
class FitSettings:
    """Every setting a refresh's fit, calibration, checks and decision read (defaults:
    :mod:`sparseeval.core.settings`), plus the device it runs on (not part of the fit key: a fit is the
    same computation on either)."""

    k: int = defaults.DEFAULT_K
    method: str = defaults.DEFAULT_METHOD
    seed: int = defaults.DEFAULT_SEED
    val_frac: float = defaults.DEFAULT_VAL_FRAC
    test_frac: float = defaults.DEFAULT_TEST_FRAC
    split_policy: str = defaults.DEFAULT_SPLIT_POLICY
    alpha: float = defaults.DEFAULT_ALPHA
    coverage_tolerance: float = defaults.SETTINGS["coverage_tolerance"].default_value
    challenger_margin: float = defaults.SETTINGS["challenger_margin"].default_value
    challenger_min_days: float = defaults.SETTINGS["challenger_min_days"].default_value
    frontier_silent_max: float = defaults.SETTINGS["frontier_silent_max"].default_value
    frontier_quantile: float = defaults.SETTINGS["frontier_quantile"].default_value
    device: str = defaults.DEFAULT_DEVICE
    #: the joint predictor's benchmarks ("" every plain one, "none" off)
    joint_benchmarks: str = defaults.SETTINGS["joint_benchmarks"].default_value
    #: the second stage (:class:`sparseeval.estimate.fitting.ProbeSettings`; ``probe_items`` 0: no probe)
    probe_items: int = defaults.SETTINGS["probe_items"].default_value
    probe_batch: int = defaults.SETTINGS["probe_batch"].default_value
    probe_max: int = defaults.SETTINGS["probe_max"].default_value
    probe_target: float = defaults.SETTINGS["probe_target"].default_value
    probe_from: float = defaults.SETTINGS["probe_from"].default_value

    @classmethod
    def from_environment(cls) -> FitSettings:
        """The settings as ``$SPARSEEVAL_*`` (or their defaults) say: what the CLI and ``make run`` use
        (a value that does not parse is refused naming its variable)."""
        names = ("k", "method", "seed", "alpha", "coverage_tolerance", "challenger_margin", "challenger_min_days",
                 "frontier_silent_max", "frontier_quantile", "device", "joint_benchmarks", "probe_items",
                 "probe_batch", "probe_max", "probe_target", "probe_from")
        return cls(**{name: defaults.SETTINGS[name].value() for name in names})

    def probe(self) -> ProbeSettings | None:
        """The second stage these settings ask for (None: ``probe_items`` 0)."""
        if not self.probe_items:
            return None
        return ProbeSettings(first=self.probe_items, batch=self.probe_batch, max_items=self.probe_max,
                             target=self.probe_target / 100, level_quantile=self.probe_from)

    def key_settings(self) -> dict[str, Any]:
        """Every setting that changes a fit, its calibration, its checks or the decision: the fit key's."""
        probe = self.probe()
        return {**self._shared_key_settings(), **({} if probe is None else probe.key())}

    def _shared_key_settings(self) -> dict[str, Any]:
        """The key settings of a benchmark's predictor and the joint one alike (the joint has no probe)."""
        return {"k": self.k, "method": self.method, "seed": self.seed, "val_frac": self.val_frac,
                "test_frac": self.test_frac, "split_policy": self.split_policy, "alpha": self.alpha,
                "coverage_tolerance": self.coverage_tolerance, "challenger_margin": self.challenger_margin,
                "challenger_min_days": self.challenger_min_days, "frontier_silent_max": self.frontier_silent_max,
                "frontier_quantile": self.frontier_quantile}

    def joint_key_settings(self, benchmarks: Sequence[str] | None = None) -> dict[str, Any]:
        """The joint predictor's fit key settings: a benchmark's, its benchmark setting and, once
        chosen, its benchmarks."""
        out = {**self._shared_key_settings(), "joint_benchmarks": self.joint_benchmarks}
        return out if benchmarks is None else {**out, "benchmarks": list(benchmarks)}

    def protocol(self) -> ProtocolConfig:
        return ProtocolConfig(split_policy=self.split_policy, val_frac=self.val_frac,  # type: ignore[arg-type]
                              test_frac=self.test_frac)


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
    #: the frontier self-check's figures as they hold for this candidate (with its probe, or without one)
    frontier: dict[str, Any] = field(default_factory=dict)

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
    #: per output, the frontier self-check's figures (None: not run)
    frontier: dict[str, dict[str, Any]] | None = None


@dataclass(frozen=True)
class RefreshResult:
    """What a refresh did: ``status`` is ``skipped`` (fit key already decided), ``resumed`` (a waiting
    publication handed on) or ``decided``; ``evaluated`` the anchor set whose checks are reported;
    ``figures`` what the pipeline shows as metadata; ``published`` what this call published."""

    benchmark: str
    status: str
    fit_key: str
    data_version: str
    decision: str
    evaluated: int | None = None
    proposed: int | None = None
    challenger: int | None = None
    checks: tuple[Check, ...] = ()
    figures: dict[str, Any] = field(default_factory=dict)
    published: tuple[Published, ...] = ()
    models_scored: int = 0  #: anchor-only models scored by a champion this call published
    #: anchor-only models it could not score (too few anchors answered), with why
    models_not_scored: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


@dataclass
class _Context:
    """The refresh's inputs, shared by the skeleton and the subject that fills it in."""

    store: Store
    tracking: TrackingConfig
    predictor_dir: Path
    settings: FitSettings
    log: Log
    run_tags: dict[str, str]


# --- 1. resume or skip --------------------------------------------------------------------------

def resume_or_skip(ctx: _Context, name: str, key: str) -> dict[str, Any] | None:
    """Before a fit: finish ``name``'s publications that already show outside DuckDB; then, when a
    publication of this very fit key is still waiting, what hands it to the publish step; when the key
    is already decided, None after saying why nothing runs; otherwise ``{}`` (fit)."""
    db = ctx.store
    publisher = Publisher(db, ctx.tracking, ctx.predictor_dir, run_tags=ctx.run_tags)
    for done in publisher.publish_open(name, started_only=True):
        ctx.log.warning("%s: finished the interrupted publication of anchor set #%d as %s (registry version %s)",
                        name, done.anchor_set_id, done.alias, done.registry_version)
    pending = db.open_publications(name)
    if pending and all(p["fit_key"] == key for p in pending):
        ids = ", ".join(f"#{p['anchor_set_id']} as {p['alias']}" for p in pending)
        return {"decision": f"resumed: the publication of {ids} (fit key {key[:12]}) did not finish; "
                            f"the checks it passed are reported again and the publish step completes it",
                "evaluated": int(pending[0]["anchor_set_id"])}
    decided = up_to_date(db, name, key)
    if decided is not None and not pending:
        ctx.log.info("%s: skipped: fit key %s (data version %s and every setting) already decided on %s: %s",
                     name, key[:12], decided["data_version"], decided["decided_at"], decided["reason"])
        return None
    return {}


# --- the skeleton -----------------------------------------------------------------------------------

class _Subject(Protocol):
    """What differs between the phases of a refresh (a benchmark's champion, its challenger, the joint
    predictor): whether it runs, what is fitted and competes, how the decision is recorded, what is
    reported. Everything else is the skeleton's."""

    name: str
    version: str
    key: str
    step: str  #: the MLflow run's step name

    def gate(self, ctx: _Context) -> RefreshResult | None: ...

    def run_params(self) -> dict[str, Any]: ...

    def fit(self, ctx: _Context, run: TrackedRun) -> Proposal: ...

    def record(self, ctx: _Context, proposal: Proposal, checks: list[Check]) -> str: ...

    def report(self, ctx: _Context, run: TrackedRun, proposal: Proposal, decision: str) -> dict[str, Any]: ...


def _refresh(subject: _Subject, ctx: _Context, *, publish: bool) -> RefreshResult:
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
            figures = subject.report(ctx, run, proposal, decision)
            run.set_tags({"decision": decision[:250], "proposed_anchor_set": proposal.proposed.anchor_set_id})
        result = RefreshResult(name, "decided", key, version, decision, evaluated=proposal.proposed.anchor_set_id,
                               proposed=proposal.proposed.anchor_set_id,
                               challenger=proposal.challenger.anchor_set_id if proposal.challenger else None,
                               checks=tuple(checks), figures=figures)
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
    return RefreshResult(**{**result.__dict__, "published": done, "models_scored": scored.scored,
                            "models_not_scored": scored.skipped})


def _resume_gate(ctx: _Context, name: str, key: str, version: str) -> RefreshResult | None:
    """:func:`resume_or_skip` as the skeleton's gate."""
    resumed = resume_or_skip(ctx, name, key)
    if resumed is None:
        return RefreshResult(name, "skipped", key, version, f"skipped: fit key {key[:12]} already decided")
    if resumed:
        return RefreshResult(name, "resumed", key, version, resumed["decision"], evaluated=resumed["evaluated"])
    return None


def _record_proposal(ctx: _Context, name: str, key: str, version: str, proposal: Proposal,
                     checks: list[Check]) -> str:
    return record_decision(ctx.store, name, fit_key=key, data_version=version, proposed=proposal.proposed.row(),
                           challenger=proposal.challenger.row() if proposal.challenger else None, checks=checks)


def proposal_checks(proposal: Proposal, settings: FitSettings) -> list[Check]:
    """The publishing checks of a proposal, over every output: the one place they are computed (a
    new per-candidate figure joins :class:`Proposal` and is passed on here)."""
    return publishing_checks(mae=proposal.mae, baseline=proposal.baseline, mean_guess=proposal.mean_guess,
                             coverage=proposal.coverage, nominal=1.0 - settings.alpha,
                             tolerance=settings.coverage_tolerance, items=proposal.items,
                             expected_k=proposal.expected_k, known_items=proposal.known_items,
                             frontier=proposal.frontier, frontier_silent_max=settings.frontier_silent_max)


# --- a benchmark: its champion first, then its challenger -------------------------------------------

def refresh_benchmark(matrix: ResponseMatrix, store: Store, tracking: TrackingConfig, predictor_dir: str | Path,
                      settings: FitSettings, *, log: Log | None = None, run_tags: Mapping[str, str] | None = None,
                      publish: bool = False, challenger: bool = True) -> RefreshResult:
    """Refresh one benchmark from its current ``matrix`` (see the module docstring), in two phases
    so that nothing delays the champion: (1) keep the champion's anchors and refit its predictor (the
    first refresh, or one whose settings changed the method, K or seed, selects anchors instead), decide
    with the publishing checks, record; with ``publish``, publish it; (2) with ``challenger`` (and once
    the refit is published), :func:`select_challenger`. Resume or skip when the fit key says so.
    ``run_tags`` go on every MLflow run (the pipeline's run id). The result is the first phase's, with
    the second's decision and figures in ``figures["challenger"]`` and its publications added."""
    ctx = _context(store, tracking, predictor_dir, settings, log, run_tags)
    first = _refresh(_Champion(matrix, store, settings), ctx, publish=publish)
    if not (challenger and publish and first.status == "decided" and first.passed):
        return first
    second = _refresh(_Challenger(matrix, store, settings), ctx, publish=publish)
    rival = {"status": second.status, "decision": second.decision, "anchor_set": second.proposed,
             **{k: v for k, v in second.figures.items() if k != "anchors"}}
    return RefreshResult(**{**first.__dict__, "figures": {**first.figures, "challenger": rival},
                            "published": first.published + second.published,
                            "models_scored": first.models_scored + second.models_scored,
                            "models_not_scored": {**first.models_not_scored, **second.models_not_scored}})


def select_challenger(matrix: ResponseMatrix, store: Store, tracking: TrackingConfig, predictor_dir: str | Path,
                      settings: FitSettings, *, log: Log | None = None, run_tags: Mapping[str, str] | None = None,
                      publish: bool = False) -> RefreshResult:
    """The second phase of a benchmark's refresh, once its refit champion is published: a fresh
    selection competes with it (:func:`sparseeval.publish.champion.decide`: clearly better, and the champion
    old enough) and, with its own publishing checks passed, replaces it or is published beside it as
    challenger. ``skipped`` when this fit key's champion is not a published refit, or when its
    challenger was decided already."""
    return _refresh(_Challenger(matrix, store, settings), _context(store, tracking, predictor_dir, settings, log,
                                                                    run_tags), publish=publish)


def _context(store: Store, tracking: TrackingConfig, predictor_dir: str | Path, settings: FitSettings,
             log: Log | None, run_tags: Mapping[str, str] | None) -> _Context:
    return _Context(store, tracking, Path(predictor_dir), settings,
                    log or logging.getLogger("sparseeval.publish.refresh"), dict(run_tags or {}))


class _BenchmarkPhase:
    """What both phases of a benchmark's refresh share: its key, split, bar and candidate saver."""

    step = "candidate"

    def __init__(self, matrix: ResponseMatrix, store: Store, settings: FitSettings) -> None:
        self.matrix = matrix
        self.name = matrix.benchmark
        self.version = matrix.data_version or store.data_version(self.name)  # an old matrix file carries none
        self.k = min(settings.k, len(matrix.items))
        self.key = fit_key(self.version, settings.key_settings())
        self.settings = settings
        self.baseline: float | None = None
        self.frontier: dict[str, Any] | None = None

    def run_params(self) -> dict[str, Any]:
        s = self.settings
        return {"k": self.k, "method": s.method, "seed": s.seed, "split": s.split_policy, "alpha": s.alpha,
                "data_version": self.version, "fit_key": self.key,
                "threads": cpu_threads()}  # with the seed, what reproduces the fit

    def _prepare(self, ctx: _Context, run: TrackedRun) -> _CandidateSaver:
        matrix, s, db = self.matrix, self.settings, ctx.store
        run.log_matrix(matrix, source=db.path, digest=self.version)
        metadata = db.model_metadata()  # one read: the date split and every artifact's model list
        dates = model_dates(metadata, matrix.models) if s.split_policy == "date" else None
        self.split = split_for_seed(matrix, s.seed, s.protocol(), dates)
        return _CandidateSaver(ctx, matrix, self.split, metadata, self.version, self.k)

    def _select(self, save: _CandidateSaver, ctx: _Context) -> Candidate:
        """The fresh selection (fitted, or reused), with the random-linear bar of the split."""
        matrix, s, split = self.matrix, self.settings, self.split
        fitted = save.obtain("selected", None, lambda: fit_on_split(matrix, split, s.method, self.k, s.seed,
                                                                    device=s.device))
        self._bars(save, ctx)
        return save.save("selected", *fitted)

    def _bars(self, save: _CandidateSaver, ctx: _Context) -> None:
        """The random-linear bar on the split and the frontier self-check (once: both candidates of a
        phase share them; the frontier figures once per fit key, as both phases measure the same method,
        K and seed on the same split's fitting models)."""
        s = self.settings
        if self.baseline is None:
            self.baseline = baseline_mae(self.matrix, self.split, self.k, s.seed, device=s.device)
        if self.frontier is None:
            probe = s.probe()
            self.frontier = _selfcheck(
                ctx.store, self.name, _selfcheck_setup(s, s.method, self.k, **({} if probe is None else probe.key())),
                len(self.matrix.models), self.version,
                lambda: probed_selfcheck(self.matrix, np.concatenate([self.split.train, self.split.val]), s.method,
                                         self.k, s.seed, probe, quantile=s.frontier_quantile, alpha=s.alpha,
                                         device=s.device))
        save.baseline, save.frontier = self.baseline, self.frontier

    def _proposal(self, proposed: Candidate, challenger: Candidate | None, reason: str) -> Proposal:
        b = self.name
        return Proposal(proposed=proposed, challenger=challenger, reason=reason, mae={b: proposed.mae},
                        baseline={b: self.baseline}, mean_guess={b: mean_guess_mae(self.matrix.scores, self.split)},
                        coverage={b: proposed.coverage}, items=proposed.items, expected_k=self.k,
                        known_items=set(self.matrix.items), frontier={b: proposed.frontier})

    def report(self, ctx: _Context, run: TrackedRun, proposal: Proposal, decision: str) -> dict[str, Any]:
        matrix, s, split, proposed = self.matrix, self.settings, self.split, proposal.proposed
        frontier = proposed.frontier
        cover = coverage_by_level(matrix, split, proposed.estimator, seed=s.seed)
        run.log_metrics({"test_mae": proposed.mae, "random_linear_mae": self.baseline, "coverage": proposed.coverage,
                         "selection_seconds": proposed.fit_seconds,
                         **{f"coverage/level_{lv:g}": v for lv, v in cover.items()},
                         **{f"frontier/{name}": v for name, v in frontier_metrics(frontier).items()},
                         **{f"frontier/anchors_alone/{name}": v
                            for name, v in _anchors_alone_metrics(frontier).items()}})
        with tempfile.TemporaryDirectory() as tmp:
            held = heldout_intervals(matrix, split, proposed.estimator, alpha=s.alpha, seed=s.seed)
            run.log_artifact(plot_predicted_vs_true(held, Path(tmp) / "predicted_vs_true.png",
                                                    title=f"{self.name}: held-out models"), "plots")
            run.log_artifact(plot_coverage_by_level(cover, Path(tmp) / "coverage_by_level.png", title=self.name,
                                                    n_models=len(split.test)), "plots")
        return {"test_mae_points": round(proposed.mae, 3), "random_linear_mae_points": round(self.baseline, 3),
                "coverage": proposed.coverage, "k": self.k, "method": s.method, "origin": proposed.origin,
                "anchors": proposed.items, "selection_seconds": round(proposed.fit_seconds, 2),
                "train_models": len(split.train), "test_models": len(split.test),
                "reused_fits": [c.origin for c in (proposal.proposed, proposal.challenger) if c and c.reused],
                **_frontier_metadata(frontier), **_probe_metadata(frontier, s.probe()),
                "frontier_note": _selfcheck_note(frontier)}


class _Champion(_BenchmarkPhase):
    """Phase 1: the champion's anchors refit on the new data (or, without a champion of this setup,
    a fresh selection), decided and recorded alone, so it is published without waiting for a challenger."""

    def gate(self, ctx: _Context) -> RefreshResult | None:
        return _resume_gate(ctx, self.name, self.key, self.version)

    def fit(self, ctx: _Context, run: TrackedRun) -> Proposal:
        s, db = self.settings, ctx.store
        save = self._prepare(ctx, run)
        champion = db.champion(self.name)
        if champion is None or (champion["method"], champion["k"], champion["seed"]) != (s.method, self.k, s.seed):
            return self._proposal(self._select(save, ctx), None, "first publication: the selected anchors")
        try:
            fitted = save.obtain("refit", champion["items"], lambda: refit_on_anchors(
                self.matrix, self.split, s.method, champion["items"], s.seed, device=s.device))
        except ValueError as exc:
            return self._proposal(self._select(save, ctx), None,
                                  f"champion cannot be refit ({exc}): the selected anchors are proposed")
        self._bars(save, ctx)
        # what the challenger phase decides on: the age of the champion this refresh started from
        save.extra = {"refit_of": {"anchor_set_id": champion["anchor_set_id"],
                                   "published_at": str(champion["published_at"] or "")}}
        refit = save.save("refit", *fitted)
        proposal = self._proposal(refit, None, f"the champion's anchors (#{champion['anchor_set_id']}) refit on "
                                               f"the new data; a fresh selection challenges it once it is published")
        if all(c.passed for c in proposal_checks(proposal, s)):
            return proposal
        # the refit fails its checks: a fresh selection may still replace the champion (clearly better and the
        # champion old enough), so it competes now, as it would have after the publication
        selected = self._select(save, ctx)
        choice = decide(refit.mae, selected.mae, margin=s.challenger_margin, published_at=champion["published_at"],
                        now=datetime.now(UTC).replace(tzinfo=None), min_days=s.challenger_min_days)
        if choice.publish == "challenger" and selected.anchor_set_id != refit.anchor_set_id:
            return self._proposal(selected, None, f"the champion's refit fails its checks; {choice.reason}")
        return self._proposal(refit, selected, f"the champion's refit fails its checks; {choice.reason}")

    def record(self, ctx: _Context, proposal: Proposal, checks: list[Check]) -> str:
        return _record_proposal(ctx, self.name, self.key, self.version, proposal, checks)


class _Challenger(_BenchmarkPhase):
    """Phase 2: a fresh selection against the refit champion this fit key published."""

    step = "challenger"

    def gate(self, ctx: _Context) -> RefreshResult | None:
        db = ctx.store
        rows = db.query("SELECT anchor_set_id, origin, role, params FROM anchor_sets WHERE benchmark = $b "
                        "AND fit_key = $k ORDER BY anchor_set_id", {"b": self.name, "k": self.key}).to_dicts()
        refit = next((r for r in rows if r["origin"] == "refit" and r["role"] == "champion"), None)
        if refit is None:
            return RefreshResult(self.name, "skipped", self.key, self.version,
                                 "no challenger: this refresh did not publish a refit of the champion (a first or "
                                 "re-selected publication, a rejection, or a publication still pending)")
        if any(r["origin"] == "selected" for r in rows):
            return RefreshResult(self.name, "skipped", self.key, self.version,
                                 f"challenger of fit key {self.key[:12]} already decided")
        self.refit = refit
        return None

    def fit(self, ctx: _Context, run: TrackedRun) -> Proposal:
        s = self.settings
        save = self._prepare(ctx, run)
        selected = self._select(save, ctx)
        champion = ctx.store.anchor_set(int(self.refit["anchor_set_id"]))
        started = json.loads(self.refit["params"] or "{}").get("refit_of", {}).get("published_at") or None
        choice = decide(float(champion["test_mae"]), selected.mae, margin=s.challenger_margin,
                        published_at=datetime.fromisoformat(started) if started else None,
                        now=datetime.now(UTC).replace(tzinfo=None), min_days=s.challenger_min_days)
        self.wins = choice.publish == "challenger" and selected.anchor_set_id != champion["anchor_set_id"]
        return self._proposal(selected, None, choice.reason)

    def record(self, ctx: _Context, proposal: Proposal, checks: list[Check]) -> str:
        if self.wins:  # proposed as the new champion (the refit is retired when it is published)
            return _record_proposal(ctx, self.name, self.key, self.version, proposal, checks)
        return record_challenger(ctx.store, self.name, fit_key=self.key, data_version=self.version,
                                 challenger=proposal.proposed.row(), checks=checks)


class _CandidateSaver:
    """Fit (or reuse) one candidate, calibrate it, save it as a predictor version, measure it and write
    its anchor set once: a benchmark's per-candidate evaluation, in one place."""

    def __init__(self, ctx: _Context, matrix: ResponseMatrix, split: Split, metadata: pl.DataFrame, version: str,
                 k: int) -> None:
        self.ctx, self.matrix, self.split, self.metadata = ctx, matrix, split, metadata
        self.version, self.k = version, k
        self.baseline = float("nan")  #: the random-linear bar on the split, set once fitted
        self.extra: dict[str, Any] = {}  #: more parameters stored with the next anchor set
        self.frontier: dict[str, Any] = {}  #: the frontier self-check's figures, set once measured

    def obtain(self, origin: str, items: list[str] | None, fit: Callable[[], AnchorEstimator]
               ) -> tuple[AnchorEstimator, float, bool]:
        """The estimator (fitted now, or the stored one of exactly this fit), its fit seconds, whether reused."""
        reused = _reusable_fit(self.ctx.store, self.matrix.benchmark, self.version, origin, items, self.k,
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
        artifact = artifact_from_fit(matrix, self.split, est, alpha=s.alpha, seed=s.seed, models=self.metadata,
                                     settings=db.training_settings(matrix.benchmark), frontier=self.frontier)
        frontier = attach_probe(artifact, matrix, self.split, s.probe(), seed=s.seed, alpha=s.alpha,
                                frontier=self.frontier)
        if frontier is not self.frontier:  # without the probe it could not fit: the figures that hold for it
            artifact.extra["frontier"] = frontier
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
                    "frontier": frontier, **self.extra},
            artifact_uri=str(folder.resolve()), predictor_hash=saved.content_hash, origin=origin,
            data_version=self.version, test_mae=mae, baseline_mae=self.baseline, coverage=coverage,
            **frontier_fields(frontier))
        return Candidate(anchor_set_id, str(folder), saved.content_hash, origin, chosen, mae, coverage, est, seconds,
                         reused, frontier)


#: the frontier self-check stands until the benchmark's models grew by this share since it was measured
#: (as the method comparison does, :mod:`sparseeval.publish.comparison`): it measures the method, K and seed on the
#: strongest tenth of the fitting models, which a day's few dozen newcomers barely move, and it costs a
#: second selection; re-measuring it daily would delay every publication by that much
SELFCHECK_NEW_SHARE = 0.1


def _selfcheck_setup(s: FitSettings, method: str, k: int, **more: Any) -> dict[str, Any]:
    """Everything but the data that the frontier self-check's figures depend on (``k``: the anchor
    set's, all its items; ``more``: what else, such as a joint predictor's benchmarks)."""
    return {"method": method, "k": k, "seed": s.seed, "alpha": s.alpha, "split": s.split_policy,
            "val_frac": s.val_frac, "test_frac": s.test_frac, "quantile": s.frontier_quantile, **more}


def _selfcheck(db: Store, name: str, setup: dict[str, Any], n_models: int, version: str,
               measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The frontier self-check of ``name`` (a benchmark, or the joint predictor) as stored with its
    anchor sets: the stored one of this ``setup`` while the models grew by less than
    :data:`SELFCHECK_NEW_SHARE` (:func:`_stored_frontier`), else ``measure()`` now, with what it was
    measured on (the next refresh's reuse reads it)."""
    stored = _stored_frontier(db, name, setup, n_models)
    if stored is not None:
        return stored
    return {**measure(), "setup": setup, "measured_on": version, "matrix_models": n_models}


def _selfcheck_note(frontier: dict[str, Any]) -> str:
    """What the refresh says about its self-check beside the figures: why nothing was measured, or
    when the figures were measured (reused); empty when measured now."""
    first = next(iter(selfcheck_outputs(frontier, "").values()), {})  # a joint predictor's: one note for all
    return str(first.get("note") or frontier.get("reused", ""))


def _frontier_metadata(figures: dict[str, Any]) -> dict[str, float]:
    """A self-check's figures as the fit asset's flat ``frontier_*`` metadata (what ``make run`` prints)."""
    return {f"frontier_{name}": round(v, 4) for name, v in frontier_metrics(figures).items()}


def _probe_metadata(figures: dict[str, Any], probe: ProbeSettings | None) -> dict[str, Any]:
    """With a probe: its first batch, the share of the stronger models it estimated and the items they ran,
    and the anchors-alone figures beside the self-check (flat, as :func:`_frontier_metadata`), or why
    there is none (``probe_note``)."""
    if probe is None:
        return {}
    alone = {f"frontier_anchors_alone_{name}": round(v, 4) for name, v in _anchors_alone_metrics(figures).items()}
    used = {key: round(float(figures[key]), 4) for key in ("probed", "probe_items_mean", "probe_items_max")
            if key in figures and "anchors_alone" in figures}
    return {"probe_items": probe.first, **used, **alone,
            **({"probe_note": figures["probe_note"]} if "probe_note" in figures else {})}


def _anchors_alone_metrics(figures: dict[str, Any]) -> dict[str, float]:
    """The anchors-alone figures beside a self-check measured with the probe (none otherwise)."""
    return frontier_metrics({"measured": "anchors_alone" in figures, **(figures.get("anchors_alone") or {})})


def _stored_frontier(db: Store, benchmark: str, setup: dict[str, Any], n_models: int) -> dict[str, Any] | None:
    """The newest frontier self-check stored with one of ``benchmark``'s anchor sets for the same
    ``setup``, while the matrix has grown by less than :data:`SELFCHECK_NEW_SHARE` since it was measured;
    its figures say so (``reused``). None: measure it again."""
    rows = db.query("SELECT params FROM anchor_sets WHERE benchmark = $b AND method = $m AND k = $k "
                    "AND seed = $s ORDER BY anchor_set_id DESC",
                    {"b": benchmark, "m": setup["method"], "k": setup["k"], "s": setup["seed"]})
    for (params,) in rows.iter_rows():
        figures = json.loads(params or "{}").get("frontier") or {}
        if figures.get("setup") != setup or "matrix_models" not in figures:
            continue
        grown = (n_models - int(figures["matrix_models"])) / max(n_models, 1)
        if not 0 <= grown < SELFCHECK_NEW_SHARE:
            return None  # the newest measurement is too old (or from a larger matrix): measure again
        return {**figures, "reused": f"measured on data version {figures['measured_on']} "
                                     f"({figures['matrix_models']} models; {100 * grown:.1f} % new since, "
                                     f"< {100 * SELFCHECK_NEW_SHARE:g} %)"}
    return None


def _reusable_fit(db: Store, benchmark: str, version: str, origin: str, items: list[str] | None, k: int,
                  s: FitSettings) -> tuple[AnchorEstimator, float] | None:
    """The estimator of a fit stored for exactly this matrix, method, K, seed, split and device (and,
    for a refit, these anchors), with its fit seconds; None when there is none or the split depends on
    model dates (see the module docstring)."""
    if s.split_policy == "date":
        return None
    want = {"split": s.split_policy, "val_frac": s.val_frac, "test_frac": s.test_frac,
            "device": resolve_device(s.device).type}
    rows = db.query("SELECT anchor_set_id, params, artifact_uri FROM anchor_sets WHERE benchmark = $b "
                    "AND data_version = $v AND origin = $o AND method = $m AND k = $k AND seed = $s "
                    "AND artifact_uri IS NOT NULL ORDER BY anchor_set_id DESC",
                    {"b": benchmark, "v": version, "o": origin, "m": s.method, "k": k, "s": s.seed})
    for row in rows.iter_rows(named=True):
        params = json.loads(row["params"] or "{}")
        if any(params.get(name) != value for name, value in want.items()):
            continue
        if items is not None and db.anchor_set(int(row["anchor_set_id"]))["items"] != list(items):
            continue
        try:
            estimator = load_predictor(row["artifact_uri"]).estimator
        except (OSError, ValueError):  # its folder is gone or damaged: fit again
            continue
        return estimator, float(params.get("fit_seconds", 0.0))
    return None


# --- the joint predictor ----------------------------------------------------------------------------

def joint_plan(matrices: Mapping[str, ResponseMatrix], settings: FitSettings) -> tuple[list[str], str | None]:
    """The joint predictor's benchmarks among ``matrices``, and why it cannot be fitted (None when it can)."""
    from sparseeval.data.benchmarks import joint_benchmarks

    chosen = joint_benchmarks(settings.joint_benchmarks, sorted(matrices))
    if len(chosen) < 2:
        return chosen, (f"skipped: a joint predictor needs two benchmarks or more, have "
                        f"{', '.join(chosen) or 'none'} (SPARSEEVAL_JOINT_BENCHMARKS)")
    first, *rest = (matrices[b] for b in chosen)
    common = set(first.models).intersection(*(m.models for m in rest))
    if len(common) < MIN_JOINT_MODELS:
        return chosen, (f"skipped: only {len(common)} models have every one of {', '.join(chosen)} "
                        f"(at least {MIN_JOINT_MODELS} needed)")
    return chosen, None


def refresh_joint(matrices: Mapping[str, ResponseMatrix], store: Store, tracking: TrackingConfig,
                  predictor_dir: str | Path, settings: FitSettings, *, log: Log | None = None,
                  run_tags: Mapping[str, str] | None = None, publish: bool = False) -> RefreshResult:
    """The joint predictor's refresh on the same skeleton as :func:`refresh_benchmark`: one anchor
    set for several benchmarks, re-selected whenever its data change, compared on the same held-out
    models with the per-benchmark method at the same total, checked output by output. ``matrices``:
    every benchmark's current matrix (the joint benchmarks are chosen among them; :func:`joint_plan`
    says when none can be fitted, and then the result is ``skipped``)."""
    ctx = _context(store, tracking, predictor_dir, settings, log, run_tags)
    chosen, why_not = joint_plan(matrices, settings)
    if why_not is not None:
        ctx.log.info("%s: %s", JOINT_METHOD, why_not)
        return RefreshResult(JOINT_METHOD, "skipped", "", "", why_not)
    subject = _Joint([matrices[b] for b in chosen], store, settings)
    for line in subject.behind:
        ctx.log.warning("%s: %s: its refresh has not completed; the joint predictor uses its previous matrix",
                        JOINT_METHOD, line)
    return _refresh(subject, ctx, publish=publish)


class _Joint:
    """The joint predictor's refresh: a fresh joint selection, the per-benchmark reference, the bars."""

    name = JOINT_METHOD
    step = "candidate"

    def __init__(self, matrices: list[ResponseMatrix], store: Store, settings: FitSettings) -> None:
        self.matrices, self.settings = matrices, settings
        self.k = min([settings.k, *(len(m.items) for m in matrices)])
        # what the fit sees, exactly: the data versions its matrices were built from (they travel with them)
        self.version = joint_data_version({m.benchmark: m.data_version or m.digest() for m in matrices})
        self.key = fit_key(self.version, settings.joint_key_settings([m.benchmark for m in matrices]))
        store_versions = store.data_versions()
        self.behind = [f"{m.benchmark} (matrix at data version {m.data_version or '?'}, store at "
                       f"{store_versions.get(m.benchmark, '?')})" for m in matrices
                       if m.data_version and store_versions.get(m.benchmark) not in (None, m.data_version)]

    def gate(self, ctx: _Context) -> RefreshResult | None:
        return _resume_gate(ctx, self.name, self.key, self.version)

    def record(self, ctx: _Context, proposal: Proposal, checks: list[Check]) -> str:
        return _record_proposal(ctx, self.name, self.key, self.version, proposal, checks)

    def run_params(self) -> dict[str, Any]:
        s = self.settings
        return {"k_per_benchmark": self.k, "benchmarks": ",".join(m.benchmark for m in self.matrices),
                "method": JOINT_METHOD, "reference_method": s.method, "seed": s.seed, "split": s.split_policy,
                "alpha": s.alpha, "data_version": self.version, "threads": cpu_threads()}

    def fit(self, ctx: _Context, run: TrackedRun) -> Proposal:
        s, db, k = self.settings, ctx.store, self.k
        models = common_models(self.matrices)
        self.parts = parts = [restrict_models(m, models) for m in self.matrices]
        self.data = data = joint_data(parts)
        config = s.protocol()
        metadata = db.model_metadata()  # one read: the date split and the artifact's model list
        dates = model_dates(metadata, data.models) if s.split_policy == "date" else None
        self.split = split = make_split(data.models, policy=config.split_policy, val_frac=config.val_frac,
                                        test_frac=config.test_frac, seed=s.seed, dates=dates)
        fitting = np.concatenate([split.train, split.val])
        cut = {"quantile": s.frontier_quantile, "alpha": s.alpha, "device": s.device}
        self.frontier = frontier = _selfcheck(
            db, JOINT_METHOD, _selfcheck_setup(s, JOINT_METHOD, k * len(data.benchmarks), benchmarks=data.benchmarks,
                                               cuts=[MEAN, OWN_CUT]),
            len(data.models), self.version,
            lambda: {"outputs": joint_frontier_selfcheck(data, fitting, k, s.seed, **cut),
                     OWN_CUT: joint_own_cut_selfcheck(data, fitting, k, s.seed, **cut)})
        t0 = time.perf_counter()
        joint_results, est = evaluate_joint(data, split, k, s.seed, config=config, device=s.device)
        self.seconds = seconds = time.perf_counter() - t0
        reference = evaluate_per_benchmark(parts, split, s.method, k, s.seed, config=config, device=s.device)
        self.baselines = baselines = joint_baseline_maes(parts, split, k, s.seed, device=s.device)
        artifact = joint_artifact_from_fit(data, split, est, alpha=s.alpha, seed=s.seed, models=metadata,
                                           settings={b: db.training_settings(b) for b in data.benchmarks},
                                           frontier=frontier)
        folder, saved = save_version(artifact, ctx.predictor_dir, JOINT_METHOD)
        modes = {name: c.get("mode", "binomial") for name, c in saved.calibration["outputs"].items()}
        self.coverage = coverage = joint_crossfit_coverage(data, split, est, alpha=s.alpha, seed=s.seed, modes=modes)
        self.mae = mae = {r.benchmark: r.mae for r in joint_results}
        self.ref_mae = ref_mae = {r.benchmark: r.mae for r in reference}
        keys = [data.columns[c] for c in est.anchors_]
        owners, items = zip(*(key.split(JOINT_SEP, 1) for key in keys), strict=True)
        self.allocation = est.allocation()
        anchor_set_id = db.save_anchor_set(
            benchmark=JOINT_METHOD, method=JOINT_METHOD, k=est.k, items=list(items), item_benchmarks=list(owners),
            seed=s.seed, n_train_models=len(split.train),
            params={"benchmarks": data.benchmarks, "k_per_benchmark": k, "allocation": self.allocation,
                    "split": s.split_policy, "val_frac": s.val_frac, "test_frac": s.test_frac, "origin": "selected",
                    "fit_seconds": round(seconds, 3), "test_mae": mae, "baseline_mae": baselines,
                    "coverage": coverage, "reference_method": s.method, "reference_mae": ref_mae,
                    "frontier": frontier},
            artifact_uri=str(folder.resolve()), predictor_hash=saved.content_hash,
            origin="selected", data_version=self.version, test_mae=mae[MEAN],
            baseline_mae=baselines[MEAN], coverage=coverage[MEAN],
            **frontier_fields(frontier["outputs"][MEAN]))  # the columns hold the mean's, as test_mae does
        # the joint comparison, under its own names: its test models are the joint split's, not a benchmark's
        frame = results_frame([*joint_results, *reference]).with_columns(
            (pl.lit(f"{JOINT_METHOD}/") + pl.col("benchmark")).alias("benchmark"))
        comparison_id = log_comparison(ctx.tracking, benchmark=JOINT_METHOD, rows=frame.to_dicts(),
                                       tags=ctx.run_tags, run_id=run.run_id)
        db.save_evaluations(frame.with_columns(pl.lit(comparison_id).alias("mlflow_run_id"),
                                               pl.lit(self.version).alias("data_version")))
        self.outputs = outputs = [*data.benchmarks, MEAN]
        scores = np.concatenate([data.S, data.S.mean(axis=1, keepdims=True)], axis=1)
        candidate = Candidate(anchor_set_id, str(folder), saved.content_hash, "selected", keys, mae[MEAN],
                              coverage[MEAN], est, seconds)
        reason = f"joint anchor set #{anchor_set_id}: {k} items per benchmark over {', '.join(data.benchmarks)}" + (
            f" (behind the store: {'; '.join(self.behind)})" if self.behind else "")
        return Proposal(proposed=candidate, challenger=None, reason=reason, mae={o: mae[o] for o in outputs},
                        baseline={o: baselines[o] for o in outputs},
                        mean_guess={o: mean_guess_mae(scores[:, i], split) for i, o in enumerate(outputs)},
                        coverage={o: coverage[o] for o in outputs}, items=keys, expected_k=k * len(data.benchmarks),
                        known_items=set(data.columns), frontier=gated_figures(frontier, MEAN))

    def report(self, ctx: _Context, run: TrackedRun, proposal: Proposal, decision: str) -> dict[str, Any]:
        s, outputs, own = self.settings, self.outputs, own_cut_outputs(self.frontier)
        run.log_metrics({**{f"test_mae/{o}": self.mae[o] for o in outputs},
                         **{f"{s.method}_mae/{o}": self.ref_mae[o] for o in outputs},
                         **{f"random_linear_mae/{o}": self.baselines[o] for o in outputs},
                         **{f"coverage/{o}": c for o, c in self.coverage.items() if c is not None},
                         **{f"frontier/{o}/{name}": v for o in outputs
                            for name, v in frontier_metrics(self.frontier["outputs"][o]).items()},
                         **{f"frontier_{OWN_CUT}/{b}/{name}": v for b, f in own.items()
                            for name, v in frontier_metrics(f).items()},
                         "selection_seconds": self.seconds})
        table = pl.DataFrame({"output": outputs, "joint_mae": [round(self.mae[o], 3) for o in outputs],
                              f"{s.method}_mae": [round(self.ref_mae[o], 3) for o in outputs],
                              "random_linear_mae": [round(self.baselines[o], 3) for o in outputs],
                              "anchors": [self.allocation.get(o, proposal.proposed.estimator.k) for o in outputs],
                              "coverage": [self.coverage[o] for o in outputs],
                              **{f"frontier_{name}": [frontier_metrics(self.frontier["outputs"][o]).get(name)
                                                      for o in outputs] for name in FRONTIER_METRICS},
                              **{f"frontier_{OWN_CUT}_{name}": [frontier_metrics(own.get(o, {})).get(name)
                                                               for o in outputs] for name in FRONTIER_METRICS}})
        return {"benchmarks": self.data.benchmarks, "inputs_behind": self.behind, "k_per_benchmark": self.k,
                "items": proposal.proposed.estimator.k, "models": len(self.data.models),
                "train_models": len(self.split.train), "test_models": len(self.split.test),
                "selection_seconds": round(self.seconds, 2), "test_mae_points": round(self.mae[MEAN], 3),
                "outputs": table, "frontier_note": _selfcheck_note(self.frontier), **self._worst_output()}

    def _worst_output(self) -> dict[str, Any]:
        """The self-check's figures of the output (and cut) that misses silently most (the one the check
        fails first), flat as a benchmark's are: what a one-line summary shows."""
        measured = {o: f for o, f in gated_figures(self.frontier, MEAN).items() if f.get("measured")}
        if not measured:
            return {}
        worst = max(measured, key=lambda o: measured[o]["silent_misses"])
        return {"frontier_worst_output": worst, **_frontier_metadata(measured[worst])}
