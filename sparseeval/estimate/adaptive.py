"""Adaptive anchors: an ordered anchor list, and a stop as soon as the interval is narrow enough.

A published predictor carries an *order* of its anchors (``extra["adaptive"]["order"]``, anchor
positions): a greedy forward selection on the training models, each next anchor the one that most
lowers the ridge GCV error of the prefix, so the first ``p`` anchors are the ``p`` most worth
asking. A new model answers the anchors in batches in that order; after each batch the predictor
gives a prediction and its conformal interval from what was answered, and the model stops as soon
as the interval's half-width is at most what the user asked for. Models whose score is easy to pin
down (far from 50 %, consistent answers) stop early.

Coverage per prefix: the intervals of a partially answered model are calibrated *for its exact
pattern* of answered anchors (:func:`sparseeval.estimate.calibration.halfwidths` hides the same anchors from
the calibration models and takes their conformal quantile), so every prefix length has nominal
coverage. ``q_by_prefix`` stores those quantiles for every prefix length (the same numbers,
precomputed, for planning and tables).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from sparseeval.core.errors import UsageError
from sparseeval.estimate import calibration as cal
from sparseeval.estimate.artifact import AnchorInfo
from sparseeval.estimate.methods.base import AnchorEstimator, impute
from sparseeval.estimate.methods.joint import forward_order
from sparseeval.estimate.probe import STAGE_ANCHORS, STAGE_PROBE, ProbePlan, ProbeState

if TYPE_CHECKING:
    from sparseeval.estimate.artifact import PredictorArtifact


def anchor_order(X_train: np.ndarray, s_train: np.ndarray, fill: np.ndarray, *,
                 weights: np.ndarray | None = None) -> np.ndarray:
    """Anchor positions in the order to ask them (training models only: no calibration model, no test model).

    ``X_train``: training models' answers to the anchors (NaN = missing, filled with ``fill``);
    ``s_train``: their scores, (n,) or (n, B) for a joint predictor (``weights`` per benchmark).
    """
    return forward_order(impute(X_train, fill), s_train, weights)


def prefix_quantiles(estimator: AnchorEstimator, order: np.ndarray, calibration: dict[str, Any]) -> list[float]:
    """Conformal quantile (in the calibration's scale mode) for every prefix length 0..k of ``order``.

    Entry ``p``: the calibration models predicted from the first ``p`` anchors of the order only.
    """
    X_cal = stored_calibration_answers(calibration)
    s_cal = np.asarray(calibration["cal_scores"], dtype=np.float64)
    mode, alpha = calibration["mode"], calibration["alpha"]
    out = []
    for p in range(len(order) + 1):
        masked = X_cal.copy()
        masked[:, order[p:]] = np.nan
        pred = cal.predict_calibrated(estimator, cal.conditional_impute(masked, calibration["ood"]), calibration)
        out.append(cal.conformal_quantile(np.abs(pred - s_cal) / cal.scale_of(pred, mode), alpha))
    return out


def stored_calibration_answers(calibration: dict[str, Any]) -> np.ndarray:
    """The calibration models' anchor answers kept in a calibration dict (NaN = not answered)."""
    return np.array([[np.nan if v is None else v for v in row] for row in calibration["cal_answers"]],
                    dtype=np.float32)


def adaptive_info(estimator: AnchorEstimator, X_train: np.ndarray, s_train: np.ndarray,
                  calibration: dict[str, Any], *, weights: np.ndarray | None = None) -> dict[str, Any]:
    """``{"order": [...], "q_by_prefix": [...]}`` for ``extra["adaptive"]`` of a predictor."""
    assert estimator.anchor_fill_ is not None
    order = anchor_order(X_train, s_train, estimator.anchor_fill_, weights=weights)
    return {"order": order.tolist(), "q_by_prefix": prefix_quantiles(estimator, order, calibration)}


def order_of(artifact: PredictorArtifact) -> list[int]:
    """The artifact's anchor order (positions); predictors published before adaptive anchors
    existed use their position order."""
    adaptive = artifact.extra.get("adaptive") or {}
    return list(adaptive.get("order", range(artifact.k)))


def is_prefix(observed: np.ndarray, order: list[int]) -> bool:
    """Whether the answered anchors (boolean per position) are exactly the first few of ``order``."""
    p = int(np.sum(observed))
    return bool(np.all(observed[order[:p]]))


def probe_item_info(plan: ProbePlan, positions: tuple[int, ...], benchmark: str) -> tuple[AnchorInfo, ...]:
    """Items of a probe plan (positions in its items) where a model runs them (position and column -1: they
    are not predictor inputs)."""
    return tuple(AnchorInfo(-1, -1, plan.items[j], *plan.locations[j], benchmark) for j in positions)


@dataclass(frozen=True)
class NextStep:
    """What a model should run next: nothing (target met / all answered), the next anchors, or the
    items of its probe."""

    model: str
    n_answered: int
    k: int
    predicted: float | None  #: None when nothing is answered yet
    halfwidth: float | None  #: interval half-width in [0, 1] units (None: nothing answered)
    done: bool
    reason: str
    items: tuple[AnchorInfo, ...]  #: what to run next (a probe item's position is -1: not a predictor input)
    stage: str = STAGE_ANCHORS  #: which stage the prediction comes from (``probe``: the second)
    probe_answered: int = 0  #: probe items answered in its draw's order

    @property
    def next_item_ids(self) -> tuple[str, ...]:
        return tuple(a.item_id for a in self.items)

    @property
    def next_benchmarks(self) -> tuple[str | None, ...]:
        return tuple(a.benchmark for a in self.items)

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "n_answered": self.n_answered, "k": self.k, "predicted": self.predicted,
                "halfwidth": self.halfwidth, "done": self.done, "reason": self.reason, "stage": self.stage,
                "probe_answered": self.probe_answered,
                "next": [{"position": a.position if a.position >= 0 else None, "item_id": a.item_id,
                          "benchmark": a.benchmark, "probe": a.position < 0} for a in self.items]}


def next_anchors(artifact: PredictorArtifact, models: list[str], X: np.ndarray, halfwidths: np.ndarray | None,
                 predicted: np.ndarray | None, *, batch: int = 10,
                 target_width: float | None = None,
                 flags: list[tuple[str, ...]] | None = None,
                 probes: list[ProbeState | None] | None = None, plan: ProbePlan | None = None) -> list[NextStep]:
    """The next ``batch`` anchors (in the artifact's order, never one already answered) per model,
    or ``done`` when its half-width is at most ``target_width`` (in [0, 1] units) or all are answered.

    ``X``: answers per model (NaN = not answered); ``halfwidths``/``predicted``: the current interval
    half-width and prediction per model (NaN for a model with nothing answered); ``flags``: the
    guard's reasons per model (:mod:`sparseeval.estimate.frontier`). A flagged model is never done early: its
    interval may not hold, so a narrow one meets no target; it runs the next anchors, and the reason says
    why. ``probes``: per model, its place in the probe of ``plan`` (:func:`sparseeval.estimate.predicting.probe_states`;
    None: the anchors do not place it at the top). Such a model runs every anchor and its probe's batches,
    and is done when the probe says so: its number then comes from the probe (:mod:`sparseeval.estimate.probe`).
    """
    if batch < 1:
        raise UsageError(f"batch must be at least 1, got {batch}")
    order = order_of(artifact)
    out = []
    for i, model in enumerate(models):
        answered = ~np.isnan(X[i])
        n = int(answered.sum())
        half = None if halfwidths is None or np.isnan(halfwidths[i]) else float(halfwidths[i])
        pred = None if predicted is None or np.isnan(predicted[i]) else float(predicted[i])
        todo = [p for p in order if not answered[p]]
        state = probes[i] if probes is not None else None
        if state is not None and plan is not None:
            anchors = tuple(_with_benchmark(artifact, artifact.anchors[p]) for p in todo)
            items = anchors + probe_item_info(plan, state.next_items, artifact.benchmark)
            if state.estimate is not None:
                pred = state.estimate.predicted
                half = (state.estimate.upper - state.estimate.lower) / 2
            out.append(NextStep(model, n, artifact.k, pred, half, not items,
                                f"placed at the top by its anchors: {state.reason}", items,
                                STAGE_PROBE if state.estimate is not None else STAGE_ANCHORS, state.answered))
            continue
        why = flags[i] if flags is not None else ()
        if not todo:
            reason, nxt = "all anchors answered" + (f"; flagged: {why[0]}" if why else ""), []
        elif why and target_width is not None and half is not None and half <= target_width:
            nxt = todo[:batch]
            reason = f"half-width {100 * half:.2f} points meets the target, but flagged: {why[0]}"
        elif target_width is not None and half is not None and half <= target_width:
            reason, nxt = f"target met: half-width {100 * half:.2f} <= {100 * target_width:.2f} points", []
        else:
            nxt = todo[:batch]
            reason = ("nothing answered yet" if n == 0 else
                      f"half-width {100 * half:.2f} points" if half is not None else "")
            if target_width is not None and half is not None:
                reason += f" > target {100 * target_width:.2f}"
        items = tuple(_with_benchmark(artifact, artifact.anchors[p]) for p in nxt)
        out.append(NextStep(model, n, artifact.k, pred, half, not items, reason, items))
    return out


def _with_benchmark(artifact: PredictorArtifact, a: AnchorInfo) -> AnchorInfo:
    """``a`` naming its benchmark (a single-benchmark predictor's anchors leave it to the predictor)."""
    return a if a.benchmark is not None else replace(a, benchmark=artifact.benchmark)
