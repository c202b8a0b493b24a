"""Undo the pull toward the training range for predictions at its top (a tail-aware posterior).

Why: a regressor fitted on models up to some strength learns E[score | anchors] *under the training
models' distribution*, which has no mass above the strongest of them. A new model at or beyond that
top is therefore pulled down toward it: on the shared Open LLM Leaderboard data, trained on the
weakest 90 % and scored on the strongest 10 %, every estimator is too low on every benchmark
(docs/results/frontier.md). The pull is the prior's doing, not the anchors', so it is corrected where
it comes from:

* the calibration models (held out from fitting) give the prediction's error model,
  ``pred = a + b * score + N(0, sigma)`` (classical calibration: the prediction given the score);
* the training models' scores give the prior (a Gaussian kernel density on a grid);
* a second prior adds ``weight`` of mass spread evenly over ``(top, top + TAIL_SIGMAS * sigma]``,
  above the best training score: "a model being scored may lie a few prediction errors beyond
  every model seen" (``weight`` = how often that is expected; :data:`sparseeval.core.settings.FIXED`);
* a prediction moves up by the difference of the two posterior means. Inside the training range the
  two posteriors agree and the lift is ~0 (measured: in-distribution MAE of the default unchanged to
  0.01 point); at the top the tail lifts it by what the likelihood allows. Above the best training
  score the lift stays what it is there: the training prior has no mass above it, so the difference
  would keep growing with the prediction and double what an estimator that already extrapolates did.

Only estimators that shrink toward their training models are lifted (``lifted_at_top``: the regression
heads); a line on an item mean (``random``, ``anchor-points``) or an IRT ability already overshoots on the
strongest models of arc and hellaswag, and a lift made those worse (docs/results/frontier.md, round 3).

Everything stored is plain JSON (two short float lists and four numbers): scoring with a saved
predictor needs NumPy only, and an artifact without it (older ones) predicts exactly as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: points of the score grid the posteriors are computed on (scores live in [0, 1])
GRID_POINTS = 501
#: how far above the best training score the tail reaches, in prediction errors (sigma)
TAIL_SIGMAS = 4.0
#: fewest calibration and training models the error model and the prior are fitted from
MIN_MODELS = 20


def fit_beyond(pred_cal: np.ndarray, s_cal: np.ndarray, s_train: np.ndarray, weight: float) -> dict[str, Any]:
    """The stored correction: error model from calibration predictions ``pred_cal`` and their true
    scores ``s_cal``, prior from the training scores ``s_train``, tail mass ``weight``.

    Returns ``{}`` (no correction) when ``weight`` is 0, when there are too few models to fit it, or
    when the predictions do not rise with the score (``b <= 0``: no error model to invert).
    """
    pred_cal = np.asarray(pred_cal, dtype=np.float64)
    s_cal = np.asarray(s_cal, dtype=np.float64)
    s_train = np.asarray(s_train, dtype=np.float64)
    if weight <= 0 or s_cal.size < MIN_MODELS or s_train.size < MIN_MODELS or np.ptp(s_train) <= 0:
        return {}
    b, a = np.polyfit(s_cal, pred_cal, 1)
    sigma = float(np.std(pred_cal - (a + b * s_cal)))
    if b <= 0 or sigma <= 0:
        return {}
    from scipy.stats import gaussian_kde  # fit time only: scoring reads the stored grid

    grid = np.linspace(0.0, 1.0, GRID_POINTS)
    density = gaussian_kde(s_train)(grid)
    return {"a": float(a), "b": float(b), "sigma": sigma, "top": float(s_train.max()), "weight": float(weight),
            "prior": (density / density.sum()).tolist()}


def _posterior_means(pred: np.ndarray, beyond: dict[str, Any], prior: np.ndarray) -> np.ndarray:
    grid = np.linspace(0.0, 1.0, prior.size)
    loglik = -0.5 * ((pred[:, None] - (beyond["a"] + beyond["b"] * grid[None, :])) / beyond["sigma"]) ** 2
    w = np.exp(loglik - loglik.max(axis=1, keepdims=True)) * prior[None, :]
    return (w * grid).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-300)


def shift(pred: np.ndarray, beyond: dict[str, Any] | None) -> np.ndarray:
    """``pred`` moved by E[score | pred] under the prior with the tail minus the same without it,
    clipped to [0, 1]; unchanged when ``beyond`` is empty or absent."""
    pred = np.asarray(pred, dtype=np.float64)
    if not beyond:
        return pred
    prior = np.asarray(beyond["prior"], dtype=np.float64)
    grid = np.linspace(0.0, 1.0, prior.size)
    tail = (grid > beyond["top"]) & (grid <= beyond["top"] + TAIL_SIGMAS * beyond["sigma"])
    if not tail.any():  # the best training model is at the top of the scale: nothing lies beyond
        return pred
    with_tail = (1.0 - beyond["weight"]) * prior + beyond["weight"] * tail / tail.sum()
    flat = pred.ravel()
    # beyond the best training score the lift stays what it is there: the training prior has no mass
    # above it, so the difference of the two posteriors would keep growing with the prediction and
    # double what a regressor that already extrapolates there did on its own
    at = np.minimum(flat, beyond["top"])
    lift = np.maximum(_posterior_means(at, beyond, with_tail) - _posterior_means(at, beyond, prior), 0.0)
    return np.clip(flat + lift, 0.0, 1.0).reshape(pred.shape)
