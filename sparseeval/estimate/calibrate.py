"""Calibrating a fitted estimator (fit time): the conformal quantiles, per missing-anchor count and per pair,
the out-of-distribution reference, the extrapolation guard and the lift at the top, measured on calibration
models the estimator never saw. What predictions read back is :mod:`sparseeval.estimate.calibration`.

Everything returned is a plain JSON-able dict so the artifact can store and hash it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sparseeval.core import settings as defaults
from sparseeval.core.errors import UsageError
from sparseeval.estimate.beyond import fit_beyond, shift
from sparseeval.estimate.calibration import (
    EDGE_FRAC,
    SCALE_FLOOR,
    conformal_quantile,
    imputer,
    min_calibration_models,
    ood_scores,
    predict_calibrated,
    scale_of,
)
from sparseeval.estimate.methods.base import AnchorEstimator, impute

#: calibration rows simulated per missing-anchor count (calibration models x repetitions)
MASKED_ROWS = 4000


#: random pairs of calibration models for the paired (difference) quantile
MAX_PAIRS = 20000


#: missing-anchor counts calibrated one by one up to this many; above it on a geometric grid
EXACT_MISSING = 10


#: the grid's ratio above EXACT_MISSING
MISSING_GRID_RATIO = 1.25


def missing_grid(top: int) -> list[int]:
    """The missing-anchor counts ``calibrate`` masks and measures, 0 .. ``top``: every count up to
    :data:`EXACT_MISSING`, then a geometric grid (ratio :data:`MISSING_GRID_RATIO`) ending at ``top``.

    Why: a joint predictor has 120 anchors, so a table of every count up to half of them was 61 masked
    passes of 4,000 rows through seven outputs, 53 of the 54 seconds its calibration took on
    ``make run``'s data; the widths grow smoothly with the count, and a count off the grid takes the
    next larger count's width, which can only be wider. Per-benchmark predictors (K <= 21) keep every
    count. Predictions with missing anchors are calibrated exactly for their pattern when the artifact
    holds its calibration answers (:func:`halfwidths`); the table is what ``compare`` pairs by."""
    counts = list(range(min(top, EXACT_MISSING) + 1))
    while counts[-1] < top:
        counts.append(min(top, math.ceil(counts[-1] * MISSING_GRID_RATIO)))
    return counts


def _mask_rows(X: np.ndarray, n_missing: int, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``reps`` copies of ``X`` with ``n_missing`` random anchors per row set to NaN."""
    tiled = np.tile(X, (reps, 1)).astype(np.float32)
    if n_missing == 0:
        return tiled
    order = rng.random(tiled.shape).argsort(axis=1)[:, :n_missing]
    np.put_along_axis(tiled, order, np.nan, axis=1)
    return tiled


def _choose_mode(pred: np.ndarray, resid: np.ndarray, alpha: float, rng: np.random.Generator) -> str:
    """Pick ``none`` or ``binomial`` scaling by mean interval width, honestly, on two halves.

    Both modes have the same coverage guarantee; the better one is the narrower on average. Each
    half calibrates and the other half measures width, so the choice is not tuned in-sample.
    """
    n = pred.size
    if n < 2 * min_calibration_models(alpha):
        return "none"
    perm = rng.permutation(n)
    halves = (perm[: n // 2], perm[n // 2:])
    widths = {}
    for mode in ("none", "binomial"):
        total = 0.0
        for a, b in (halves, halves[::-1]):
            q = conformal_quantile(np.abs(resid[a]) / scale_of(pred[a], mode), alpha)
            total += float(np.mean(q * scale_of(pred[b], mode)))
        widths[mode] = total
    return min(widths, key=widths.get)  # type: ignore[arg-type]


def _pair_quantile(resid: np.ndarray, alpha: float, rng: np.random.Generator) -> float:
    """Conformal quantile of |r_i - r_j| over random pairs of calibration models.

    The error of a predicted difference is the difference of the two errors; models sharing the
    same anchors make correlated errors, which this captures (often narrower than adding widths).
    """
    n = resid.size
    n_pairs = min(MAX_PAIRS, n * (n - 1) // 2)
    i = rng.integers(0, n, size=n_pairs)
    j = (i + rng.integers(1, n, size=n_pairs)) % n  # j != i
    return conformal_quantile(np.abs(resid[i] - resid[j]), alpha)


def fit_ood(X_train: np.ndarray, fill: np.ndarray) -> dict[str, Any]:
    """Ledoit-Wolf mean and covariance of the training models' (imputed) anchor answers (at fit time:
    scikit-learn is imported here, so scoring with a saved predictor does not need it)."""
    from sklearn.covariance import LedoitWolf

    lw = LedoitWolf().fit(impute(X_train, fill).astype(np.float64))
    # a tiny ridge keeps the matrix invertible even when every anchor is constant in training
    cov = lw.covariance_ + 1e-6 * np.eye(lw.covariance_.shape[0])
    return {"location": lw.location_.tolist(), "covariance": cov.tolist()}


def fit_guard(X_train: np.ndarray, s_train: np.ndarray, pred_cal: np.ndarray, *,
              edge_frac: float = EDGE_FRAC) -> dict[str, Any]:
    """The guard's reference figures from the training models' anchor answers ``X_train`` (NaN =
    not answered) and scores ``s_train``, and the calibration models' out-of-sample predictions
    ``pred_cal`` (the edge thresholds must come from predictions the estimator did not fit)."""
    X = np.asarray(X_train, dtype=np.float64)
    s = np.asarray(s_train, dtype=np.float64)
    answered = ~np.isnan(X)
    right = np.all(~answered | (X >= 1.0), axis=1) & answered.any(axis=1)
    wrong = np.all(~answered | (X <= 0.0), axis=1) & answered.any(axis=1)
    pred_cal = np.asarray(pred_cal, dtype=np.float64)
    return {
        "score_min": float(s.min()), "score_max": float(s.max()),
        "top_prediction": float(np.quantile(pred_cal, 1.0 - edge_frac)),
        "edge_frac": edge_frac,
        "all_right_frac": float(right.mean()),
        "all_right_max": float(s[right].max()) if right.any() else None,
        "all_wrong_frac": float(wrong.mean()),
        "all_wrong_min": float(s[wrong].min()) if wrong.any() else None,
    }


def calibrate(estimator: AnchorEstimator, X_cal: np.ndarray, s_cal: np.ndarray, X_train: np.ndarray, *,
              alpha: float = defaults.DEFAULT_ALPHA, seed: int = defaults.DEFAULT_SEED,
              ood_percentile: float = defaults.DEFAULT_OOD_PERCENTILE,
              cache: dict[bytes, np.ndarray] | None = None, s_train: np.ndarray | None = None,
              beyond_prior: float = defaults.DEFAULT_BEYOND_PRIOR,
              beyond_outputs: list[dict[str, Any]] | None = None,
              missing_up_to: int | None = None) -> dict[str, Any]:
    """Calibrate intervals and the OOD threshold of a fitted ``estimator``.

    ``X_cal``/``s_cal``: anchor answers (in anchor order) and true scores of calibration models
    that the estimator never saw; ``X_train``: the training models' anchor answers (OOD reference).
    Returns the calibration dict stored in the artifact: the chosen scale mode, the conformal
    quantile per number of missing anchors (0 .. k // 2, non-decreasing, from random masks), the
    paired quantile per missing count, the OOD mean/covariance/threshold, and the calibration
    models' anchor answers and scores (for exact per-pattern recalibration in :func:`halfwidths`).
    ``s_train``: the training models' scores; with them the extrapolation guard (:func:`fit_guard`)
    is stored too, under ``frontier``, and the tail-aware correction of predictions at the top of the
    training range (:mod:`sparseeval.estimate.beyond`, tail mass ``beyond_prior``) under ``beyond``: every
    prediction below, conformal residuals included, is made through it (:func:`predict_calibrated`).
    ``beyond_outputs``: for the mean output of a joint predictor, its benchmarks' corrections, in
    order: the mean is then the mean of the corrected benchmark predictions (stored, not refitted).
    ``missing_up_to``: the per-missing-count tables up to this many missing anchors (default ``k // 2``;
    measured on :func:`missing_grid`'s counts).
    They are the fallback of artifacts without ``cal_answers`` and what ``compare`` pairs by; a
    measurement that only predicts through :func:`halfwidths` (the frontier self-check) gives the same
    intervals with 0, at a fraction of the cost (one pass instead of ``k // 2 + 1`` masked ones: most of
    a joint predictor's calibration, 120 anchors and 7 outputs).
    """
    X_cal = np.asarray(X_cal, dtype=np.float32)
    s_cal = np.asarray(s_cal, dtype=np.float64)
    n, k = X_cal.shape
    if n < min_calibration_models(alpha):
        raise UsageError(f"calibration needs at least {min_calibration_models(alpha)} models at "
                         f"alpha={alpha}, got {n}; use more models or a larger calibration fraction")
    rng = np.random.default_rng(seed)
    fill = estimator.anchor_fill_ if estimator.anchor_fill_ is not None else np.full(k, 0.5, np.float32)
    ood = fit_ood(X_train, fill)
    fill_gaps = imputer(ood, cache)
    # predictions exactly as scoring makes them (gaps filled by conditional imputation, lifted at the top)
    X_full = fill_gaps(X_cal)
    if beyond_outputs is not None:
        lift: dict[str, Any] = {"beyond_outputs": beyond_outputs}
        pred_full = predict_calibrated(estimator, X_full, lift)
    else:
        raw_full = estimator.predict(X_full)
        lifted = s_train is not None and estimator.lifted_at_top
        beyond = fit_beyond(raw_full, s_cal, s_train, beyond_prior) if lifted else {}
        lift = {"beyond": beyond} if beyond else {}
        pred_full = shift(raw_full, beyond)
    resid_full = pred_full - s_cal
    mode = _choose_mode(pred_full, resid_full, alpha, rng)

    reps = max(1, math.ceil(MASKED_ROWS / n))
    grid = missing_grid(k // 2 if missing_up_to is None else min(missing_up_to, k // 2))
    q_grid: list[float] = []
    pair_grid: list[float] = []
    for m in grid:
        Xm = _mask_rows(X_cal, m, 1 if m == 0 else reps, rng)
        pred = predict_calibrated(estimator, fill_gaps(Xm), lift)
        resid = pred - np.tile(s_cal, Xm.shape[0] // n)
        q_grid.append(conformal_quantile(np.abs(resid) / scale_of(pred, mode), alpha))
        pair_grid.append(_pair_quantile(resid[:n], alpha, rng))
    # missing answers can only lose information: force the widths to be non-decreasing; a count between
    # two calibrated ones takes the larger one's (wider, never narrower)
    at = np.searchsorted(grid, np.arange(grid[-1] + 1))
    q_missing = np.maximum.accumulate(q_grid)[at].tolist()
    q_pair = np.maximum.accumulate(pair_grid)[at].tolist()

    cal_d2 = ood_scores(X_cal, ood)
    ood["threshold"] = float(np.percentile(cal_d2, ood_percentile))
    ood["percentile"] = ood_percentile
    guard = {} if s_train is None else {"frontier": fit_guard(X_train, s_train, pred_full)}
    return guard | lift | {
        "alpha": alpha,
        "mode": mode,
        "scale_floor": SCALE_FLOOR,
        "n_calibration": int(n),
        "q_by_missing": q_missing,
        "q_pair_by_missing": q_pair,
        "calibration_mae_points": float(np.mean(np.abs(resid_full)) * 100.0),
        "mean_halfwidth_points": float(np.mean(q_missing[0] * scale_of(pred_full, mode)) * 100.0),
        "seed": seed,
        "ood": ood,
        # kept so a missing-anchor pattern can be calibrated exactly at predict time (small: n x k)
        "cal_answers": [[None if np.isnan(v) else float(v) for v in row] for row in X_cal.tolist()],
        "cal_scores": s_cal.tolist(),
    }
