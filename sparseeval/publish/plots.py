"""Diagnostic figures of a fitted predictor on held-out models, for the MLflow run pages.

* :func:`heldout_intervals`: predicted score and interval of every held-out (test) model of a split,
  with honest intervals: the test models are cut in two halves and each half is calibrated on the
  other (the published calibration uses all of them, so reusing those models would be circular;
  the same protocol as :func:`sparseeval.publish.champion.crossfit_coverage`);
* :func:`coverage_by_level`: the share of held-out models inside their interval at several nominal
  levels (the same cross-fit);
* :func:`plot_predicted_vs_true`, :func:`plot_coverage_by_level`: the PNGs.

matplotlib is imported inside the plot functions only (Agg backend: files, no display).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sparseeval.core import settings as defaults

#: nominal interval levels of the coverage plot
LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


@dataclass(frozen=True)
class HeldOut:
    """Held-out models of a split with their true and predicted scores (fractions in [0, 1])."""

    models: list[str]
    true: np.ndarray
    predicted: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    level: float

    @property
    def coverage(self) -> float:
        return float(np.mean((self.true >= self.lower) & (self.true <= self.upper))) if len(self.true) else math.nan

    @property
    def mae_points(self) -> float:
        return float(np.mean(np.abs(self.predicted - self.true)) * 100.0) if len(self.true) else math.nan


def _halves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed + 104729).permutation(n)
    return order[: n // 2], order[n // 2:]


def _crossfit(matrix: Any, split: Any, est: Any, alphas: Sequence[float], seed: int, mode: str
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[float, np.ndarray]]:
    """(test rows, true, predicted, {alpha: half-width}) with each half calibrated on the other."""
    from sparseeval.estimate.calibration import conformal_quantile, scale_of

    test = np.asarray(split.test)
    pred = np.asarray(est.predict(matrix.with_nan_at(test, est.anchors_)), dtype=np.float64)
    true = np.asarray(matrix.scores[test], dtype=np.float64)
    scale = scale_of(pred, mode)
    half = {a: np.full(len(test), np.nan) for a in alphas}
    a_idx, b_idx = _halves(len(test), seed)
    for cal, chk in ((a_idx, b_idx), (b_idx, a_idx)):
        if len(cal) == 0:
            continue
        nonconf = np.abs(pred[cal] - true[cal]) / scale[cal]
        for alpha in alphas:
            q = conformal_quantile(nonconf, alpha)
            half[alpha][chk] = q * scale[chk]
    return test, true, pred, half


def heldout_intervals(matrix: Any, split: Any, est: Any, *, alpha: float = defaults.DEFAULT_ALPHA,
                      seed: int = defaults.DEFAULT_SEED, mode: str = "binomial") -> HeldOut:
    """Every test model of ``split``: true score, ``est``'s prediction from its anchor answers, and
    the cross-fitted ``1 - alpha`` interval (infinite half-width, clipped to [0, 1], when a half is
    too small for a finite quantile)."""
    test, true, pred, half = _crossfit(matrix, split, est, [alpha], seed, mode)
    h = half[alpha]
    return HeldOut(models=[matrix.models[i] for i in test], true=true, predicted=pred,
                   lower=np.clip(pred - h, 0.0, 1.0), upper=np.clip(pred + h, 0.0, 1.0), level=1.0 - alpha)


def coverage_by_level(matrix: Any, split: Any, est: Any, *, levels: Sequence[float] = LEVELS,
                      seed: int = defaults.DEFAULT_SEED, mode: str = "binomial") -> dict[float, float]:
    """Nominal level -> share of the split's test models inside their cross-fitted interval."""
    alphas = [round(1.0 - lv, 10) for lv in levels]
    _, true, pred, half = _crossfit(matrix, split, est, alphas, seed, mode)
    out = {}
    for level, alpha in zip(levels, alphas, strict=True):
        lo, hi = np.clip(pred - half[alpha], 0, 1), np.clip(pred + half[alpha], 0, 1)
        out[float(level)] = float(np.mean((true >= lo) & (true <= hi))) if len(true) else math.nan
    return out


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_predicted_vs_true(held: HeldOut, out: str | Path, *, title: str = "") -> Path:
    """Predicted against true score (points) of held-out models, each with its interval as an error
    bar; models outside their interval in red; the diagonal; MAE and coverage in the legend."""
    plt = _pyplot()
    out = Path(out)
    t, p = held.true * 100.0, held.predicted * 100.0
    lo, hi = held.lower * 100.0, held.upper * 100.0
    inside = (held.true >= held.lower) & (held.true <= held.upper)
    fig, ax = plt.subplots(figsize=(5.6, 5.2))
    for mask, color, label in ((inside, "tab:blue", "inside its interval"),
                               (~inside, "tab:red", "outside its interval")):
        if mask.any():
            ax.errorbar(t[mask], p[mask], yerr=np.vstack([p[mask] - lo[mask], hi[mask] - p[mask]]), fmt="o",
                        ms=3, color=color, ecolor=color, elinewidth=0.6, alpha=0.75, capsize=0,
                        label=f"{label} ({int(mask.sum())})")
    finite = np.concatenate([t, p, lo[np.isfinite(lo)], hi[np.isfinite(hi)]]) if len(t) else np.array([0.0, 100.0])
    lim = [max(float(finite.min()) - 3, -2), min(float(finite.max()) + 3, 102)]
    ax.plot(lim, lim, color="0.4", lw=1, ls="--", label="predicted = true")
    ax.set_xlim(lim)
    ax.set_ylim(lim)
    ax.set_xlabel("true score (points)")
    ax.set_ylabel(f"predicted score (points), {held.level:.0%} interval")
    ax.set_title(title or "held-out models")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left",
              title=f"{len(t)} models · MAE {held.mae_points:.2f} · coverage {held.coverage:.0%}", title_fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_coverage_by_level(coverage: dict[float, float], out: str | Path, *, title: str = "",
                           n_models: int | None = None) -> Path:
    """Observed against nominal coverage of the intervals, with the diagonal they should follow."""
    plt = _pyplot()
    out = Path(out)
    levels = sorted(coverage)
    observed = [coverage[lv] * 100.0 for lv in levels]
    nominal = [lv * 100.0 for lv in levels]
    fig, ax = plt.subplots(figsize=(5.0, 4.4))
    ax.plot([0, 100], [0, 100], color="0.4", lw=1, ls="--", label="nominal")
    ax.plot(nominal, observed, marker="o", color="tab:blue", label="observed on held-out models")
    for x, y in zip(nominal, observed, strict=True):
        ax.annotate(f"{y:.0f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    low = min([*nominal, *observed]) - 10
    ax.set_xlim(max(0, low), 100)
    ax.set_ylim(max(0, low), 102)
    ax.set_xlabel("nominal interval level (%)")
    ax.set_ylabel("held-out models inside (%)")
    ax.set_title(title or "interval coverage by level")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", title=f"{n_models} models" if n_models else None, title_fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
