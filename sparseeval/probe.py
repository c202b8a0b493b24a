"""The probe: a second batch of random items for a model the anchors put at the top of their range.

Why: on a benchmark where the chosen anchors saturate (the shared Open LLM Leaderboard's mmlu: the
strongest decile answers them like the cluster just below it), no estimator or flag keyed on the
anchors' answers tells a model stronger than every training model apart; the default misses them by
8.7 points, 61-78 % silently (docs/results/frontier.md, rounds 1-5). What does extrapolate is the
plain mean of items drawn at random (its expectation moves with the score, whatever the training
range; the line from it to the score is fitted on the training models and has no ceiling). Drawn
items are noisy (40 of them: 3-4 points), so they do not replace the anchors; they *check* them, only
where the anchors are blind: a model predicted at the top of the calibration models' predictions is
asked the probe's items too, and when the probe puts it higher than the anchors did, by more than
the anchors and the probe disagree on the calibration models there, it is flagged, predicted halfway
between the two and given an interval that spans both (:func:`apply_probe`). Elsewhere nothing
changes: a model below the probe level, or one the probe agrees with, keeps the anchors' prediction and interval.

Everything is fitted on models the predictor was fitted or calibrated on, never on the models it
scores: the line on the fitting models, the probe level, the disagreement threshold and the probe's
interval on the calibration models (held out from the estimator, so their anchor predictions carry
the errors a new model's do). Stored as plain JSON (``extra["probe"]``): scoring needs NumPy only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from sparseeval import settings as defaults
from sparseeval.artifact import AnchorInfo, PredictorArtifact
from sparseeval.calibration import conformal_quantile
from sparseeval.errors import UsageError
from sparseeval.frontier import Guarded, opens_upward

#: a prediction at or above this quantile of the calibration models' predictions asks for the probe (the
#: default of ``fit --probe-from`` and ``$SPARSEEVAL_PROBE_FROM``; 0.5 catches more of mmlu's frontier, whose
#: anchors put many stronger models in the cluster below, but asks half of all models and costs hellaswag 6 %
#: in-distribution MAE: round 9)
PROBE_FROM_QUANTILE: float = defaults.SETTINGS["probe_from"].default_value
#: flag when the probe exceeds the anchors' prediction by more than this quantile of that excess
#: among the calibration models at the probe level (so about 5 % of those, 1-2 % of all models, in distribution;
#: 0.9 caught more of mmlu's frontier but flagged 4 % of ordinary models and cost 16 % MAE on one split)
DISAGREEMENT_QUANTILE = 0.95
#: how a probe's flag begins (:func:`probe_reason`), for counting them
PROBE_REASON = "the probe's"
#: fewest calibration models at the probe level the threshold is taken from
MIN_PROBED_CALIBRATION = 30


def draw_probe_items(n_items: int, anchor_columns: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` item columns drawn uniformly among the non-anchors (sorted), with ``seed``.

    Uniform on purpose: the probe's worth is that its mean's expectation follows the score beyond
    the training range, which a selection fitted on the training models would lose.
    """
    pool = np.setdiff1d(np.arange(n_items), np.asarray(anchor_columns))
    if n < 1:
        raise UsageError(f"a probe needs at least 1 item, got {n}")
    if n > pool.size:
        raise UsageError(f"a probe of {n} items is more than the {pool.size} items that are not anchors")
    return np.sort(np.random.default_rng(seed).choice(pool, size=n, replace=False))


def probe_items(artifact: PredictorArtifact) -> list[AnchorInfo]:
    """The predictor's probe items, where a model runs them (position and column -1: not predictor inputs)."""
    probe = artifact.extra.get("probe")
    if not probe:
        raise UsageError(f"the predictor for {artifact.benchmark!r} has no probe "
                         "(fit it with `sparseeval fit --probe N`)")
    return [AnchorInfo(-1, -1, item, task, doc, artifact.benchmark)
            for item, (task, doc) in zip(probe["item_ids"], probe["locations"], strict=True)]


def probe_means(values: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Each row's mean over the probe items it answered; NaN with fewer than half answered."""
    answered = observed.sum(axis=1)
    total = np.where(observed, values, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = total / answered
    return np.where(answered * 2 >= values.shape[1], means, np.nan)


def fit_probe(item_ids: list[str], means_fit: np.ndarray, scores_fit: np.ndarray, means_cal: np.ndarray,
              scores_cal: np.ndarray, pred_cal: np.ndarray, *, alpha: float,
              locations: list[tuple[str | None, int | None]],
              level_quantile: float = PROBE_FROM_QUANTILE,
              pred_cal_by_prefix: list[np.ndarray] | None = None) -> dict[str, Any]:
    """The probe's stored description (``level_quantile``: the quantile of the calibration models'
    predictions from which a model is asked the probe).

    ``means_fit`` / ``scores_fit``: the fitting models' probe means and scores (the line);
    ``means_cal``, ``scores_cal``, ``pred_cal``: the calibration models' probe means, scores and the
    predictor's own predictions from their anchors (the level, the threshold, the interval).
    ``locations``: each probe item's lm-eval task and doc index (None where it has none).
    ``pred_cal_by_prefix``: the same models' predictions from the first 1, 2, ... anchors of the
    predictor's adaptive order (NaN where ``predict`` would not score one): a threshold per prefix
    length (``threshold_by_prefix``), since a prediction from fewer anchors disagrees with the probe
    more (arc, random split: 7-13 % of ordinary models flagged from 6-14 anchors with the full-anchor
    threshold, 0.9 % from all 20; docs/results/frontier.md, round 9).
    """
    ok = ~np.isnan(means_fit)
    if ok.sum() < 3 or np.ptp(means_fit[ok]) == 0:
        raise UsageError("too few fitting models answered the probe's items to fit its line")
    intercept, slope = probe_line(means_fit[ok], scores_fit[ok], len(item_ids))
    if slope <= 0:
        raise UsageError(f"the probe's items do not rise with the score on the fitting models (slope {slope:.3f})")
    cal_ok = ~np.isnan(means_cal)
    line_cal = intercept + slope * means_cal[cal_ok]
    if not 0.0 < level_quantile < 1.0:
        raise UsageError(f"the probe's level quantile must be in (0, 1), got {level_quantile}")
    level = float(np.quantile(pred_cal, level_quantile))
    top = pred_cal[cal_ok] >= level
    if top.sum() < MIN_PROBED_CALIBRATION:
        raise UsageError(f"{int(top.sum())} calibration models at the probe level; a probe needs at least "
                         f"{MIN_PROBED_CALIBRATION} to set its threshold (more models, a lower --probe-from or "
                         "$SPARSEEVAL_PROBE_FROM, or no probe)")
    excess = line_cal[top] - pred_cal[cal_ok][top]
    threshold = float(np.quantile(excess, DISAGREEMENT_QUANTILE))
    by_prefix = None if pred_cal_by_prefix is None else \
        prefix_thresholds(intercept + slope * means_cal, pred_cal_by_prefix, level, threshold)
    return {
        "item_ids": list(item_ids),
        "locations": [[t, d] for t, d in locations],
        "line": [float(intercept), float(slope)],
        "level": level,
        "level_quantile": level_quantile,
        "threshold": threshold,
        **({} if by_prefix is None else {"threshold_by_prefix": by_prefix}),
        "threshold_quantile": DISAGREEMENT_QUANTILE,
        "halfwidth": conformal_quantile(np.abs(line_cal - scores_cal[cal_ok]), alpha),
        "n_calibration": int(cal_ok.sum()),
        "n_calibration_probed": int(top.sum()),
    }


def prefix_thresholds(line_cal: np.ndarray, pred_by_prefix: list[np.ndarray], level: float,
                      threshold: float) -> list[float]:
    """The disagreement threshold per prefix length: the same quantile as the full one, among the
    calibration models a prefix's prediction puts at the level (``line_cal``: their probe estimates,
    NaN where they did not answer the probe). A prefix with fewer than :data:`MIN_PROBED_CALIBRATION`
    such models takes the largest threshold measured (fewer flags rather than noisy ones); none is
    below the full anchors' ``threshold``, so fewer anchors never flag more readily than all of them."""
    measured: list[float | None] = []
    for pred in pred_by_prefix:
        at = ~np.isnan(line_cal) & ~np.isnan(pred) & (pred >= level)
        measured.append(float(np.quantile(line_cal[at] - pred[at], DISAGREEMENT_QUANTILE))
                        if at.sum() >= MIN_PROBED_CALIBRATION else None)
    widest = max([threshold, *(t for t in measured if t is not None)])
    return [max(threshold, widest if t is None else t) for t in measured]


def probe_line(means: np.ndarray, scores: np.ndarray, n_items: int) -> tuple[float, float]:
    """Intercept and slope of the line from a model's probe mean to its score, fitted on ``means`` and
    ``scores`` and corrected for the mean's sampling noise.

    Why corrected: a mean of ``n_items`` drawn items carries binomial noise, and least squares on a noisy
    predictor flattens the slope by the reliability ``var(true mean) / var(mean)`` (errors in
    variables). Flat is right for the typical model and wrong for the one the probe is for: on mmlu's
    frontier (weakest 90 % fitted, 40 items) the plain fit put the strongest models 2.9 points low on
    average, the corrected one 1.0 (docs/results/frontier.md, round 8). The noise is each model's
    own binomial variance ``m (1 - m) / (n - 1)``, averaged (an upper bound where item scores are not
    0/1, so the correction then errs steep); the reliability is floored at 0.5 so a tiny or degenerate
    fitting set cannot blow the slope up.
    """
    slope = float(np.polyfit(means, scores, 1)[0])
    noise = np.mean(means * (1 - means)) / max(n_items - 1, 1)
    reliability = 1.0 - noise / np.var(means)
    slope = slope / max(reliability, 0.5)
    return float(np.mean(scores) - slope * np.mean(means)), float(slope)


def probe_estimate(probe: dict[str, Any], means: np.ndarray) -> np.ndarray:
    """The probe's score estimate from its items' means (NaN stays NaN), clipped to [0, 1]."""
    intercept, slope = probe["line"]
    return np.clip(intercept + slope * means, 0.0, 1.0)


def probe_reason(probe: dict[str, Any], estimate: float, predicted: float, threshold: float) -> str:
    """Why a model is flagged by the probe, in words a person reads."""
    return (f"{PROBE_REASON} {len(probe['item_ids'])} random items put it at {100 * estimate:.1f}, "
            f"{100 * (estimate - predicted):.1f} points above its anchors' {100 * predicted:.1f} (on "
            f"{100 * probe['threshold_quantile']:g} % of the calibration models at the top the two stay within "
            f"{100 * threshold:.1f}): these anchors may under-estimate it; predicted halfway between, "
            "the interval reaching from the anchors' lower side to the probe's upper side")


def probe_thresholds(probe: dict[str, Any], answered: np.ndarray | None, n: int) -> np.ndarray:
    """The disagreement threshold of each of ``n`` models that answered ``answered`` anchors: the
    threshold of that prefix length where the probe stores them (fitted since round 9), else the
    full anchors' one."""
    by_prefix = probe.get("threshold_by_prefix")
    if not by_prefix or answered is None:
        return np.full(n, float(probe["threshold"]))
    return np.asarray(by_prefix, dtype=np.float64)[np.clip(np.asarray(answered, dtype=np.int64) - 1, 0,
                                                           len(by_prefix) - 1)]


def probe_selfcheck_line(check: dict[str, Any] | None) -> str | None:
    """``fit``'s line on the frontier self-check with the probe's answers, the same predictor's figures from
    its anchors alone beside them."""
    if not check:
        return None
    if not check.get("measured"):
        return f"frontier self-check with the probe: {check.get('note', 'not measured')}"
    alone = check["anchors_alone"]
    return (f"frontier self-check with the probe's answers: on the {check['n']} stronger fitting models MAE "
            f"{float(check['mae']):.2f} points, bias {float(check['bias']):+.2f}, "
            f"coverage {float(check['coverage']):.3f}, "
            f"flagged by the probe {100 * float(check['probe_flagged']):.1f} %, "
            f"missed silently {100 * float(check['silent_misses']):.1f} % (from the anchors alone: MAE "
            f"{float(alone['mae']):.2f}, bias {float(alone['bias']):+.2f}, coverage {float(alone['coverage']):.3f}, "
            f"missed silently {100 * float(alone['silent_misses']):.1f} %)")


def probe_request(probe: dict[str, Any], how: str = "(`sparseeval export --probe`) and predict again") -> str:
    """The warning of a model at the probe level that did not answer the probe's items (``how``: what to do)."""
    return (f"predicted at the top of its calibration models (>= {100 * probe['level']:.1f}), where anchors alone "
            f"miss stronger models: answer the probe's {len(probe['item_ids'])} items too {how}")


def apply_probe(probe: dict[str, Any], g: Guarded, answers: np.ndarray | None,
                answered: np.ndarray | None = None) -> tuple[Guarded, list[list[str]]]:
    """The anchors' guarded predictions ``g`` checked by the probe's answers (rows as ``g``, NaN = not
    answered; None: nobody answered it), and a warning per model at the probe level without them.
    ``answered``: how many anchors each model answered (None: all), for its threshold
    (:func:`probe_thresholds`).

    A model at the probe level (and not already open upward by the anchors' own reasons) whose probe
    estimate exceeds its prediction by more than the threshold is flagged with :func:`probe_reason`,
    predicted halfway between the two, and given an interval from the anchors' lower side to the probe's
    upper side: the two disagree beyond what they do on the calibration models, and which one is right
    is not knowable from them. Taking the probe's estimate alone won on mmlu's frontier but overshot truthfulqa's
    (+2.5 points, coverage .28) and lost on the stronger models inside the training range, where the
    anchors are not blind and the flagged probes are the lucky draws (docs/results/frontier.md, round 8).
    Every other model is left exactly as it was.
    """
    n = g.pred.size
    if answers is None:
        est = np.full(n, np.nan)
    else:
        answers = np.asarray(answers, dtype=np.float64)
        est = probe_estimate(probe, probe_means(np.nan_to_num(answers), ~np.isnan(answers)))
    # a model whose anchors already say they cannot bound it from above has an open interval: the probe
    # has nothing to add there, and where the anchors see the frontier (arc) its line overshoots
    at_top = (g.pred >= probe["level"]) & ~np.array([opens_upward(r) for r in g.reasons], dtype=bool)
    warns = [[probe_request(probe)] if at_top[i] and np.isnan(est[i]) else [] for i in range(n)]
    threshold = probe_thresholds(probe, answered, n)
    with np.errstate(invalid="ignore"):
        flagged = at_top & (est - g.pred > threshold)
    if not flagged.any():
        return g, warns
    upper = np.where(flagged, np.clip(est + probe["halfwidth"], 0.0, 1.0), g.upper)
    return replace(
        g, pred=np.where(flagged, (g.pred + est) / 2, g.pred), upper=upper,
        halfwidth=np.where(flagged, (upper - g.lower) / 2, g.halfwidth),
        reasons=[(*r, probe_reason(probe, est[i], g.pred[i], threshold[i])) if flagged[i] else r
                 for i, r in enumerate(g.reasons)],
    ), warns
