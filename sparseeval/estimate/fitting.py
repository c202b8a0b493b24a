"""Fit and calibrate predictors: ``sparseeval fit``'s library side and the refresh's.

A benchmark's predictor is fitted on one seeded split of the models (the fitting side for the estimator,
a held-out calibration share for its intervals and guard), then given its adaptive order, its probe plan
(:mod:`sparseeval.estimate.probe_fit`) and, on request, the frontier self-check of the two stages together
(:func:`two_stage_selfcheck`). Fit time only (torch, SciPy): scoring is :mod:`sparseeval.estimate.predicting`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from sparseeval.core import __version__
from sparseeval.core import settings as defaults
from sparseeval.core.errors import UsageError
from sparseeval.data.matrix import ResponseMatrix, build_matrix
from sparseeval.estimate import calibrate
from sparseeval.estimate.adaptive import adaptive_info
from sparseeval.estimate.artifact import PredictorArtifact, build_anchors, harness_location
from sparseeval.estimate.evaluation import (
    fit_on_split,
    joint_frontier_selfcheck,
    joint_own_cut_selfcheck,
    too_few_beyond,
)
from sparseeval.estimate.joint_fit import fit_joint, joint_calibration
from sparseeval.estimate.methods.base import AnchorEstimator
from sparseeval.estimate.methods.joint import JOINT_METHOD, MEAN, JointData, JointSparseEval, joint_data
from sparseeval.estimate.predicting import (
    _predict_matrix,
    first_stage,
    follow_probe,
    output_calibration,
    prediction_figures,
    short_rows,
)
from sparseeval.estimate.probe import KIND, plan_of
from sparseeval.estimate.probe_fit import fit_plan
from sparseeval.estimate.selfcheck import CutFigures, SelfCheck
from sparseeval.estimate.splits import Split, frontier_cut, make_split

#: fraction of the fitting models the estimator may use for early stopping (never calibration)
VAL_FRAC = defaults.DEFAULT_VAL_FRAC


@dataclass(frozen=True)
class ProbeSettings:
    """How a predictor's probe asks: its first batch, the batch after it, the cap, the target sampling
    half-width (score units) and the quantile of the calibration models' predictions from which a model is
    asked. Declared once as ``probe_*`` in :class:`sparseeval.core.settings.RefreshSettings`
    (:meth:`of` reads them)."""

    first: int = defaults.SETTINGS["probe_items"].default_value
    batch: int = defaults.SETTINGS["probe_batch"].default_value
    max_items: int = defaults.SETTINGS["probe_max"].default_value
    target: float = defaults.SETTINGS["probe_target"].default_value / 100
    level_quantile: float = defaults.SETTINGS["probe_from"].default_value
    #: a subset pool's link adds a ridge of the score's rest on the anchors (an experiment of the benches)
    anchor_head: bool = False

    @classmethod
    def of(cls, s: defaults.RefreshSettings) -> ProbeSettings | None:
        """The probe ``s`` asks for (None: ``probe_items`` is 0, no probe)."""
        if not s.probe_items:
            return None
        return cls(first=s.probe_items, batch=s.probe_batch, max_items=s.probe_max, target=s.probe_target / 100,
                   level_quantile=s.probe_from)

    def setup(self) -> dict[str, Any]:
        """The probe as its self-check's setup records it (the figures of another setup are never reused; the
        spelling is the published predictors', so their content hashes stay what they were)."""
        return {"probe_items": self.first, "probe_batch": self.batch, "probe_max": self.max_items,
                "probe_target": self.target, "probe_from": self.level_quantile}


def _train_summary(models: list[str], scores: np.ndarray, dates: pl.DataFrame | None) -> dict[str, Any]:
    summary: dict[str, Any] = {"count": len(models), "score_min": float(np.min(scores)),
                               "score_max": float(np.max(scores)), "score_mean": float(np.mean(scores))}
    if dates is not None and dates.height:
        got = dates.filter(pl.col("model").is_in(models)).get_column("submitted_at").drop_nulls()
        if got.len():
            summary["date_min"] = str(got.min())
            summary["date_max"] = str(got.max())
    return summary


def fit_predictor(responses: pl.DataFrame, scores: pl.DataFrame | None, benchmark: str, k: int,
                  method: str, *, calibration_frac: float = defaults.DEFAULT_CALIBRATION_FRAC,
                  seed: int = defaults.DEFAULT_SEED, device: str = defaults.DEFAULT_DEVICE,
                  alpha: float = defaults.DEFAULT_ALPHA, models: pl.DataFrame | None = None,
                  method_params: dict[str, Any] | None = None, row_mean_is_score: bool = False,
                  settings: dict[str, Any] | None = None, frontier_quantile: float | None = None,
                  probe: ProbeSettings | None = None) -> PredictorArtifact:
    """Fit ``method`` with ``k`` anchors on ``benchmark`` and calibrate it; return an unsaved artifact.

    Models are split once with ``seed``: ``calibration_frac`` held out for conformal calibration
    and the OOD threshold (never seen by the estimator), 10 % of the rest for the estimator's own
    validation (early stopping), the remainder for fitting. ``models`` (optional metadata with
    ``submitted_at``) adds the training date range to the artifact. ``probe``: also fit the second
    stage's plan (:mod:`sparseeval.estimate.probe`); where it cannot be fitted the predictor has none and
    ``extra["probe_note"]`` says why. ``frontier_quantile``: also run the frontier self-check the
    pipeline gates on (:func:`two_stage_selfcheck`, on the fitting models, cut at that quantile) and
    publish its figures with the predictor.
    """
    if not 0.0 < calibration_frac < 0.9:
        raise UsageError(f"calibration_frac must be in (0, 0.9), got {calibration_frac}")
    matrix = build_matrix(responses, scores, benchmark, row_mean_is_score=row_mean_is_score)
    art, split = fit_matrix(matrix, k, method, calibration_frac=calibration_frac, seed=seed, device=device,
                            alpha=alpha, models=models, method_params=method_params, settings=settings, probe=probe)
    if frontier_quantile is not None:
        fitting = np.concatenate([split.train, split.val])
        measured = two_stage_selfcheck(matrix, fitting, method, k, seed, quantile=frontier_quantile, alpha=alpha,
                                       calibration_frac=calibration_frac, device=device, params=method_params,
                                       probe=probe)
        art.extra["frontier"] = holding_for(art, SelfCheck.of_benchmark(benchmark, measured), probe).to_json()
    return art


def fit_matrix(matrix: ResponseMatrix, k: int, method: str, *, calibration_frac: float, seed: int, device: str,
               alpha: float, models: pl.DataFrame | None = None, method_params: dict[str, Any] | None = None,
               settings: dict[str, Any] | None = None,
               probe: ProbeSettings | None = None) -> tuple[PredictorArtifact, Split]:
    """:func:`fit_predictor` on a built matrix (no self-check): the artifact and the split it used."""
    split = make_split(matrix.models, policy="random", val_frac=VAL_FRAC * (1 - calibration_frac),
                       test_frac=calibration_frac, seed=seed)
    est = fit_on_split(matrix, split, method, k, seed, device=device, params=method_params)
    art = artifact_from_fit(matrix, split, est, alpha=alpha, seed=seed, models=models, settings=settings)
    attach_probe(art, matrix, split, probe, seed=seed, alpha=alpha)
    return art, split


def attach_probe(art: PredictorArtifact, matrix: ResponseMatrix, split: Split, probe: ProbeSettings | None, *,
                 seed: int, alpha: float) -> None:
    """Fit the probe plan onto a fitted single-benchmark predictor (``extra["probe"]``), or, where it cannot
    be fitted, say why in ``extra["probe_note"]`` (the predictor then predicts from its anchors alone)."""
    if probe is None:
        return
    try:
        art.extra["probe"] = probe_plan(art, matrix, split, probe, seed=seed, alpha=alpha)
    except UsageError as exc:
        art.extra["probe_note"] = f"fitted without a probe: {exc}"


def holding_for(art: PredictorArtifact, selfcheck: SelfCheck, probe: ProbeSettings | None) -> SelfCheck:
    """The self-check figures that hold for ``art`` as saved, on every path (``fit``, the refresh): the two
    stages' when it carries the probe plan it was asked for (or none was asked), else the anchors-alone figures
    of the same fit with why it has no probe; a predictor is never gated on, nor published with, the figures of
    a probe it does not carry."""
    if probe is None or plan_of(art.extra) is not None:
        return selfcheck
    return selfcheck.without_probe(str(art.extra.get("probe_note", "fitted without a probe")))


def probe_plan(art: PredictorArtifact, matrix: ResponseMatrix, split: Split, probe: ProbeSettings, *, seed: int,
               alpha: float) -> dict[str, Any]:
    """The probe plan of a fitted single-benchmark predictor (:func:`sparseeval.estimate.probe_fit.fit_plan`): its pass
    rates and line on the fitting models (``split.train`` + ``split.val``), its level and the line's error on
    the calibration models (``split.test``), whose anchor predictions come through the path ``predict``
    takes (guard, lift), so the level measures what a new model's prediction does."""
    assert art.estimator.anchors_ is not None
    fit_rows = np.concatenate([split.train, split.val])
    X_cal = matrix.with_nan_at(split.test, art.estimator.anchors_)
    enough = np.setdiff1d(np.arange(split.test.size), short_rows(art, X_cal))  # those predict would score
    cal_rows = split.test[enough]
    pred_cal = first_stage(art, X_cal[enough])[art.benchmark].pred
    plan = fit_plan(items=matrix.items, locations=[harness_location(matrix.benchmark, i) for i in matrix.items],
                    values=matrix.values[fit_rows], observed=matrix.observed[fit_rows],
                    scores=matrix.scores[fit_rows].astype(np.float64), anchor_columns=art.estimator.anchors_,
                    cal_values=matrix.values[cal_rows], cal_observed=matrix.observed[cal_rows],
                    cal_scores=matrix.scores[cal_rows].astype(np.float64), pred_cal=pred_cal, alpha=alpha,
                    salt=f"{matrix.benchmark}/{seed}", level_quantile=probe.level_quantile, first=probe.first,
                    batch=probe.batch, max_items=probe.max_items, target=probe.target, anchor_head=probe.anchor_head)
    return plan.as_json()


def two_stage_selfcheck(matrix: ResponseMatrix, rows: np.ndarray, method: str, k: int, seed: int, *,
                        quantile: float, alpha: float, calibration_frac: float = defaults.DEFAULT_CALIBRATION_FRAC,
                        device: str = defaults.DEFAULT_DEVICE, params: dict[str, Any] | None = None,
                        probe: ProbeSettings | None = None) -> CutFigures:
    """How the predictor fares on models stronger than every model it learned from, as a user gets it:
    fitted (anchors, calibration, probe plan) as ``fit`` fits it, on the fitting models ``rows`` at or below
    their ``quantile`` quantile of the score, and the stronger rest predicted by ``predict``, each model the
    anchors place at the top answering its probe batch by batch as ``next`` asks (:func:`follow_probe`).
    The candidate's held-out models are never touched, so the figures gate publication without leaking them.

    Returns the figures (:class:`~sparseeval.estimate.selfcheck.CutFigures`): the two stages', with
    ``anchors_alone`` the same predictor's on the same models from their anchors only. With fewer than
    ``MIN_FRONTIER_MODELS`` stronger models not measured, with a note; where the inner predictor could fit no
    probe, the anchors-alone figures with ``probe_note`` saying why."""
    sub = matrix.take_models(np.asarray(rows, dtype=np.int64))
    cut, beyond = frontier_cut(sub.scores, quantile)
    if (unmeasured := too_few_beyond(beyond, quantile, "")) is not None:
        return unmeasured
    split = make_split(sub.models, policy="frontier", val_frac=0.0, seed=seed, scores=sub.scores,
                       frontier_quantile=quantile)
    inner, _ = fit_matrix(sub.take_models(split.train), k, method, calibration_frac=calibration_frac, seed=seed,
                          device=device, alpha=alpha, method_params=params, probe=probe)
    assert inner.estimator.anchors_ is not None
    stronger = split.test
    names, truth = [sub.models[i] for i in stronger], sub.scores[stronger].astype(np.float64)
    X = sub.with_nan_at(stronger, inner.estimator.anchors_)
    alone = prediction_figures(_predict_matrix(inner, names, X), truth)
    cut_at = {"n_train": int(split.train.size), "quantile": quantile, "cut_score": float(cut), "method": method,
              "k": k}
    plan = plan_of(inner.extra)
    if plan is None:
        note = inner.extra.get("probe_note")
        return CutFigures.measured_as(alone, **cut_at, probe_note=str(note) if note else None)
    column = {item: j for j, item in enumerate(sub.items)}
    pool = sub.with_nan_at(stronger, np.array([column[i] for i in plan.items]))
    both = prediction_figures(follow_probe(inner, names, X, pool), truth)
    return CutFigures.measured_as(both, **cut_at, probe_items=plan.first, probe_target=plan.target,
                                  anchors_alone=alone)


def artifact_from_fit(matrix: ResponseMatrix, split: Split, est: AnchorEstimator, *,
                      alpha: float = defaults.DEFAULT_ALPHA, seed: int = defaults.DEFAULT_SEED,
                      models: pl.DataFrame | None = None,
                      settings: dict[str, Any] | None = None,
                      frontier: SelfCheck | None = None) -> PredictorArtifact:
    """Calibrate an estimator fitted on ``split.train`` (+ ``split.val``) on the held-out
    ``split.test`` models and wrap it as an unsaved artifact.

    ``settings``: the evaluation settings of the training data (n-shot, metric, filter, harness;
    :meth:`sparseeval.data.store.Store.training_settings`), recorded in ``predictor.json`` so a user
    runs the anchors the same way (``export``) and ``predict`` can refuse answers run otherwise.

    The pipeline fits anchors once per benchmark and publishes that same estimator, so the test
    models of its split are the conformal calibration set: the estimator never saw them.
    ``frontier``: the frontier self-check's figures (:func:`two_stage_selfcheck`), published with the
    predictor so its users see how it fares on models stronger than its training models.
    """
    assert est.anchors_ is not None
    X_train = matrix.with_nan_at(split.train, est.anchors_)  # the anchor columns only: no copy of the matrix
    s = matrix.scores.astype(np.float32)
    fit_rows = np.concatenate([split.train, split.val])
    calibration = calibrate.calibrate(est, matrix.with_nan_at(split.test, est.anchors_), s[split.test], X_train,
                                alpha=alpha, seed=seed, s_train=s[split.train])
    calibration["split_seed"] = seed
    train_models = _train_summary([matrix.models[i] for i in fit_rows], s[fit_rows], models)
    extra: dict[str, Any] = {"settings": settings} if settings else {}
    if frontier is not None:
        extra["frontier"] = frontier.to_json()
    # the order to ask the anchors in (training models only) and the conformal quantile per prefix
    extra["adaptive"] = adaptive_info(est, X_train, s[split.train], calibration)
    return PredictorArtifact(estimator=est, benchmark=matrix.benchmark, item_ids=matrix.items,
                             anchors=build_anchors(est, matrix.benchmark, matrix.items),
                             calibration=calibration, train_models=train_models,
                             library_version=__version__, extra=extra)


def has_probe(art: PredictorArtifact) -> bool:
    """Whether a predictor carries a design-based probe plan."""
    return (art.extra.get("probe") or {}).get("kind") == KIND


# ------------------------------------------------------------------------------------------------
# Joint predictors (sparseeval-joint): several benchmarks, one anchor set
# ------------------------------------------------------------------------------------------------
def joint_artifact_from_fit(data: JointData, split: Split, est: JointSparseEval, *,
                            alpha: float = defaults.DEFAULT_ALPHA, seed: int = defaults.DEFAULT_SEED,
                            models: pl.DataFrame | None = None,
                            settings: dict[str, dict[str, Any]] | None = None,
                            frontier: SelfCheck | None = None) -> PredictorArtifact:
    """Calibrate a joint estimator fitted on ``split.train`` (+ ``split.val``) on the held-out
    ``split.test`` models, per output (every benchmark and the mean), and wrap it as an unsaved
    artifact whose benchmark is ``sparseeval-joint``. ``settings``: per benchmark, as for
    :func:`artifact_from_fit`; ``frontier``: the joint frontier self-check, per output under
    ``outputs`` (:func:`sparseeval.estimate.evaluation.joint_frontier_selfcheck`), published with it.

    Calibrated by :func:`sparseeval.estimate.joint_fit.joint_calibration`; the artifact adds what the fitting models
    were and the anchors' order for ``next``."""
    assert est.anchors_ is not None
    calibration = joint_calibration(data, split, est, alpha=alpha, seed=seed)
    Y = data.Y
    S = np.concatenate([data.S, data.S.mean(axis=1, keepdims=True)], axis=1).astype(np.float64)
    X_train = Y[split.train][:, est.anchors_]
    fit_rows = np.concatenate([split.train, split.val])
    fit_models = [data.models[i] for i in fit_rows]
    train_models = _train_summary(fit_models, S[fit_rows, -1], models)
    train_models["score_range"] = {name: [float(S[fit_rows, o].min()), float(S[fit_rows, o].max())]
                                   for o, name in enumerate([*data.benchmarks, MEAN])}
    order = adaptive_info(est.output(MEAN), X_train, data.S[split.train], output_calibration(calibration, MEAN),
                          weights=est.weights_)
    order["q_by_prefix"] = {MEAN: order["q_by_prefix"]}
    extra: dict[str, Any] = {"joint": {"benchmarks": list(data.benchmarks),
                                       "allocation": est.allocation()},
                             "adaptive": order | {"target_output": MEAN}}
    if settings:
        extra["settings"] = settings
    if frontier is not None:
        extra["frontier"] = frontier.to_json()
    return PredictorArtifact(estimator=est, benchmark=JOINT_METHOD, item_ids=list(data.columns),
                             anchors=build_anchors(est, JOINT_METHOD, list(data.columns)),
                             calibration=calibration, train_models=train_models,
                             library_version=__version__, extra=extra)


def fit_joint_predictor(responses: pl.DataFrame, scores: pl.DataFrame | None, benchmarks: list[str], k: int, *,
                        calibration_frac: float = defaults.DEFAULT_CALIBRATION_FRAC, seed: int = defaults.DEFAULT_SEED,
                        device: str = defaults.DEFAULT_DEVICE, alpha: float = defaults.DEFAULT_ALPHA,
                        models: pl.DataFrame | None = None, method_params: dict[str, Any] | None = None,
                        row_mean_is_score: bool = False, settings: dict[str, dict[str, Any]] | None = None,
                        frontier_quantile: float | None = None) -> PredictorArtifact:
    """Fit and calibrate a ``sparseeval-joint`` predictor with ``k`` items per benchmark on the models
    that have every one of ``benchmarks`` (split as in :func:`fit_predictor`); an unsaved artifact.
    ``frontier_quantile``: also run both frontier self-checks the pipeline gates on (the cut on the mean
    score and each benchmark's own) on the fitting models, published with the predictor."""
    if not 0.0 < calibration_frac < 0.9:
        raise UsageError(f"calibration_frac must be in (0, 0.9), got {calibration_frac}")
    data = joint_data([build_matrix(responses, scores, b, row_mean_is_score=row_mean_is_score)
                       for b in benchmarks])
    split = make_split(data.models, policy="random", val_frac=VAL_FRAC * (1 - calibration_frac),
                       test_frac=calibration_frac, seed=seed)
    est = fit_joint(data, split, k, seed, device=device, method_params=method_params)
    frontier = None
    if frontier_quantile is not None:
        rows = np.concatenate([split.train, split.val])
        cut = {"quantile": frontier_quantile, "alpha": alpha, "device": device, "params": method_params}
        frontier = SelfCheck(joint_frontier_selfcheck(data, rows, k, seed, **cut), joint=True,
                             own_cut=joint_own_cut_selfcheck(data, rows, k, seed, **cut))
    return joint_artifact_from_fit(data, split, est, alpha=alpha, seed=seed, models=models, settings=settings,
                                   frontier=frontier)
