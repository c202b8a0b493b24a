"""Split-conformal prediction intervals and an out-of-distribution score for anchor predictors.

Why split-conformal: the estimators are point predictors of very different kinds (linear, MLP,
IRT); conformal calibration on models *held out from fitting* gives every one of them intervals
with a finite-sample coverage guarantee (for exchangeable new models) without assuming anything
about its errors. Why recalibrate for missing anchors: a model that skipped some anchors is predicted
from the rest (the estimator imputes the training mean), which is less accurate; hiding the same
anchors from the calibration models (kept in the artifact) and taking their conformal quantile
widens its interval by exactly what the data say. A per-missing-count table from random masks is
stored too (fallback, and the paired intervals of ``compare``).
Why an OOD score: the guarantee only holds for models like the calibration models; a new model
whose anchor answers look unlike any training model's (Mahalanobis distance under a Ledoit-Wolf
covariance, robust for binary answers and small samples) gets flagged instead of trusted.

Everything returned here is a plain JSON-able dict so the artifact can store and hash it.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np

from sparseeval.estimate.beyond import shift
from sparseeval.estimate.methods.base import AnchorEstimator

#: floor of the binomial scale sqrt(p (1 - p) + SCALE_FLOOR), so scores near 0 or 1 keep a width
SCALE_FLOOR = 0.0025
#: fraction of calibration models whose prediction may sit above the "top of the training range"
#: threshold of the extrapolation guard: the share of ordinary models that reason flags
EDGE_FRAC = 0.02


def conformal_quantile(scores: np.ndarray, alpha: float) -> float:
    """The split-conformal quantile: the ceil((n + 1)(1 - alpha))-th smallest of ``scores``.

    With fewer than ``1/alpha - 1`` calibration scores no finite quantile has the guarantee;
    the largest score is returned then (the caller refuses such small calibration sets).
    """
    s = np.sort(np.asarray(scores, dtype=np.float64).ravel())
    if s.size == 0:
        raise ValueError("conformal_quantile needs at least one calibration score")
    rank = math.ceil((s.size + 1) * (1.0 - alpha))
    return float(s[min(rank, s.size) - 1])


def min_calibration_models(alpha: float) -> int:
    """Smallest calibration set whose conformal quantile is finite at level ``alpha``."""
    return math.ceil(1.0 / alpha) - 1


def scale_of(pred: np.ndarray, mode: str) -> np.ndarray:
    """Difficulty scale of normalized conformal: binomial spread of the predicted score, or 1.

    A model predicted near 0 % or 100 % has little room to be wrong (most of its anchors agree),
    one near 50 % has the most; ``binomial`` encodes exactly that and costs no extra fitting.
    """
    pred = np.asarray(pred, dtype=np.float64)
    if mode == "none":
        return np.ones_like(pred)
    if mode == "binomial":
        return np.sqrt(pred * (1.0 - pred) + SCALE_FLOOR)
    raise ValueError(f"unknown conformal scale mode {mode!r}")


def ood_scores(X: np.ndarray, ood: dict[str, Any]) -> np.ndarray:
    """Squared Mahalanobis distance of each row's answered anchors, rescaled to all ``k`` anchors.

    Unanswered anchors are left out (marginal covariance of the answered ones) and the distance is
    scaled by k / answered, so a model is not made to look typical by skipping items.
    """
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    mu = np.asarray(ood["location"], dtype=np.float64)
    cov = np.asarray(ood["covariance"], dtype=np.float64)
    k = mu.size
    out = np.full(X.shape[0], np.nan)
    observed = ~np.isnan(X)
    patterns, inverse = np.unique(observed, axis=0, return_inverse=True)
    for p, pattern in enumerate(patterns):
        rows = np.flatnonzero(inverse.ravel() == p)
        if not pattern.any():
            continue
        d = X[np.ix_(rows, pattern)] - mu[pattern]
        # Ledoit-Wolf shrinkage keeps the covariance positive definite: a solve is enough (and an
        # SVD-based pseudo-inverse is ~1000x slower on small matrices with threaded BLAS)
        sol = np.linalg.solve(cov[np.ix_(pattern, pattern)], d.T)
        out[rows] = np.einsum("ij,ji->i", d, sol) * k / pattern.sum()
    return out


def conditional_impute(X: np.ndarray, ood: dict[str, Any]) -> np.ndarray:
    """Fill unanswered anchors with their expectation given the answered ones (Gaussian, LW covariance).

    The estimators fill a gap with the anchor's training mean, which ignores that a model strong
    on the answered anchors is likely strong on the missing ones; the conditional mean
    ``mu_m + S_mo S_oo^-1 (x_o - mu_o)`` (clipped to [0, 1]) uses that, and narrows the intervals.

    One linear solve per distinct answered pattern; patterns with the same number of answers are
    solved together as one stacked ``numpy.linalg.solve`` (calibration masks thousands of rows at
    random, each its own pattern: one call per pattern was most of a joint predictor's fit time).
    """
    X = np.atleast_2d(np.asarray(X, dtype=np.float64)).copy()
    mu = np.asarray(ood["location"], dtype=np.float64)
    cov = np.asarray(ood["covariance"], dtype=np.float64)
    observed = ~np.isnan(X)
    patterns, inverse = np.unique(observed, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    n_obs = patterns.sum(axis=1)
    precision = np.linalg.inv(cov) if (n_obs > X.shape[1] // 2).any() else cov
    for o in np.unique(n_obs):
        group = np.flatnonzero(n_obs == o)
        if o == X.shape[1]:
            continue
        if o == 0:
            rows = np.isin(inverse, group)
            X[rows] = mu
            continue
        for start in range(0, len(group), IMPUTE_BATCH):
            _impute_group(X, mu, cov, patterns, inverse, group[start:start + IMPUTE_BATCH], precision)
    return X.astype(np.float32)


#: patterns solved per stacked call (each an o x o system: memory ~ batch x k^2 x 8 bytes)
IMPUTE_BATCH = 256


def _impute_group(X: np.ndarray, mu: np.ndarray, cov: np.ndarray, patterns: np.ndarray, inverse: np.ndarray,
                  group: np.ndarray, precision: np.ndarray) -> None:
    """Conditional means, in place, for the rows of ``group``'s patterns (all with the same answer count).

    The same conditional mean two ways, whichever solves the smaller systems: with few answers
    ``S_mo S_oo^-1`` (o x o), with few gaps ``-L_mm^-1 L_mo`` from the precision ``L = S^-1`` (m x m)."""
    obs = np.stack([np.flatnonzero(patterns[g]) for g in group])  # (P, o)
    mis = np.stack([np.flatnonzero(~patterns[g]) for g in group])  # (P, m)
    if obs.shape[1] <= mis.shape[1]:
        coef = np.linalg.solve(cov[obs[:, :, None], obs[:, None, :]], cov[obs[:, :, None], mis[:, None, :]])
    else:  # (P, o, m) either way
        coef = -np.linalg.solve(precision[mis[:, :, None], mis[:, None, :]],
                                precision[mis[:, :, None], obs[:, None, :]]).transpose(0, 2, 1)
    slot = np.full(patterns.shape[0], -1)
    slot[group] = np.arange(len(group))
    rows = np.flatnonzero(slot[inverse] >= 0)
    which = slot[inverse[rows]]
    d = X[rows[:, None], obs[which]] - mu[obs[which]]  # (R, o)
    filled = mu[mis[which]] + np.einsum("ro,rom->rm", d, coef[which])
    X[rows[:, None], mis[which]] = np.clip(filled, 0.0, 1.0)


def imputer(ood: dict[str, Any], cache: dict[bytes, np.ndarray] | None):
    """``conditional_impute`` under ``ood``, memoised in ``cache`` (keyed by the rows' bytes) when given:
    the outputs of a joint predictor share anchors, masks and imputations, so they impute once."""
    def impute_rows(X: np.ndarray) -> np.ndarray:
        if cache is None:
            return conditional_impute(X, ood)
        key = hashlib.sha1(np.ascontiguousarray(X, dtype=np.float32).tobytes()).digest()
        if key not in cache:
            cache[key] = conditional_impute(X, ood)
        return cache[key]
    return impute_rows


def predict_calibrated(estimator: AnchorEstimator, X_imputed: np.ndarray, calibration: dict[str, Any]) -> np.ndarray:
    """``estimator``'s predictions for gap-free anchor answers, as a calibrated predictor makes them:
    moved by the calibration's tail-aware correction where it has one (:func:`sparseeval.estimate.beyond.shift`;
    predictors calibrated before it existed predict as they did). The mean output of a joint predictor
    averages its benchmarks' predictions each moved by its own correction (``beyond_outputs``), so it
    stays their mean."""
    outputs = calibration.get("beyond_outputs")
    if outputs is not None:
        parts = estimator.benchmark_predictions(X_imputed)  # type: ignore[attr-defined]  # a joint mean output
        return np.mean([shift(parts[:, j], b) for j, b in enumerate(outputs)], axis=0)
    return shift(estimator.predict(X_imputed), calibration.get("beyond"))


def halfwidths(estimator: AnchorEstimator, pred: np.ndarray, observed: np.ndarray,
               calibration: dict[str, Any]) -> np.ndarray:
    """Interval half-widths for predictions ``pred`` made from the anchors marked in ``observed``.

    Complete rows use the stored conformal quantile. A row with missing anchors is calibrated
    *exactly* for its pattern: the same anchors are hidden from the stored calibration models,
    which are predicted again, and their quantile is used (never below the complete-answers one).
    A per-missing-count table from random masks is the fallback for artifacts without them.
    """
    pred = np.asarray(pred, dtype=np.float64)
    observed = np.asarray(observed, dtype=bool)
    mode, alpha = calibration["mode"], calibration["alpha"]
    table = np.asarray(calibration["q_by_missing"], dtype=np.float64)
    n_missing = (~observed).sum(axis=1)
    q = table[np.minimum(n_missing, table.size - 1)]
    if "cal_answers" in calibration and (n_missing > 0).any():
        X_cal = np.array([[np.nan if v is None else v for v in row] for row in calibration["cal_answers"]],
                         dtype=np.float32)
        s_cal = np.asarray(calibration["cal_scores"], dtype=np.float64)
        patterns, inverse = np.unique(observed, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        for p, pattern in enumerate(patterns):
            if pattern.all():
                continue
            masked = X_cal.copy()
            masked[:, ~pattern] = np.nan
            p_cal = predict_calibrated(estimator, conditional_impute(masked, calibration["ood"]), calibration)
            q_pat = conformal_quantile(np.abs(p_cal - s_cal) / scale_of(p_cal, mode), alpha)
            q[inverse == p] = max(q_pat, table[0])
    return q * scale_of(pred, mode)


def interval(pred: np.ndarray, half: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds ``pred -/+ half``, clipped to [0, 1] (true scores live there)."""
    pred = np.asarray(pred, dtype=np.float64)
    return np.clip(pred - half, 0.0, 1.0), np.clip(pred + half, 0.0, 1.0)


def pair_halfwidth(n_missing_a: int, n_missing_b: int, calibration: dict[str, Any]) -> float:
    """Half-width of the paired interval for a difference of two predictions."""
    table = calibration["q_pair_by_missing"]
    return float(table[min(max(n_missing_a, n_missing_b), len(table) - 1)])
