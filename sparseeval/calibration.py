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

from sparseeval import settings as defaults
from sparseeval.beyond import fit_beyond, shift
from sparseeval.errors import UsageError
from sparseeval.methods.base import AnchorEstimator, impute

#: floor of the binomial scale sqrt(p (1 - p) + SCALE_FLOOR), so scores near 0 or 1 keep a width
SCALE_FLOOR = 0.0025
#: calibration rows simulated per missing-anchor count (calibration models x repetitions)
MASKED_ROWS = 4000
#: random pairs of calibration models for the paired (difference) quantile
MAX_PAIRS = 20000
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


def _imputer(ood: dict[str, Any], cache: dict[bytes, np.ndarray] | None):
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
    training range (:mod:`sparseeval.beyond`, tail mass ``beyond_prior``) under ``beyond``: every
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
    fill_gaps = _imputer(ood, cache)
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


def predict_calibrated(estimator: AnchorEstimator, X_imputed: np.ndarray, calibration: dict[str, Any]) -> np.ndarray:
    """``estimator``'s predictions for gap-free anchor answers, as a calibrated predictor makes them:
    moved by the calibration's tail-aware correction where it has one (:func:`sparseeval.beyond.shift`;
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
