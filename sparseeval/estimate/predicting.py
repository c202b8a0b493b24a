"""Score new models with a saved predictor: predict with intervals, in two stages, and compare two models.

The library API behind ``sparseeval predict / compare / next`` and the lm-eval task: pure functions over
answer frames and artifacts, NumPy and Polars only (the light install; fitting is :mod:`sparseeval.estimate.fitting`).

Two stages: the anchors' prediction with its conformal interval and the guard's flags
(:mod:`sparseeval.estimate.frontier`) for every model; for a model the anchors place at the top of their range,
the design-based estimate of its random probe (:mod:`sparseeval.estimate.probe`) once it answered it, with the
anchors' own estimate kept beside it. A model not placed there keeps the anchors' estimate exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from sparseeval.core import settings as defaults
from sparseeval.core.errors import UsageError, UserError
from sparseeval.estimate import calibration as cal
from sparseeval.estimate.adaptive import is_prefix, order_of
from sparseeval.estimate.artifact import PredictorArtifact, load_predictor
from sparseeval.estimate.frontier import (
    Guarded,
    carry_overall,
    direction,
    guarded_predictions,
    interval_figures,
)
from sparseeval.estimate.methods.base import AnchorEstimator
from sparseeval.estimate.methods.joint import MEAN, JointSparseEval
from sparseeval.estimate.probe import (
    LINE_BEYOND,
    STAGE_ANCHORS,
    STAGE_PROBE,
    ProbePlan,
    ProbeState,
    draw_order,
    older_probe,
    plan_of,
    probe_state,
    routed,
)
from sparseeval.estimate.selfcheck import PredictionFigures, SelfCheck

#: the bar of the frontier self-check's warning above a failed cut: the setting's default at most, so a bar
#: raised to publish such a predictor knowingly never hides the cut it failed from those who use it
DEFAULT_SILENT_MAX: float = defaults.SETTINGS["frontier_silent_max"].default_value


class TooFewAnchorsError(UserError, ValueError):
    """A model answered fewer than half of the anchors: no prediction is trustworthy enough."""


@dataclass(frozen=True)
class Prediction:
    """Predicted full-benchmark score of one model, with its interval and the stage that gave it."""

    model: str
    benchmark: str
    predicted: float  #: in [0, 1]
    lower: float
    upper: float
    n_anchors: int  #: anchors answered
    k: int  #: anchors in the predictor
    ood: bool  #: the interval may not hold (outside what the training models cover): see ``ood_reasons``
    ood_score: float  #: answer-pattern distance (one of the anchors' reasons, past its threshold)
    #: why the interval may not hold, in words (empty: nothing to flag)
    ood_reasons: tuple[str, ...] = field(default_factory=tuple)
    warnings: tuple[str, ...] = field(default_factory=tuple)
    #: which stage gave the number: ``anchors`` (conformal, from the anchors) or ``probe`` (by design)
    stage: str = STAGE_ANCHORS
    probe_items: int = 0  #: probe items the estimate used (the answered prefix of the model's draw)
    probe_next: int = 0  #: probe items the model is asked to run next (0: none asked, or done)
    anchors_predicted: float | None = None  #: the anchors' own estimate, where the probe gave the number
    design_halfwidth: float | None = None  #: the probe's sampling half-width (what more items shrink)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["warnings"] = list(self.warnings)
        d["ood_reasons"] = list(self.ood_reasons)
        return d

    @property
    def beyond(self) -> int:
        """+1 when a reason says the model may be stronger than every training model, -1 weaker, 0 neither."""
        return direction(self.ood_reasons)


@dataclass(frozen=True)
class Comparison:
    """Difference ``a - b`` of two models' predicted scores with a paired interval."""

    model_a: str
    model_b: str
    benchmark: str
    predicted_a: float
    predicted_b: float
    diff: float
    lower: float
    upper: float
    distinguishable: bool  #: the interval excludes 0
    warnings: tuple[str, ...] = field(default_factory=tuple)
    #: why a side of the interval is open (a model that may lie beyond the training range), in words
    open_sides: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["warnings"] = list(self.warnings)
        d["open_sides"] = list(self.open_sides)
        return d


def as_artifact(artifact_or_folder: PredictorArtifact | str | Path) -> PredictorArtifact:
    """A loaded predictor, from itself or its folder (or ``hf://`` source)."""
    if isinstance(artifact_or_folder, PredictorArtifact):
        return artifact_or_folder
    return load_predictor(artifact_or_folder)


def _answer_rows(artifact: PredictorArtifact, answers: pl.DataFrame) -> pl.DataFrame:
    """``answers`` on the artifact's benchmarks, typed; refuses none and an item answered twice."""
    benches = artifact.benchmarks
    rows = answers.lazy().filter(pl.col("benchmark").is_in(benches)).select(
        pl.col("model").cast(pl.String), pl.col("benchmark").cast(pl.String), pl.col("item_id").cast(pl.String),
        pl.col("score").cast(pl.Float32)
    ).collect()
    if rows.height == 0:
        raise UsageError(f"the answers contain no results for benchmark {', '.join(map(repr, benches))}")
    dup = rows.select("model", "benchmark", "item_id").is_duplicated()
    if dup.any():
        m, bench, item = rows.filter(dup).row(0)[:3]
        raise UsageError(f"benchmark {bench!r}: model {m!r} answers item {item!r} twice "
                         "(two answer files for the same model name?)")
    return rows


def _item_matrix(rows: pl.DataFrame, models: list[str], benchmarks: list[str], item_ids: list[str]) -> np.ndarray:
    """(models x items) answers of ``rows`` to the (benchmark, item id) pairs given (NaN = none)."""
    model_idx = pl.DataFrame({"model": models, "row": np.arange(len(models), dtype=np.int64)})
    item_idx = pl.DataFrame({"benchmark": benchmarks, "item_id": item_ids,
                             "col": np.arange(len(item_ids), dtype=np.int64)})
    coded = rows.join(item_idx, on=["benchmark", "item_id"]).join(model_idx, on="model")
    X = np.full((len(models), len(item_ids)), np.nan, dtype=np.float32)
    X[coded.get_column("row").to_numpy(), coded.get_column("col").to_numpy()] = coded.get_column("score").to_numpy()
    return X


def anchor_matrix(artifact: PredictorArtifact, answers: pl.DataFrame) -> tuple[list[str], np.ndarray]:
    """Models of ``answers`` on the artifact's benchmark and their answers to the anchors (NaN = none).

    Raises ``ValueError`` when the answers hold nothing for the benchmark or repeat an item.
    """
    models, X, _ = answer_matrices(artifact, answers, probe=False)
    return models, X


def answer_matrices(artifact: PredictorArtifact, answers: pl.DataFrame, *,
                    probe: bool = True) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    """:func:`anchor_matrix`, and the same models' answers to the items of the predictor's probe plan
    (:mod:`sparseeval.estimate.probe`; None without one, or with ``probe=False``), from one read of ``answers``."""
    rows = _answer_rows(artifact, answers)
    models = rows.get_column("model").unique(maintain_order=True).to_list()
    benches = [a.benchmark or artifact.benchmark for a in artifact.anchors]
    X = _item_matrix(rows, models, benches, artifact.anchor_item_ids)
    plan = plan_of(artifact.extra) if probe and not artifact.is_joint else None
    if plan is None:
        return models, X, None
    return models, X, _item_matrix(rows, models, [artifact.benchmark] * len(plan.items), list(plan.items))


def output_calibration(calibration: dict[str, Any], name: str) -> dict[str, Any]:
    """The single-output calibration dict of output ``name`` of a joint predictor's calibration."""
    shared = {key: v for key, v in calibration.items() if key != "outputs"}
    return shared | calibration["outputs"][name]


def prediction_outputs(artifact: PredictorArtifact) -> list[tuple[str, AnchorEstimator, dict[str, Any]]]:
    """(benchmark name, single-output estimator, its calibration) per output of the predictor:
    one for a single-benchmark predictor; every benchmark plus ``mean`` for a joint one."""
    if not artifact.is_joint:
        return [(artifact.benchmark, artifact.estimator, artifact.calibration)]
    est = artifact.estimator
    assert isinstance(est, JointSparseEval)
    return [(name, est.output(name), output_calibration(artifact.calibration, name))
            for name in [*artifact.benchmarks, MEAN]]


def short_rows(artifact: PredictorArtifact, X: np.ndarray) -> np.ndarray:
    """Rows answering too little: fewer than half the anchors, unless what they answered is a prefix of
    the predictor's adaptive order (the intervals are calibrated for exactly that prefix), and never
    nothing at all."""
    observed = ~np.isnan(X)
    answered = observed.sum(axis=1)
    need = _min_anchors(artifact)
    adaptive = "adaptive" in artifact.extra
    order = order_of(artifact)
    return np.array([i for i in range(X.shape[0])
                     if answered[i] == 0 or (answered[i] < need and not (adaptive and is_prefix(observed[i], order)))],
                    dtype=np.int64)


def _min_anchors(artifact: PredictorArtifact) -> int:
    """The fewest anchors a model must answer to be predicted outside a prefix of the adaptive order."""
    return (artifact.k + 1) // 2


def shortfall(artifact: PredictorArtifact, row: np.ndarray) -> str:
    """Why a model with anchor answers ``row`` (NaN: not answered) is too short to predict."""
    return (f"answered {int((~np.isnan(row)).sum())} of {artifact.k} anchors of {artifact.benchmark!r}; "
            f"at least {_min_anchors(artifact)} are needed")


def order_hint(artifact: PredictorArtifact) -> str:
    """What predicts from fewer anchors, where the predictor has an adaptive order."""
    return ("; answer the anchors in the predictor's order (`sparseeval next`) to predict from fewer"
            if "adaptive" in artifact.extra else "")


def first_stage(artifact: PredictorArtifact, X: np.ndarray) -> dict[str, Guarded]:
    """The anchors' guarded predictions per output (a joint predictor's benchmark outputs carry its mean's
    upward reasons, as :func:`sparseeval.estimate.frontier.carry_overall` says why)."""
    ood = artifact.calibration["ood"]  # shared by every output of a joint predictor
    imputed, d2 = cal.conditional_impute(X, ood), cal.ood_scores(X, ood)
    guarded = {name: guarded_predictions(est, calibration, X, imputed=imputed, d2=d2)
               for name, est, calibration in prediction_outputs(artifact)}
    return carry_overall(guarded, MEAN) if artifact.is_joint else guarded


def probe_states(plan: ProbePlan, models: list[str], X: np.ndarray, P: np.ndarray | None, g: Guarded, *,
                 target: float | None = None) -> list[ProbeState | None]:
    """Per model, where it stands with the probe: None when the anchors do not place it at the top (it keeps
    their estimate), else its :class:`sparseeval.estimate.probe.ProbeState` (``P``: answers to the plan's items)."""
    asked = routed(plan, g.pred, np.array([direction(r) > 0 for r in g.reasons], dtype=bool))
    out: list[ProbeState | None] = []
    for i, model in enumerate(models):
        if not asked[i]:
            out.append(None)
            continue
        answers = np.full(len(plan.items), np.nan) if P is None else P[i].astype(np.float64)
        out.append(probe_state(plan, model, answers, X[i].astype(np.float64), float(g.pred[i]), target=target))
    return out


def _predict_matrix(artifact: PredictorArtifact, models: list[str], X: np.ndarray,
                    pool_answers: np.ndarray | None = None) -> list[Prediction]:
    """Predictions of ``models`` from their anchor answers ``X`` and, where the predictor has a probe plan,
    their answers to its items ``pool_answers`` (None: none answered)."""
    answered = (~np.isnan(X)).sum(axis=1)
    short = short_rows(artifact, X)
    if short.size:
        m = models[short[0]]
        missing = [a for a, v in zip(artifact.anchor_item_ids, X[short[0]], strict=True) if np.isnan(v)]
        raise TooFewAnchorsError(
            f"model {m!r} {shortfall(artifact, X[short[0]])} (missing item ids: {', '.join(missing[:10])}"
            f"{' ...' if len(missing) > 10 else ''}){order_hint(artifact)}"
            + (f"; {short.size - 1} other model(s) are also short" if short.size > 1 else ""))
    guarded = first_stage(artifact, X)
    plan = None if artifact.is_joint else plan_of(artifact.extra)
    states = probe_states(plan, models, X, pool_answers, guarded[artifact.benchmark]) if plan else None
    bar = min(defaults.SETTINGS["frontier_silent_max"].value(), DEFAULT_SILENT_MAX)
    selfcheck = SelfCheck.of_predictor(artifact.extra, artifact.benchmark)
    failed = [] if selfcheck is None else selfcheck.failed_cuts(bar)
    older = older_probe(artifact.extra)
    per_output = []
    for name, g in guarded.items():
        train_range = (artifact.train_models.get("score_min"), artifact.train_models.get("score_max"))
        if artifact.is_joint:
            train_range = tuple(artifact.train_models.get("score_range", {}).get(name) or [None, None])
        more = [[c.warning for c in failed if c.output == name and guarded[c.scored_by].pred[i] > c.cut]
                for i in range(len(models))]
        if older and name == artifact.benchmark:
            level = float(artifact.extra["probe"].get("level", np.inf))
            stale = ("this predictor's probe is of an older kind (a disagreement check), not used: refit it for the "
                     "design-based second stage")
            more = [[*w, stale] if g.pred[i] >= level else w for i, w in enumerate(more)]
        rows = _rows(artifact, name, models, g, answered, train_range, more)
        if states is not None and name == artifact.benchmark:
            assert plan is not None
            rows = [row if state is None else _second_stage(plan, row, state) for row, state in zip(rows, states,
                                                                                                     strict=True)]
        per_output.append(rows)
    # per model: its benchmarks in order (a joint predictor's mean last)
    return [rows[i] for i in range(len(models)) for rows in per_output]


def _rows(artifact: PredictorArtifact, benchmark: str, models: list[str], g: Guarded, answered: np.ndarray,
          train_range: tuple[float | None, float | None], more_warnings: list[list[str]]) -> list[Prediction]:
    k = artifact.k
    lo_train, hi_train = train_range
    out = []
    for i, model in enumerate(models):
        why = g.reasons[i]
        warns = [f"OOD: {r}; the interval may not hold" for r in why] + more_warnings[i]
        if answered[i] < k:
            warns.append(f"{k - answered[i]} of {k} anchors not answered: predicted from the rest, "
                         "interval widened")
        # predictors calibrated before the guard existed: the range check they always had
        if (not why and lo_train is not None and hi_train is not None
                and not lo_train <= g.pred[i] <= hi_train):
            warns.append("prediction outside the training models' score range "
                         f"[{lo_train:.3f}, {hi_train:.3f}]")
        out.append(Prediction(model=model, benchmark=benchmark, predicted=float(g.pred[i]),
                              lower=float(g.lower[i]), upper=float(g.upper[i]), n_anchors=int(answered[i]),
                              k=k, ood=bool(why), ood_score=float(g.d2[i]), ood_reasons=why,
                              warnings=tuple(warns), anchors_predicted=float(g.pred[i])))
    return out


def _second_stage(plan: ProbePlan, row: Prediction, state: ProbeState) -> Prediction:
    """A routed model's row: the probe's estimate once its first batch is answered, else the anchors' with
    what to run; either way what the probe still asks for."""
    asks = f"{state.reason} (`sparseeval next` names them)" if state.next_items else ""
    if state.estimate is None:
        return replace(row, probe_next=len(state.next_items), warnings=(
            *row.warnings, f"placed at the top by its anchors (at or above {100 * plan.level:.1f}), where anchors "
                           f"alone miss stronger models: {asks or state.reason}; until then this is the anchors' "
                           "estimate"))
    est = state.estimate
    warns = [f"estimated by design from {state.answered} random items of its probe (sampling half-width "
             f"{100 * est.design_halfwidth:.1f} points); its anchors alone said {100 * row.predicted:.1f}"]
    warns += [f"anchors: {r}" for r in row.ood_reasons]
    if asks:
        warns.append(asks)
    if state.ignored:
        warns.append(f"{state.ignored} answers to probe items after a gap in its draw were not used (not a random "
                     "sample)")
    if row.n_anchors < row.k:
        warns.append(f"{row.k - row.n_anchors} anchor(s) unanswered: counted in the items' mean at what the anchors "
                     "expect of them, their variance in the interval")
    if not plan.link.whole:
        warns.append("the probe's items are a subset of the benchmark: a line fitted on the training models maps "
                     f"their mean to the score (its error at the top, {100 * plan.link.residual:.1f} points, is in "
                     "the interval)")
    reasons = (f"{LINE_BEYOND} beyond the training models' (items' mean {100 * est.pool_mean:.1f} > "
               f"{100 * plan.link.pool_max:.1f})",) if est.beyond_line else ()
    warns += [f"OOD: {r}; the interval may not hold" for r in reasons]
    return replace(row, predicted=est.predicted, lower=est.lower, upper=est.upper, ood=bool(reasons),
                   ood_reasons=reasons, warnings=tuple(warns), stage=STAGE_PROBE, probe_items=state.answered,
                   probe_next=len(state.next_items), design_halfwidth=est.design_halfwidth)


def predict(artifact_or_folder: PredictorArtifact | str | Path, answers: pl.DataFrame) -> list[Prediction]:
    """Predict every model in ``answers`` (model, benchmark, item_id, score) on the artifact's benchmark.

    Missing anchors are predicted from the rest with an interval calibrated for exactly what was
    answered; a model with fewer than half of the anchors answered raises :class:`TooFewAnchorsError`
    naming it, unless its answers are a prefix of the predictor's adaptive order (``sparseeval next``).
    A model the anchors place at the top that answered its probe is estimated by design from it.
    A joint predictor (``sparseeval-joint``) returns one row per benchmark plus one for ``mean``.
    """
    artifact = as_artifact(artifact_or_folder)
    return _predict_matrix(artifact, *answer_matrices(artifact, answers))


def predict_scorable(artifact_or_folder: PredictorArtifact | str | Path,
                     answers: pl.DataFrame) -> tuple[list[Prediction], dict[str, str]]:
    """:func:`predict` for every model in ``answers`` that answered enough anchors, and, for each other
    model, why it was not predicted (``{model: reason}``).

    Why not :func:`predict`: a user who runs ``predict`` on a sheet is told which model is short and fixes
    it, but a store scores every newcomer it holds at once, and one model that ran a handful of anchors
    (a half-finished run, answers to the probe alone) must neither stop the others from being scored nor
    be given a number its answers cannot support."""
    artifact = as_artifact(artifact_or_folder)
    models, X, P = answer_matrices(artifact, answers)
    short = set(short_rows(artifact, X).tolist())
    skipped = {models[i]: shortfall(artifact, X[i]) + order_hint(artifact) for i in sorted(short)}
    keep = [i for i in range(len(models)) if i not in short]
    if not keep:
        return [], skipped
    return _predict_matrix(artifact, [models[i] for i in keep], X[keep], None if P is None else P[keep]), skipped


def compare(artifact_or_folder: PredictorArtifact | str | Path, answers: pl.DataFrame,
            model_a: str, model_b: str) -> Comparison:
    """Paired comparison of two models answered on the same anchors.

    From the anchors, the interval is conformal on differences of pairs of calibration models, so errors
    the two models share (same anchors, same predictor) cancel instead of adding up. Where either model's
    number came from its probe, the two errors are independent (each model's own random draw): the
    half-widths add in quadrature.
    """
    artifact = as_artifact(artifact_or_folder)
    if artifact.is_joint:
        raise UsageError("compare works on single-benchmark predictors; a joint predictor's intervals are "
                         "per benchmark (use predict)")
    models, X, P = answer_matrices(artifact, answers)
    for m in (model_a, model_b):
        if m not in models:
            raise UsageError(f"model {m!r} has no answers for benchmark {artifact.benchmark!r} "
                             f"(models present: {', '.join(models[:10])})")
    if model_a == model_b:
        raise UsageError("compare needs two different models")
    rows = [models.index(model_a), models.index(model_b)]
    pa, pb = _predict_matrix(artifact, [model_a, model_b], X[rows], None if P is None else P[rows])
    diff = pa.predicted - pb.predicted
    if STAGE_PROBE in (pa.stage, pb.stage):
        half = float(np.hypot((pa.upper - pa.lower) / 2, (pb.upper - pb.lower) / 2))
    else:
        half = cal.pair_halfwidth(pa.k - pa.n_anchors, pb.k - pb.n_anchors, artifact.calibration)
    lower, upper, open_sides = open_for_extrapolation(diff - half, diff + half, pa, pb)
    warns = tuple(f"{p.model}: {w}" for p in (pa, pb) for w in p.warnings)
    return Comparison(model_a, model_b, artifact.benchmark, pa.predicted, pb.predicted, diff,
                      lower, upper, bool(lower > 0 or upper < 0), warns, open_sides)


def open_for_extrapolation(lower: float, upper: float, pa: Prediction,
                           pb: Prediction) -> tuple[float, float, tuple[str, ...]]:
    """The paired interval of ``a - b`` with a side opened (to the largest possible difference) for each
    model the guard says may lie beyond the training range: a model that may be stronger than every
    training model may be further ahead than its prediction says, so ``a - b`` has no upper bound when
    it is ``a`` and no lower bound when it is ``b`` (and the mirror for weaker). Two models beyond the
    top together are then never called distinguishable: the anchors cannot order them."""
    sides = []
    for p, sign in ((pa, 1), (pb, -1)):
        d = p.beyond * sign
        if d > 0:
            upper = 1.0
        elif d < 0:
            lower = -1.0
        if d:
            side = "upper" if d > 0 else "lower"
            sides.append(f"{side} side open: {p.model} may be {'stronger' if p.beyond > 0 else 'weaker'} than every "
                         f"training model ({p.ood_reasons[0]})")
    return lower, upper, tuple(sides)


def prediction_figures(preds: list[Prediction], truth: np.ndarray) -> PredictionFigures:
    """:func:`sparseeval.estimate.frontier.interval_figures` of ``predict``'s predictions against the true scores
    ``truth`` (same order), plus the second stage's share and items: ``probed`` (the share whose number
    came from the probe), ``probe_items_mean`` / ``probe_items_max`` (over those)."""
    g = Guarded(np.array([p.predicted for p in preds]), np.zeros(len(preds)), np.array([p.lower for p in preds]),
                np.array([p.upper for p in preds]), np.zeros(len(preds)), [p.ood_reasons for p in preds])
    used = [p.probe_items for p in preds if p.stage == STAGE_PROBE]
    return PredictionFigures(**interval_figures(g, truth).as_dict(), probed=len(used) / len(preds) if preds else 0.0,
                             probe_items_mean=float(np.mean(used)) if used else 0.0,
                             probe_items_max=int(max(used)) if used else 0)


def follow_probe(artifact: PredictorArtifact, models: list[str], X: np.ndarray, pool: np.ndarray) -> list[Prediction]:
    """``predict``'s predictions of models whose answers to the probe plan's items are known (``pool``, aligned
    with the plan's items; NaN: no answer), each answering what its probe asks, batch by batch, until it asks
    for nothing more or for nothing it can answer (an anchor or item it has no answer to): what a user who
    follows ``sparseeval next`` gets (the frontier self-check and the benches score with it). Without a probe
    plan, the anchors' predictions."""
    plan = plan_of(artifact.extra)
    if plan is None:
        return _predict_matrix(artifact, models, X)
    given = np.full(pool.shape, np.nan, dtype=np.float32)
    orders: dict[int, np.ndarray] = {}
    stuck: set[int] = set()
    while True:
        preds = _predict_matrix(artifact, models, X, given)
        asked = [i for i, p in enumerate(preds) if p.probe_next and i not in stuck]
        if not asked:
            return preds
        for i in asked:
            order = orders.setdefault(i, draw_order(plan, models[i]))
            n = preds[i].probe_items + preds[i].probe_next
            before = int((~np.isnan(given[i])).sum())
            given[i, order[:n]] = pool[i, order[:n]]
            if int((~np.isnan(given[i])).sum()) == before:  # it cannot answer what it is asked
                stuck.add(i)
