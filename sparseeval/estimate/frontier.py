"""Models beyond the training range: the guard that says so, and the figures that measure it.

A refresh exists to score *new* models, and new models are often stronger than every model a
predictor learned from. Split-conformal intervals only hold for models like the calibration models;
on a stronger one a predictor fitted on a score range cut at the top shrinks toward that top, and
its interval misses without a word. The guard makes that loud: each prediction carries the reasons,
in words, why it may lie outside what the training models cover:

* ``stronger than every training model``: the prediction is above the training models' best score;
* ``all anchors right: these anchors cannot tell how much stronger``: every anchor answered right, so
  the answers look like the best training models' whatever the model's real strength (flagged when
  that is rare among the training models, at most ``EDGE_STATE_MAX`` of them: anchors with headroom,
  :func:`sparseeval.estimate.methods.selection.break_ceiling`);
* ``at the top of the training range``: the prediction is above nearly all calibration models'
  (out-of-sample) predictions (all but :data:`sparseeval.estimate.calibration.EDGE_FRAC`), where a stronger
  model would look the same;
* the mirror images at the bottom (weaker than every training model, all anchors wrong; not "at the
  bottom": near-chance models crowd there, and flagging them would flag ordinary models), and the
  answer-pattern distance of :mod:`sparseeval.estimate.calibration` (anchor answers unlike the training models').

The guard's reference figures are computed from training and calibration models only, stored in the
calibration dict (plain JSON), and read back by every prediction path (``predict``, ``compare``,
``next``, the evaluation protocol), which all go through :func:`guarded_predictions`. Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from sparseeval.estimate import calibration as cal
from sparseeval.estimate.methods.base import AnchorEstimator

STRONGER = "stronger than every training model"
WEAKER = "weaker than every training model"
ALL_RIGHT = "all anchors right: these anchors cannot tell how much stronger"
ALL_WRONG = "all anchors wrong: these anchors cannot tell how much weaker"
AT_TOP = "at the top of the training range: a stronger model would look the same to these anchors"
UNLIKE = "anchor answers unlike the training models'"
#: "all anchors right" ("wrong") is flagged only when at most this share of the training models answered
#: so too: when the state is common among training models (a pool whose best models all solve it), the
#: conformal calibration covers it, and flagging it would flag ordinary models
EDGE_STATE_MAX = 0.05
#: reasons saying the model may be beyond the top (compare and next treat them as one-sided)
UPWARD = (STRONGER, ALL_RIGHT, AT_TOP)
DOWNWARD = (WEAKER, ALL_WRONG)
#: reasons that say the anchors cannot bound the score from above: the interval's upper side is opened to
#: the top of the scale. Not ``AT_TOP`` (a model inside the range at its edge keeps its conformal interval;
#: opening it cost 2-3 % of the in-distribution width for no frontier coverage), and not the downward
#: reasons (all-wrong models sit near chance, where the conformal lower side already holds)
OPEN_UPWARD = (STRONGER, ALL_RIGHT)
#: how a joint predictor's benchmark output says a reason is its mean output's (:func:`carry_overall`)
ON_THE_MEAN = "judged on the mean of its benchmarks"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def reasons(X: np.ndarray, pred: np.ndarray, d2: np.ndarray, ood: dict[str, Any],
            guard: dict[str, Any] | None) -> list[tuple[str, ...]]:
    """Why each row may lie outside what the training models cover (empty: nothing to say).

    ``X``: raw anchor answers (NaN = not answered); ``pred``: predictions; ``d2``: answer-pattern
    distances (:func:`sparseeval.estimate.calibration.ood_scores`) under ``ood``; ``guard``:
    :func:`sparseeval.estimate.calibrate.fit_guard` (None for predictors calibrated before it existed: the
    distance alone, as they were)."""
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    answered = ~np.isnan(X)
    some = answered.any(axis=1)
    all_right = np.all(~answered | (X >= 1.0), axis=1) & some
    all_wrong = np.all(~answered | (X <= 0.0), axis=1) & some
    out = []
    for i in range(X.shape[0]):
        why: list[str] = []
        if guard is not None:
            if pred[i] > guard["score_max"]:
                why.append(f"{STRONGER} (predicted {_pct(pred[i])} > best training score {_pct(guard['score_max'])})")
            elif pred[i] < guard["score_min"]:
                why.append(f"{WEAKER} (predicted {_pct(pred[i])} < weakest training score "
                           f"{_pct(guard['score_min'])})")
            if all_right[i] and guard["all_right_frac"] <= EDGE_STATE_MAX:
                seen = guard["all_right_max"]
                why.append(f"{ALL_RIGHT} ({_pct(guard['all_right_frac'])} % of the training models also answered "
                           "every anchor right" + (f", scoring up to {_pct(seen)})" if seen is not None else ")"))
            elif all_wrong[i] and guard["all_wrong_frac"] <= EDGE_STATE_MAX:
                seen = guard["all_wrong_min"]
                why.append(f"{ALL_WRONG} ({_pct(guard['all_wrong_frac'])} % of the training models also answered "
                           "every anchor wrong" + (f", scoring down to {_pct(seen)})" if seen is not None else ")"))
            elif guard["top_prediction"] < pred[i] <= guard["score_max"]:
                why.append(f"{AT_TOP} (predicted {_pct(pred[i])}, above {100 * (1 - guard['edge_frac']):g} % of "
                           "the calibration models' predictions)")
        if d2[i] > ood["threshold"]:
            why.append(f"{UNLIKE} (distance {d2[i]:.1f} > {ood['threshold']:.1f}, the {ood['percentile']:g}th "
                       "percentile of the calibration models')")
        out.append(tuple(why))
    return out


def ceiling_note(guard: dict[str, Any] | None) -> str | None:
    """What a person must know when "all anchors right" is too common among the training models to be
    flagged (more than :data:`EDGE_STATE_MAX` of them), else None.

    Why: then a model stronger than every training model that answers every anchor right gets the
    single prediction all such models get, at the top of the training range, with a conformal interval
    and no flag: the silent miss the guard exists to prevent (seen on real winogrande data, where the
    ceiling-breaking swaps ran out with 9.8 % of the training models still at the ceiling and 26 % of the
    stronger models were missed silently; docs/results/frontier.md, round 4). It is said at fit time,
    where choosing more anchors or a frontier evaluation can still fix it."""
    if not guard or guard.get("all_right_frac", 0.0) <= EDGE_STATE_MAX:
        return None
    top = guard.get("all_right_max")
    return (f"{_pct(guard['all_right_frac'])} % of the training models answer every anchor right"
            + (f" (scoring up to {_pct(top)})" if top is not None else "")
            + ": too common to flag, so a stronger model that does so is predicted at the top of the training "
            "range with no flag; more anchors (-k) give headroom, and `sparseeval evaluate --split frontier` "
            "measures the cost")


def direction(why: tuple[str, ...]) -> int:
    """+1 when a reason says the model may be stronger than the training range, -1 weaker, 0 neither."""
    if any(r.startswith(UPWARD) for r in why):
        return 1
    if any(r.startswith(DOWNWARD) for r in why):
        return -1
    return 0


@dataclass(frozen=True)
class Guarded:
    """Predictions of several models with their intervals and the guard's verdict."""

    pred: np.ndarray
    halfwidth: np.ndarray  #: conformal half-width (before clipping the interval to [0, 1])
    lower: np.ndarray
    upper: np.ndarray
    d2: np.ndarray  #: answer-pattern distance
    reasons: list[tuple[str, ...]]  #: per model; empty = nothing to flag

    @property
    def flagged(self) -> np.ndarray:
        return np.array([bool(r) for r in self.reasons], dtype=bool)


def guarded_predictions(est: AnchorEstimator, calibration: dict[str, Any], X: np.ndarray, *,
                        imputed: np.ndarray | None = None, d2: np.ndarray | None = None) -> Guarded:
    """Predictions, conformal intervals and flags for raw anchor answers ``X`` (NaN = not answered):
    gaps filled by conditional imputation, intervals calibrated for exactly what was answered.
    ``imputed``/``d2``: the imputed answers and distances when the caller has them (the outputs of a
    joint predictor share them)."""
    X = np.atleast_2d(np.asarray(X, dtype=np.float32))
    ood = calibration["ood"]
    d2 = cal.ood_scores(X, ood) if d2 is None else d2
    pred = cal.predict_calibrated(est, cal.conditional_impute(X, ood) if imputed is None else imputed, calibration)
    half = cal.halfwidths(est, pred, ~np.isnan(X), calibration)
    lower, upper = cal.interval(pred, half)
    why = reasons(X, pred, d2, ood, calibration.get("frontier"))
    return Guarded(pred, half, lower, open_upward(upper, why), d2, why)


def open_upward(upper: np.ndarray, why: list[tuple[str, ...]]) -> np.ndarray:
    """``upper`` with the rows whose reasons say the anchors cannot bound them from above
    (:data:`OPEN_UPWARD`) raised to the top of the scale (1.0).

    Why: a model that answers every anchor right, or is predicted above every training model, is at
    least as strong as its interval's lower side says, and the anchors say nothing about how much
    stronger. A conformal upper side there is a number the data never supported (on the shared data's
    strongest decile it missed 81-85 % of such models on mmlu and truthfulqa): the honest interval is
    one-sided, which is what ``predict`` then prints and ``compare`` already assumes
    (:func:`sparseeval.estimate.predicting.open_for_extrapolation`)."""
    opened = np.array([opens_upward(rs) for rs in why], dtype=bool)
    return np.where(opened, 1.0, np.asarray(upper, dtype=np.float64))


def carry_overall(outputs: dict[str, Guarded], overall: str) -> dict[str, Guarded]:
    """A joint predictor's guarded outputs with the ``overall`` (mean) output's upward reasons carried to
    every benchmark output whose own reasons do not already open its upper side (each carried reason
    ending ", judged on the mean of its benchmarks"; a kind the output states itself is not repeated),
    and the upper sides opened where those reasons open them (:func:`open_upward`).

    Why: a model stronger than every training model *on the mean* is an extrapolation on each of its
    benchmarks too, but a benchmark output on its own may not see it: the anchors predict that
    benchmark from the other benchmarks' strength as the training models showed it, so where the
    strongest models improved on one benchmark more than their others foretell (truthfulqa on the
    shared data; the synthetic leaderboard's), its prediction stays inside the training range, low,
    and unflagged. On the joint frontier self-check of the synthetic leaderboard, the truthfulqa output
    flagged none of the 48 stronger models and missed 31 % silently (docs/results/frontier.md, round 6).
    An output that says only "at the top of the training range" has seen the same thing less surely,
    and keeping its conformal upper side there left truthfulqa's coverage at .644 on the shared data's
    joint self-check, .868 with the mean's reason carried (round 7); in distribution no reason changed."""
    up = [tuple(r for r in why if r.startswith(UPWARD)) for why in outputs[overall].reasons]
    out = {}
    for name, g in outputs.items():
        if name == overall:
            out[name] = g
            continue
        why = [own if opens_upward(own) else own + tuple(f"{r}, {ON_THE_MEAN}" for r in carried
                                                         if not _states(own, r))
               for own, carried in zip(g.reasons, up, strict=True)]
        out[name] = replace(g, upper=open_upward(g.upper, why), reasons=why)
    return out


def opens_upward(why: tuple[str, ...]) -> bool:
    """Whether a model's reasons leave its interval without an upper side (:data:`OPEN_UPWARD`)."""
    return any(r.startswith(OPEN_UPWARD) for r in why)


def _states(why: tuple[str, ...], reason: str) -> bool:
    """Whether ``why`` already holds a reason of ``reason``'s kind (the same leading phrase)."""
    kind = next((k for k in UPWARD if reason.startswith(k)), reason)
    return any(r.startswith(kind) for r in why)


@dataclass(frozen=True)
class IntervalFigures:
    """How predictions with intervals and flags fared on models with known scores (points, fractions)."""

    mae: float
    bias: float  #: mean of predicted - true (negative: too low)
    coverage: float  #: share of models inside their interval
    halfwidth: float  #: mean half-width (points)
    flagged: float  #: share of models flagged
    silent_misses: float  #: share of models outside their interval and not flagged
    n: int

    def as_dict(self) -> dict[str, float | int]:
        return {"mae": self.mae, "bias": self.bias, "coverage": self.coverage, "halfwidth": self.halfwidth,
                "flagged": self.flagged, "silent_misses": self.silent_misses, "n": self.n}


def interval_figures(g: Guarded, truth: np.ndarray) -> IntervalFigures:
    """:class:`IntervalFigures` of ``g`` against the true scores ``truth``."""
    truth = np.asarray(truth, dtype=np.float64)
    err = g.pred - truth
    inside = (truth >= g.lower - 1e-9) & (truth <= g.upper + 1e-9)
    flagged = g.flagged
    return IntervalFigures(mae=float(np.mean(np.abs(err)) * 100), bias=float(np.mean(err) * 100),
                           coverage=float(inside.mean()), halfwidth=float(np.mean(g.upper - g.lower) * 50),
                           flagged=float(flagged.mean()), silent_misses=float((~inside & ~flagged).mean()),
                           n=int(truth.size))
