"""Accuracy metrics for predicted benchmark scores (all scores in [0, 1]; MAE reported in points)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class ScoreMetrics:
    """Agreement between predicted and true full-benchmark scores on held-out models."""

    mae: float  #: mean absolute error in percentage points
    tau: float  #: Kendall's tau-b between predicted and true scores
    rho: float  #: Spearman's rho
    max_error: float  #: largest absolute error in percentage points
    n: int  #: number of models scored

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def score_metrics(predicted: np.ndarray, true: np.ndarray) -> ScoreMetrics:
    """Compute MAE/max error (points), Kendall tau and Spearman rho; NaN correlations become 0.

    A constant prediction has no rank information, so its correlation is reported as 0 rather than
    NaN: a method that ignores its anchors should not look undefined, it should look useless.
    """
    predicted = np.asarray(predicted, dtype=np.float64).ravel()
    true = np.asarray(true, dtype=np.float64).ravel()
    if predicted.shape != true.shape:
        raise ValueError(f"shape mismatch: predicted {predicted.shape} vs true {true.shape}")
    if predicted.size == 0:
        raise ValueError("no models to score")
    err = np.abs(predicted - true) * 100.0
    tau = stats.kendalltau(predicted, true).statistic if predicted.size > 1 else np.nan
    rho = stats.spearmanr(predicted, true).statistic if predicted.size > 1 else np.nan
    return ScoreMetrics(
        mae=float(err.mean()),
        tau=float(np.nan_to_num(tau)),
        rho=float(np.nan_to_num(rho)),
        max_error=float(err.max()),
        n=int(predicted.size),
    )
