"""Stable anchors: refit the champion's predictor on new data, re-select only as a challenger.

Users run a published anchor set on their models; if every refresh re-selected anchors, the
answers they already have would stop matching the predictor. So a refresh keeps the champion's
anchors and only refits its predictor (and recalibrates it) on the larger training set; a fresh
selection competes as a challenger and replaces the champion only when it is clearly better on
the same held-out models and the champion is not too young (:func:`decide`). Pure functions: the
pipeline records the outcome in DuckDB and MLflow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from sparseeval.core import settings as defaults
from sparseeval.data.matrix import ResponseMatrix
from sparseeval.estimate.calibration import conformal_quantile, scale_of
from sparseeval.estimate.evaluation import fit_on_split, score_on_split
from sparseeval.estimate.methods import AnchorEstimator, make_estimator
from sparseeval.estimate.methods.base import column_means, impute
from sparseeval.estimate.methods.joint import MEAN, JointData, JointSparseEval
from sparseeval.estimate.splits import Split


def refit_on_anchors(matrix: ResponseMatrix, split: Split, method: str, items: list[str], seed: int, *,
                     device: str = defaults.DEFAULT_DEVICE) -> AnchorEstimator:
    """``method``'s final predictor fitted on the split's training models with the anchors fixed
    to ``items`` (no selection): the champion refit on new data.

    Refuses (ValueError) anchors that are no longer items of the benchmark, and methods whose
    predictor cannot be fitted apart from their selection (the baselines re-select instead).
    """
    column = {item: i for i, item in enumerate(matrix.items)}
    missing = [i for i in items if i not in column]
    if missing:
        raise ValueError(f"{matrix.benchmark}: champion anchors no longer in the data: {', '.join(missing[:5])}")
    est = make_estimator(method, len(items), random_state=seed, device=device)
    fit_final = getattr(est, "_fit_final", None)
    if fit_final is None:
        raise ValueError(f"method {method!r} has no separate final fit: it cannot keep fixed anchors")
    from sparseeval.estimate.methods.device import resolve_device

    anchors = np.array([column[i] for i in items], dtype=np.int64)
    # only the anchor columns are read (per-column means and imputation: the same numbers as on the
    # whole training matrix, without copying 30,000 columns to use 20)
    Ytr = matrix.with_nan_at(split.train, anchors)
    fill = column_means(np.ascontiguousarray(Ytr))  # row by row, as over the whole matrix: the same float sums
    X = impute(Ytr, fill)
    s = matrix.scores[split.train].astype(np.float32)
    if len(split.val):
        X_val = impute(matrix.with_nan_at(split.val, anchors), fill)
        s_val = matrix.scores[split.val].astype(np.float32)
    else:  # the same seeded carve-out the selection uses when it has no validation models
        order = np.random.default_rng(seed + 7919).permutation(len(s))
        n_val = max(1, round(0.15 * len(s)))
        tr, va = np.sort(order[n_val:]), np.sort(order[:n_val])
        X, X_val, s, s_val = X[tr], X[va], s[tr], s[va]
    est._set_anchors(anchors, None, fill=fill)
    fit_final(X, s, X_val, s_val, resolve_device(device))
    est.selection_ = {"start": "fixed", "swaps": 0, "refit_of": list(items)}
    return est


def heldout_mae(matrix: ResponseMatrix, split: Split, est: AnchorEstimator) -> float:
    """Mean absolute error in points on the split's test models (never seen by ``est``)."""
    return float(np.mean(np.abs(score_on_split(matrix, split, est) - matrix.scores[split.test])) * 100.0)


def mean_guess_mae(scores: np.ndarray, split: Split) -> float:
    """MAE in points of guessing every held-out model the training models' mean score: what a
    predictor without skill achieves (the ``beats_mean_score`` publishing check's bar)."""
    scores = np.asarray(scores, dtype=np.float64)
    return float(np.mean(np.abs(scores[split.train].mean() - scores[split.test])) * 100.0)


def baseline_mae(matrix: ResponseMatrix, split: Split, k: int, seed: int, *,
                 device: str = defaults.DEFAULT_DEVICE) -> float:
    """``random-linear`` (random anchors + ridge) on the same split: the bar a predictor must clear."""
    return heldout_mae(matrix, split, fit_on_split(matrix, split, "random-linear", k, seed, device=device))


def crossfit_coverage(matrix: ResponseMatrix, split: Split, est: AnchorEstimator, *, alpha: float,
                      seed: int = defaults.DEFAULT_SEED, mode: str = "binomial") -> float | None:
    """Honest interval coverage on held-out models: the test models are cut in two halves; the
    conformal quantile of one half is applied to the other, both ways. (The published calibration
    uses all of them, so measuring coverage on those same models would be circular.) None when a
    half is too small for a finite quantile."""
    assert est.anchors_ is not None
    return _crossfit(lambda rows: matrix.with_nan_at(rows, est.anchors_), matrix.scores, split, est, alpha=alpha,
                     seed=seed, mode=mode)


def _crossfit(answers: Callable[[np.ndarray], np.ndarray], scores: np.ndarray, split: Split, est: AnchorEstimator,
              *, alpha: float, seed: int, mode: str) -> float | None:
    """``answers(rows)``: those models' answers to ``est``'s anchors (NaN where unanswered)."""
    test = np.asarray(split.test)
    half = len(test) // 2
    if half < math.ceil(1.0 / alpha) - 1:
        return None
    order = np.random.default_rng(seed + 104729).permutation(len(test))
    a, b = test[order[:half]], test[order[half:]]
    assert est.anchors_ is not None
    covered = []
    for cal, chk in ((a, b), (b, a)):
        pred_cal = est.predict(answers(cal))
        q = conformal_quantile(np.abs(pred_cal - scores[cal]) / scale_of(pred_cal, mode), alpha)
        pred = est.predict(answers(chk))
        covered.append(np.abs(pred - scores[chk]) <= q * scale_of(pred, mode))
    return float(np.mean(np.concatenate(covered)))


# ------------------------------------------------------------------------------------------------
# The joint predictor's publishing bar: every benchmark, on the joint split's held-out models
# ------------------------------------------------------------------------------------------------
def joint_baseline_maes(matrices: Sequence[ResponseMatrix], split: Split, k: int, seed: int, *,
                        device: str = defaults.DEFAULT_DEVICE) -> dict[str, float]:
    """Per benchmark, ``random-linear`` with ``k`` of its own items on the joint split (``matrices``
    restricted to the joint models, in the joint data's model order): the bar each output of a
    ``sparseeval-joint`` predictor with ``k`` items per benchmark must clear; ``mean``: the mean of
    those predictions against the mean score."""
    out: dict[str, float] = {}
    preds = []
    for m in matrices:
        pred = score_on_split(m, split, fit_on_split(m, split, "random-linear", min(k, len(m.items)), seed,
                                                     device=device))
        out[m.benchmark] = float(np.mean(np.abs(pred - m.scores[split.test])) * 100.0)
        preds.append(pred)
    truth = np.mean([m.scores[split.test] for m in matrices], axis=0)
    out[MEAN] = float(np.mean(np.abs(np.mean(preds, axis=0) - truth)) * 100.0)
    return out


def joint_crossfit_coverage(data: JointData, split: Split, est: JointSparseEval, *, alpha: float,
                            seed: int = defaults.DEFAULT_SEED,
                            modes: dict[str, str] | None = None) -> dict[str, float | None]:
    """:func:`crossfit_coverage` of every output of a joint estimator (each benchmark and the mean),
    each with its own calibration scale ``modes[name]`` (default binomial)."""
    S = np.concatenate([data.S, data.S.mean(axis=1, keepdims=True)], axis=1).astype(np.float64)
    out = {}
    for o, name in enumerate([*data.benchmarks, MEAN]):
        output = est.output(name)
        out[name] = _crossfit(_rows_of(data.Y, output.anchors_), S[:, o], split, output, alpha=alpha, seed=seed,
                              mode=(modes or {}).get(name, "binomial"))
    return out


def _rows_of(Y: np.ndarray, anchors: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Answers of given rows of ``Y`` to ``anchors`` (what :func:`_crossfit` asks for)."""
    return lambda rows: Y[rows][:, anchors]


@dataclass(frozen=True)
class Decision:
    publish: str  #: ``refit`` (keep the champion's anchors) or ``challenger`` (the re-selected set)
    reason: str


def decide(refit_mae: float, challenger_mae: float, *, margin: float, published_at: datetime | None,
           now: datetime, min_days: float) -> Decision:
    """Keep the champion's anchors unless the challenger's held-out MAE is lower by ``margin``
    (a fraction) and the champion has been published for at least ``min_days``."""
    better = challenger_mae <= (1.0 - margin) * refit_mae
    age = (now - published_at).total_seconds() / 86400.0 if published_at is not None else math.inf
    if better and age >= min_days:
        return Decision("challenger", f"challenger MAE {challenger_mae:.2f} beats the champion's refit "
                                      f"{refit_mae:.2f} by more than {margin:.0%}")
    if better:
        return Decision("refit", f"challenger MAE {challenger_mae:.2f} beats {refit_mae:.2f}, but the champion "
                                 f"is only {age:.1f} days old (at most one change per {min_days:g} days)")
    return Decision("refit", f"challenger MAE {challenger_mae:.2f} does not beat the champion's refit "
                             f"{refit_mae:.2f} by {margin:.0%}: anchors kept")
