"""A benchmark's refresh as one library operation: :func:`refresh_benchmark` (its joint twin:
:func:`sparseeval.publish.refresh_joint.refresh_joint`), on the skeleton of
:mod:`sparseeval.publish.refresh_steps` (resume or skip; fit and compete; check; decide and record; publish).

A benchmark is refreshed in two phases so that nothing delays its champion: first its champion's anchors
are kept and its predictor refit on the new data (the first refresh, or one whose settings change the
method, K or seed, selects anchors instead), decided and published alone (:class:`_Champion`); then, once
that refit is published, a fresh selection competes with it as challenger (:func:`select_challenger`,
:func:`sparseeval.publish.champion.decide`). Each candidate is calibrated, saved as a predictor version and
written as an anchor set once (:class:`~sparseeval.publish.refresh_steps.CandidateSaver`); a fit stored for
exactly the same data and settings is reused (:mod:`sparseeval.publish.selfcheck_reuse`). The Dagster
pipeline publishes a champion in its own step, right after the blocking asset checks; the method comparison
never runs before it (:mod:`sparseeval.publish.comparison`). A crash between the two phases leaves the
published champion; that data version has no challenger.

The caller supplies the matrix (:class:`sparseeval.data.access.matrix_store.MatrixStore` keeps it
incremental), the store, the MLflow configuration, the predictors folder and the
:class:`~sparseeval.core.settings.RefreshSettings`; the result is a
:class:`~sparseeval.publish.refresh_outcome.RefreshResult`.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from sparseeval.core.settings import FIT, RefreshSettings
from sparseeval.data.access.sources import model_dates
from sparseeval.data.matrix import ResponseMatrix
from sparseeval.data.store import Store
from sparseeval.estimate.evaluation import ProtocolConfig, fit_on_split, split_for_seed
from sparseeval.estimate.fitting import ProbeSettings, two_stage_selfcheck
from sparseeval.estimate.methods.device import cpu_threads
from sparseeval.estimate.selfcheck import SelfCheck
from sparseeval.publish.champion import baseline_mae, decide, mean_guess_mae, refit_on_anchors
from sparseeval.publish.plots import (
    coverage_by_level,
    heldout_intervals,
    plot_coverage_by_level,
    plot_predicted_vs_true,
)
from sparseeval.publish.publishing import record_challenger
from sparseeval.publish.refresh import Check, fit_key
from sparseeval.publish.refresh_outcome import BenchmarkReport, Candidate, Log, Proposal, RefreshResult
from sparseeval.publish.refresh_steps import (
    CandidateSaver,
    Context,
    context,
    proposal_checks,
    record_proposal,
    resume_gate,
    run_refresh,
)
from sparseeval.publish.selfcheck_reuse import measured_or_stored, selfcheck_setup
from sparseeval.publish.tracking import TrackingConfig
from sparseeval.publish.tracking_runs import TrackedRun


def refresh_benchmark(matrix: ResponseMatrix, store: Store, tracking: TrackingConfig, predictor_dir: str | Path,
                      settings: RefreshSettings, *, log: Log | None = None, run_tags: Mapping[str, str] | None = None,
                      publish: bool = False, challenger: bool = True) -> RefreshResult:
    """Refresh one benchmark from its current ``matrix`` (see the module docstring), in two phases
    so that nothing delays the champion: (1) keep the champion's anchors and refit its predictor (the
    first refresh, or one whose settings changed the method, K or seed, selects anchors instead), decide
    with the publishing checks, record; with ``publish``, publish it; (2) with ``challenger`` (and once
    the refit is published), :func:`select_challenger`. Resume or skip when the fit key says so.
    ``run_tags`` go on every MLflow run (the pipeline's run id). The result is the first phase's, with
    the second's in ``second`` and its publications added."""
    ctx = context(store, tracking, predictor_dir, settings, log, run_tags)
    first = run_refresh(_Champion(matrix, store, settings), ctx, publish=publish)
    if not (challenger and publish and first.status == "decided" and first.passed):
        return first
    second = run_refresh(_Challenger(matrix, store, settings), ctx, publish=publish)
    return replace(first, second=second, published=first.published + second.published,
                   models_scored=first.models_scored + second.models_scored,
                   models_not_scored={**first.models_not_scored, **second.models_not_scored})


def select_challenger(matrix: ResponseMatrix, store: Store, tracking: TrackingConfig, predictor_dir: str | Path,
                      settings: RefreshSettings, *, log: Log | None = None, run_tags: Mapping[str, str] | None = None,
                      publish: bool = False) -> RefreshResult:
    """The second phase of a benchmark's refresh, once its refit champion is published: a fresh
    selection competes with it (:func:`sparseeval.publish.champion.decide`: clearly better, and the champion
    old enough) and, with its own publishing checks passed, replaces it or is published beside it as
    challenger. ``skipped`` when this fit key's champion is not a published refit, or when its
    challenger was decided already."""
    return run_refresh(_Challenger(matrix, store, settings), context(store, tracking, predictor_dir, settings, log,
                                                                     run_tags), publish=publish)


class _BenchmarkPhase:
    """What both phases of a benchmark's refresh share: its key, split, bar and candidate saver."""

    step = "candidate"

    def __init__(self, matrix: ResponseMatrix, store: Store, settings: RefreshSettings) -> None:
        self.matrix = matrix
        self.name = matrix.benchmark
        self.version = matrix.data_version or store.data_version(self.name)  # an old matrix file carries none
        self.k = min(settings.k, len(matrix.items))
        self.key = fit_key(self.version, settings.key_settings(FIT))
        self.settings = settings
        self.baseline: float | None = None
        self.selfcheck: SelfCheck | None = None

    def run_params(self) -> dict[str, Any]:
        s = self.settings
        return {"k": self.k, "method": s.method, "seed": s.seed, "split": s.split_policy, "alpha": s.alpha,
                "data_version": self.version, "fit_key": self.key,
                "threads": cpu_threads()}  # with the seed, what reproduces the fit

    def _prepare(self, ctx: Context, run: TrackedRun) -> CandidateSaver:
        matrix, s, db = self.matrix, self.settings, ctx.store
        run.log_matrix(matrix, source=db.path, digest=self.version)
        metadata = db.model_metadata()  # one read: the date split and every artifact's model list
        dates = model_dates(metadata, matrix.models) if s.split_policy == "date" else None
        self.split = split_for_seed(matrix, s.seed, ProtocolConfig.of(s), dates)
        return CandidateSaver(ctx, matrix, self.split, metadata, self.version, self.k)

    def _select(self, save: CandidateSaver, ctx: Context) -> Candidate:
        """The fresh selection (fitted, or reused), with the random-linear bar of the split."""
        matrix, s, split = self.matrix, self.settings, self.split
        fitted = save.obtain("selected", None, lambda: fit_on_split(matrix, split, s.method, self.k, s.seed,
                                                                    device=s.device))
        self._bars(save, ctx)
        return save.save("selected", *fitted)

    def _bars(self, save: CandidateSaver, ctx: Context) -> None:
        """The random-linear bar on the split and the frontier self-check (once: both candidates of a
        phase share them; the frontier figures once per fit key, as both phases measure the same method,
        K and seed on the same split's fitting models)."""
        s = self.settings
        if self.baseline is None:
            self.baseline = baseline_mae(self.matrix, self.split, self.k, s.seed, device=s.device)
        if self.selfcheck is None:
            probe = ProbeSettings.of(s)
            rows = np.concatenate([self.split.train, self.split.val])
            self.selfcheck = measured_or_stored(
                ctx.store, self.name, selfcheck_setup(s, s.method, self.k, **({} if probe is None else probe.setup())),
                len(self.matrix.models), self.version,
                lambda: SelfCheck.of_benchmark(self.name, two_stage_selfcheck(
                    self.matrix, rows, s.method, self.k, s.seed, quantile=s.frontier_quantile, alpha=s.alpha,
                    device=s.device, probe=probe)))
        save.baseline, save.selfcheck = self.baseline, self.selfcheck

    def _proposal(self, proposed: Candidate, challenger: Candidate | None, reason: str) -> Proposal:
        b = self.name
        assert proposed.selfcheck is not None and self.baseline is not None
        return Proposal(proposed=proposed, challenger=challenger, reason=reason, mae={b: proposed.mae},
                        baseline={b: self.baseline}, mean_guess={b: mean_guess_mae(self.matrix.scores, self.split)},
                        coverage={b: proposed.coverage}, items=proposed.items, expected_k=self.k,
                        known_items=set(self.matrix.items), frontier=proposed.selfcheck.gated())

    def report(self, ctx: Context, run: TrackedRun, proposal: Proposal) -> BenchmarkReport:
        matrix, s, split, proposed = self.matrix, self.settings, self.split, proposal.proposed
        assert proposed.selfcheck is not None and self.baseline is not None
        figures = proposed.selfcheck.figures
        cover = coverage_by_level(matrix, split, proposed.estimator, seed=s.seed)
        run.log_metrics({"test_mae": proposed.mae, "random_linear_mae": self.baseline, "coverage": proposed.coverage,
                         "selection_seconds": proposed.fit_seconds,
                         **{f"coverage/level_{lv:g}": v for lv, v in cover.items()},
                         **{f"frontier/{name}": v for name, v in figures.metrics().items()},
                         **{f"frontier/anchors_alone/{name}": v for name, v in figures.alone_metrics().items()}})
        with tempfile.TemporaryDirectory() as tmp:
            held = heldout_intervals(matrix, split, proposed.estimator, alpha=s.alpha, seed=s.seed)
            run.log_artifact(plot_predicted_vs_true(held, Path(tmp) / "predicted_vs_true.png",
                                                    title=f"{self.name}: held-out models"), "plots")
            run.log_artifact(plot_coverage_by_level(cover, Path(tmp) / "coverage_by_level.png", title=self.name,
                                                    n_models=len(split.test)), "plots")
        probe = ProbeSettings.of(s)
        return BenchmarkReport(
            k=self.k, method=s.method, origin=proposed.origin, anchors=tuple(proposed.items),
            test_mae_points=proposed.mae, random_linear_mae_points=self.baseline, coverage=proposed.coverage,
            selection_seconds=proposed.fit_seconds, train_models=len(split.train), test_models=len(split.test),
            reused_fits=tuple(c.origin for c in (proposal.proposed, proposal.challenger) if c and c.reused),
            selfcheck=proposed.selfcheck, probe_items=None if probe is None else probe.first)


class _Champion(_BenchmarkPhase):
    """Phase 1: the champion's anchors refit on the new data (or, without a champion of this setup,
    a fresh selection), decided and recorded alone, so it is published without waiting for a challenger."""

    def gate(self, ctx: Context) -> RefreshResult | None:
        return resume_gate(ctx, self.name, self.key, self.version)

    def fit(self, ctx: Context, run: TrackedRun) -> Proposal:
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

    def record(self, ctx: Context, proposal: Proposal, checks: list[Check]) -> str:
        return record_proposal(ctx, self.name, self.key, self.version, proposal, checks)


class _Challenger(_BenchmarkPhase):
    """Phase 2: a fresh selection against the refit champion this fit key published."""

    step = "challenger"

    def gate(self, ctx: Context) -> RefreshResult | None:
        rows = ctx.store.anchor_sets_of_fit_key(self.name, self.key)
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

    def fit(self, ctx: Context, run: TrackedRun) -> Proposal:
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

    def record(self, ctx: Context, proposal: Proposal, checks: list[Check]) -> str:
        if self.wins:  # proposed as the new champion (the refit is retired when it is published)
            return record_proposal(ctx, self.name, self.key, self.version, proposal, checks)
        return record_challenger(ctx.store, self.name, fit_key=self.key, data_version=self.version,
                                 challenger=proposal.proposed.row(), checks=checks)
