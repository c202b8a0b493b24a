"""Score new models from their anchor answers: fit and publish, predict with intervals, compare.

The library API behind ``sparseeval fit / predict / compare``: pure functions over frames and
artifacts, no printing and no file writing except through :mod:`sparseeval.artifact`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

import sparseeval.methods  # registers every method: fitting and loading predictors look them up by name
from sparseeval import calibration as cal
from sparseeval import settings as defaults
from sparseeval.adaptive import adaptive_info, is_prefix, order_of
from sparseeval.artifact import PredictorArtifact, build_anchors, harness_location, load_predictor
from sparseeval.errors import UsageError, UserError
from sparseeval.frontier import (
    OWN_CUT,
    Guarded,
    carry_overall,
    direction,
    failed_cuts,
    guarded_predictions,
    interval_figures,
)
from sparseeval.matrix import ResponseMatrix, build_matrix
from sparseeval.methods import make_estimator
from sparseeval.methods.base import AnchorEstimator
from sparseeval.methods.joint import JOINT_METHOD, MEAN, JointData, JointSparseEval, joint_data
from sparseeval.probe import (
    PROBE_FROM_QUANTILE,
    PROBE_REASON,
    apply_probe,
    draw_probe_items,
    fit_probe,
    probe_means,
)
from sparseeval.refresh import FRONTIER_SILENT_MAX
from sparseeval.splits import Split, frontier_cut, make_split

#: fraction of the fitting models the estimator may use for early stopping (never calibration)
VAL_FRAC = defaults.DEFAULT_VAL_FRAC


class TooFewAnchorsError(UserError, ValueError):
    """A model answered fewer than half of the anchors: no prediction is trustworthy enough."""


@dataclass(frozen=True)
class Prediction:
    """Predicted full-benchmark score of one model, with its conformal interval."""

    model: str
    benchmark: str
    predicted: float  #: in [0, 1]
    lower: float
    upper: float
    n_anchors: int  #: anchors answered
    k: int  #: anchors in the predictor
    ood: bool  #: outside what the training models cover (the interval may not hold): see ``ood_reasons``
    ood_score: float  #: answer-pattern distance (one of the reasons, past its threshold)
    #: why the model may lie outside the training models' range, in words (empty: nothing to flag)
    ood_reasons: tuple[str, ...] = field(default_factory=tuple)
    warnings: tuple[str, ...] = field(default_factory=tuple)

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


def _as_artifact(artifact_or_folder: PredictorArtifact | str | Path) -> PredictorArtifact:
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
    """:func:`anchor_matrix`, and the same models' answers to the predictor's probe items
    (:mod:`sparseeval.probe`; None without a probe, or with ``probe=False``), from one read of ``answers``."""
    rows = _answer_rows(artifact, answers)
    models = rows.get_column("model").unique(maintain_order=True).to_list()
    benches = [a.benchmark or artifact.benchmark for a in artifact.anchors]
    X = _item_matrix(rows, models, benches, artifact.anchor_item_ids)
    items = (artifact.extra.get("probe") or {}).get("item_ids") if probe else None
    return models, X, None if not items else _item_matrix(rows, models, [artifact.benchmark] * len(items), items)


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


def _short_rows(artifact: PredictorArtifact, X: np.ndarray) -> np.ndarray:
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


def _shortfall(artifact: PredictorArtifact, row: np.ndarray) -> str:
    """Why a model with anchor answers ``row`` (NaN: not answered) is too short to predict."""
    return (f"answered {int((~np.isnan(row)).sum())} of {artifact.k} anchors of {artifact.benchmark!r}; "
            f"at least {_min_anchors(artifact)} are needed")


def _order_hint(artifact: PredictorArtifact) -> str:
    """What predicts from fewer anchors, where the predictor has an adaptive order."""
    return ("; answer the anchors in the predictor's order (`sparseeval next`) to predict from fewer"
            if "adaptive" in artifact.extra else "")


def _predict_matrix(artifact: PredictorArtifact, models: list[str], X: np.ndarray,
                    probe_answers: np.ndarray | None = None) -> list[Prediction]:
    """Predictions of ``models`` from their anchor answers ``X`` (and the probe's, where the predictor has one)."""
    answered = (~np.isnan(X)).sum(axis=1)
    short = _short_rows(artifact, X)
    if short.size:
        m = models[short[0]]
        missing = [a for a, v in zip(artifact.anchor_item_ids, X[short[0]], strict=True) if np.isnan(v)]
        raise TooFewAnchorsError(
            f"model {m!r} {_shortfall(artifact, X[short[0]])} (missing item ids: {', '.join(missing[:10])}"
            f"{' ...' if len(missing) > 10 else ''}){_order_hint(artifact)}"
            + (f"; {short.size - 1} other model(s) are also short" if short.size > 1 else ""))
    ood = artifact.calibration["ood"]  # shared by every output of a joint predictor
    imputed, d2 = cal.conditional_impute(X, ood), cal.ood_scores(X, ood)
    guarded = {name: guarded_predictions(est, calibration, X, imputed=imputed, d2=d2)
               for name, est, calibration in prediction_outputs(artifact)}
    if artifact.is_joint:
        guarded = carry_overall(guarded, MEAN)
    probe_warns: list[list[str]] = [[] for _ in models]
    if artifact.extra.get("probe") and not artifact.is_joint:
        guarded[artifact.benchmark], probe_warns = apply_probe(artifact.extra["probe"], guarded[artifact.benchmark],
                                                               probe_answers, answered)
    # the bar at its default at most: one raised to publish such a predictor knowingly (the refresh, the
    # pipeline's own scoring of newcomers) never hides the cut it failed from those who use its predictions
    bar = min(defaults.SETTINGS["frontier_silent_max"].value(), FRONTIER_SILENT_MAX)
    failed = failed_cuts(artifact.extra.get("frontier"), artifact.benchmark, bar)
    per_output = []
    for name, g in guarded.items():
        train_range = (artifact.train_models.get("score_min"), artifact.train_models.get("score_max"))
        if artifact.is_joint:
            train_range = tuple(artifact.train_models.get("score_range", {}).get(name) or [None, None])
        more = [[c.warning for c in failed if c.output == name and guarded[c.scored_by].pred[i] > c.cut]
                + probe_warns[i] for i in range(len(models))]
        per_output.append(_rows(artifact, name, models, g, answered, train_range, more))
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
                              warnings=tuple(warns)))
    return out


def predict(artifact_or_folder: PredictorArtifact | str | Path, answers: pl.DataFrame) -> list[Prediction]:
    """Predict every model in ``answers`` (model, benchmark, item_id, score) on the artifact's benchmark.

    Missing anchors are predicted from the rest with an interval calibrated for exactly what was
    answered; a model with fewer than half of the anchors answered raises :class:`TooFewAnchorsError`
    naming it, unless its answers are a prefix of the predictor's adaptive order (``sparseeval next``).
    A joint predictor (``sparseeval-joint``) returns one row per benchmark plus one for ``mean``.
    """
    artifact = _as_artifact(artifact_or_folder)
    return _predict_matrix(artifact, *answer_matrices(artifact, answers))


def predict_scorable(artifact_or_folder: PredictorArtifact | str | Path,
                     answers: pl.DataFrame) -> tuple[list[Prediction], dict[str, str]]:
    """:func:`predict` for every model in ``answers`` that answered enough anchors, and, for each other
    model, why it was not predicted (``{model: reason}``).

    Why not :func:`predict`: a user who runs ``predict`` on a sheet is told which model is short and fixes
    it, but a store scores every newcomer it holds at once, and one model that ran a handful of anchors
    (a half-finished run, answers to the probe alone) must neither stop the others from being scored nor
    be given a number its answers cannot support."""
    artifact = _as_artifact(artifact_or_folder)
    models, X, P = answer_matrices(artifact, answers)
    short = set(_short_rows(artifact, X).tolist())
    skipped = {models[i]: _shortfall(artifact, X[i]) + _order_hint(artifact) for i in sorted(short)}
    keep = [i for i in range(len(models)) if i not in short]
    if not keep:
        return [], skipped
    return _predict_matrix(artifact, [models[i] for i in keep], X[keep], None if P is None else P[keep]), skipped


def compare(artifact_or_folder: PredictorArtifact | str | Path, answers: pl.DataFrame,
            model_a: str, model_b: str) -> Comparison:
    """Paired comparison of two models answered on the same anchors.

    The interval is conformal on differences of pairs of calibration models, so errors the two
    models share (same anchors, same predictor) cancel instead of adding up.
    """
    artifact = _as_artifact(artifact_or_folder)
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
    half = cal.pair_halfwidth(pa.k - pa.n_anchors, pb.k - pb.n_anchors, artifact.calibration)
    diff = pa.predicted - pb.predicted
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


def _train_summary(models: list[str], scores: np.ndarray, dates: pl.DataFrame | None) -> dict[str, Any]:
    summary: dict[str, Any] = {"count": len(models), "score_min": float(np.min(scores)),
                               "score_max": float(np.max(scores)), "score_mean": float(np.mean(scores))}
    if dates is not None and dates.height:
        got = dates.filter(pl.col("model").is_in(models)).get_column("submitted_at").drop_nulls()
        if got.len():
            summary["date_min"] = str(got.min())
            summary["date_max"] = str(got.max())
    return summary


def fit_predictor(responses: pl.DataFrame, scores: pl.DataFrame | None, benchmark: str, k: int,
                  method: str, *, calibration_frac: float = defaults.DEFAULT_CALIBRATION_FRAC,
                  seed: int = defaults.DEFAULT_SEED, device: str = defaults.DEFAULT_DEVICE,
                  alpha: float = defaults.DEFAULT_ALPHA, models: pl.DataFrame | None = None,
                  method_params: dict[str, Any] | None = None, row_mean_is_score: bool = False,
                  settings: dict[str, Any] | None = None, frontier_quantile: float | None = None,
                  probe_items: int | None = None, probe_from: float = PROBE_FROM_QUANTILE) -> PredictorArtifact:
    """Fit ``method`` with ``k`` anchors on ``benchmark`` and calibrate it; return an unsaved artifact.

    Models are split once with ``seed``: ``calibration_frac`` held out for conformal calibration
    and the OOD threshold (never seen by the estimator), 10 % of the rest for the estimator's own
    validation (early stopping), the remainder for fitting. ``models`` (optional metadata with
    ``submitted_at``) adds the training date range to the artifact. ``frontier_quantile``: also run
    the frontier self-check the pipeline gates on (:func:`sparseeval.evaluation.frontier_selfcheck`,
    on the fitting models, cut at that quantile) and publish its figures with the predictor.
    ``probe_items``: also draw a probe of that many random non-anchor items (:mod:`sparseeval.probe`),
    its line fitted on the fitting models, its level (the ``probe_from`` quantile of the calibration models'
    predictions), threshold and interval on the calibration models.
    """
    if not 0.0 < calibration_frac < 0.9:
        raise UsageError(f"calibration_frac must be in (0, 0.9), got {calibration_frac}")
    # the protocol's fitting code (SciPy, torch): fit time only
    from sparseeval.evaluation import frontier_selfcheck

    matrix = build_matrix(responses, scores, benchmark, row_mean_is_score=row_mean_is_score)
    art, split = _fit_matrix(matrix, k, method, calibration_frac=calibration_frac, seed=seed, device=device,
                             alpha=alpha, models=models, method_params=method_params, settings=settings,
                             probe_items=probe_items, probe_from=probe_from)
    if frontier_quantile is not None:
        fitting = np.concatenate([split.train, split.val])
        art.extra["frontier"] = frontier_selfcheck(matrix, fitting, method, k, seed, quantile=frontier_quantile,
                                                   alpha=alpha, device=device, params=method_params)
        if probe_items is not None:
            art.extra["probe"]["selfcheck"] = probe_selfcheck(
                matrix, fitting, method, k, seed, probe_items, quantile=frontier_quantile, alpha=alpha,
                calibration_frac=calibration_frac, device=device, params=method_params, probe_from=probe_from)
    return art


def _fit_matrix(matrix: ResponseMatrix, k: int, method: str, *, calibration_frac: float, seed: int, device: str,
                alpha: float, models: pl.DataFrame | None = None, method_params: dict[str, Any] | None = None,
                settings: dict[str, Any] | None = None, probe_items: int | None = None,
                probe_from: float = PROBE_FROM_QUANTILE) -> tuple[PredictorArtifact, Split]:
    """:func:`fit_predictor` on a built matrix (no self-check): the artifact and the split it used."""
    from sparseeval.evaluation import fit_on_split

    split = make_split(matrix.models, policy="random", val_frac=VAL_FRAC * (1 - calibration_frac),
                       test_frac=calibration_frac, seed=seed)
    est = fit_on_split(matrix, split, method, k, seed, device=device, params=method_params)
    art = artifact_from_fit(matrix, split, est, alpha=alpha, seed=seed, models=models, settings=settings)
    if probe_items is not None:
        art.extra["probe"] = probe_for(art, matrix, split, probe_items, seed=seed, alpha=alpha,
                                       probe_from=probe_from)
    return art, split


def probe_selfcheck(matrix: ResponseMatrix, rows: np.ndarray, method: str, k: int, seed: int, n: int, *,
                    quantile: float, alpha: float, calibration_frac: float, device: str,
                    params: dict[str, Any] | None = None, probe_from: float = PROBE_FROM_QUANTILE) -> dict[str, Any]:
    """The frontier self-check of a predictor with a probe: fitted (anchors, probe, calibration) as ``fit``
    fits it, on the fitting models ``rows`` at or below their ``quantile`` quantile of the score, and the
    stronger rest predicted as ``predict`` predicts them given their answers to the anchors *and* the
    probe. :func:`sparseeval.evaluation.frontier_selfcheck`'s figures (``mae``, ``bias``, ``coverage``,
    ``halfwidth``, ``flagged``, ``silent_misses``, ``n``, ``cut_score``), plus ``probe_flagged`` and
    ``anchors_alone``: the same predictor's figures on the same models from their anchors only (the
    pipeline's self-check fits its own predictor, so its figures are not the baseline to compare with)."""
    from sparseeval.evaluation import too_few_beyond

    sub = matrix.take_models(np.asarray(rows, dtype=np.int64))
    cut, beyond = frontier_cut(sub.scores, quantile)
    if (unmeasured := too_few_beyond(beyond, quantile, "")) is not None:
        return unmeasured
    inner, _ = _fit_matrix(sub.take_models(np.flatnonzero(~beyond)), k, method, calibration_frac=calibration_frac,
                           seed=seed, device=device, alpha=alpha, method_params=params, probe_items=n,
                           probe_from=probe_from)
    stronger = np.flatnonzero(beyond)
    column = {item: j for j, item in enumerate(sub.items)}
    probe_cols = np.array([column[i] for i in inner.extra["probe"]["item_ids"]])
    X = sub.with_nan_at(stronger, np.array([a.column for a in inner.anchors]))
    names, truth = [sub.models[i] for i in stronger], sub.scores[stronger]
    checked = _predict_matrix(inner, names, X, sub.with_nan_at(stronger, probe_cols))
    return {"measured": True, **prediction_figures(checked, truth), "quantile": quantile, "cut_score": cut,
            "method": method, "k": k, "anchors_alone": prediction_figures(_predict_matrix(inner, names, X), truth)}


def prediction_figures(preds: list[Prediction], truth: np.ndarray) -> dict[str, Any]:
    """:func:`sparseeval.frontier.interval_figures` of ``predict``'s predictions against the true scores
    ``truth`` (same order), plus ``probe_flagged``: the share flagged by a probe (:mod:`sparseeval.probe`)."""
    g = Guarded(np.array([p.predicted for p in preds]), np.zeros(len(preds)), np.array([p.lower for p in preds]),
                np.array([p.upper for p in preds]), np.zeros(len(preds)), [p.ood_reasons for p in preds])
    probed = [any(r.startswith(PROBE_REASON) for r in p.ood_reasons) for p in preds]
    return {**interval_figures(g, truth).as_dict(), "probe_flagged": float(np.mean(probed)) if probed else 0.0}


def probe_for(art: PredictorArtifact, matrix: ResponseMatrix, split: Split, n: int, *, seed: int,
              alpha: float, probe_from: float = PROBE_FROM_QUANTILE) -> dict[str, Any]:
    """A probe of ``n`` random non-anchor items for a fitted single-benchmark predictor
    (:func:`sparseeval.probe.fit_probe`): its line on the fitting models (``split.train`` + ``split.val``),
    the rest on the calibration models (``split.test``), whose anchor predictions come through the same
    path ``predict`` takes (guard, lift), so the threshold measures what a new model's prediction does."""
    assert art.estimator.anchors_ is not None
    cols = draw_probe_items(len(matrix.items), art.estimator.anchors_, n, seed)
    means = probe_means(matrix.values[:, cols], matrix.observed[:, cols])
    fit_rows = np.concatenate([split.train, split.val])
    X_cal = matrix.with_nan_at(split.test, art.estimator.anchors_)
    enough = np.setdiff1d(np.arange(split.test.size), _short_rows(art, X_cal))  # those predict would score
    cal_rows = split.test[enough]
    names = [matrix.models[i] for i in cal_rows]
    pred_cal = np.array([p.predicted for p in _predict_matrix(art, names, X_cal[enough])])
    by_prefix = None
    if "adaptive" in art.extra:  # the same models from each shorter prefix of the adaptive order, as `next`
        order = order_of(art)  # asks them; the full prefix is pred_cal itself
        by_prefix = []
        for p in range(1, art.k):
            X_p = X_cal[enough].copy()
            X_p[:, order[p:]] = np.nan
            scored = np.setdiff1d(np.arange(len(names)), _short_rows(art, X_p))
            pred_p = np.full(len(names), np.nan)
            pred_p[scored] = [q.predicted for q in _predict_matrix(art, [names[i] for i in scored], X_p[scored])]
            by_prefix.append(pred_p)
        by_prefix.append(pred_cal)
    items = [matrix.items[c] for c in cols]
    return fit_probe(items, means[fit_rows], matrix.scores[fit_rows].astype(np.float64), means[cal_rows],
                     matrix.scores[cal_rows].astype(np.float64), pred_cal, alpha=alpha,
                     locations=[harness_location(matrix.benchmark, i) for i in items], level_quantile=probe_from,
                     pred_cal_by_prefix=by_prefix)


def artifact_from_fit(matrix: ResponseMatrix, split: Split, est: AnchorEstimator, *,
                      alpha: float = defaults.DEFAULT_ALPHA, seed: int = defaults.DEFAULT_SEED,
                      models: pl.DataFrame | None = None,
                      settings: dict[str, Any] | None = None,
                      frontier: dict[str, Any] | None = None) -> PredictorArtifact:
    """Calibrate an estimator fitted on ``split.train`` (+ ``split.val``) on the held-out
    ``split.test`` models and wrap it as an unsaved artifact.

    ``settings``: the evaluation settings of the training data (n-shot, metric, filter, harness;
    :meth:`sparseeval.store.Store.training_settings`), recorded in ``predictor.json`` so a user
    runs the anchors the same way (``export``) and ``predict`` can refuse answers run otherwise.

    The pipeline fits anchors once per benchmark and publishes that same estimator, so the test
    models of its split are the conformal calibration set: the estimator never saw them.
    ``frontier``: the frontier self-check's figures (:func:`sparseeval.evaluation.frontier_selfcheck`),
    published with the predictor so its users see how it fares on models stronger than its training models.
    """
    assert est.anchors_ is not None
    X_train = matrix.with_nan_at(split.train, est.anchors_)  # the anchor columns only: no copy of the matrix
    s = matrix.scores.astype(np.float32)
    fit_rows = np.concatenate([split.train, split.val])
    calibration = cal.calibrate(est, matrix.with_nan_at(split.test, est.anchors_), s[split.test], X_train,
                                alpha=alpha, seed=seed, s_train=s[split.train])
    calibration["split_seed"] = seed
    train_models = _train_summary([matrix.models[i] for i in fit_rows], s[fit_rows], models)
    extra: dict[str, Any] = {"settings": settings} if settings else {}
    if frontier:
        extra["frontier"] = frontier
    # the order to ask the anchors in (training models only) and the conformal quantile per prefix
    extra["adaptive"] = adaptive_info(est, X_train, s[split.train], calibration)
    return PredictorArtifact(estimator=est, benchmark=matrix.benchmark, item_ids=matrix.items,
                             anchors=build_anchors(est, matrix.benchmark, matrix.items),
                             calibration=calibration, train_models=train_models,
                             library_version=sparseeval.__version__, extra=extra)


# ------------------------------------------------------------------------------------------------
# Joint predictors (sparseeval-joint): several benchmarks, one anchor set
# ------------------------------------------------------------------------------------------------
def fit_joint(data: JointData, split: Split, k: int, seed: int, *, device: str = defaults.DEFAULT_DEVICE,
              method_params: dict[str, Any] | None = None) -> JointSparseEval:
    """Fit ``sparseeval-joint`` with ``k`` items *per benchmark* on ``split.train`` (``split.val``
    for early stopping and alphas); test rows are never touched."""
    est = make_estimator(JOINT_METHOD, k * len(data.benchmarks), random_state=seed, device=device,
                         groups=data.groups, benchmarks=data.benchmarks, **(method_params or {}))
    assert isinstance(est, JointSparseEval)
    has_val = len(split.val) > 0
    return est.fit(data.Y[split.train], data.S[split.train], data.Y[split.val] if has_val else None,
                   data.S[split.val] if has_val else None)


def joint_calibration(data: JointData, split: Split, est: JointSparseEval, *,
                      alpha: float = defaults.DEFAULT_ALPHA, seed: int = defaults.DEFAULT_SEED,
                      missing_up_to: int | None = None) -> dict[str, Any]:
    """The calibration of a joint estimator fitted on ``split.train`` (+ ``split.val``), on the held-out
    ``split.test`` models, per output (every benchmark and the mean): what its predictions, intervals
    and flags read (the frontier self-check needs no more; a published artifact adds its anchor order).

    Each benchmark output is lifted at the top of its training range by its own correction
    (:mod:`sparseeval.beyond`); the mean output averages those lifted predictions, so it stays their
    mean. ``missing_up_to``: as for :func:`sparseeval.calibration.calibrate`."""
    assert est.anchors_ is not None
    S = np.concatenate([data.S, data.S.mean(axis=1, keepdims=True)], axis=1).astype(np.float64)
    X_cal, X_train = data.Y[split.test][:, est.anchors_], data.Y[split.train][:, est.anchors_]
    outputs: dict[str, dict[str, Any]] = {}
    shared: dict[str, Any] = {}
    cache: dict[bytes, np.ndarray] = {}  # every output hides the same anchors: impute once
    for o, name in enumerate([*data.benchmarks, MEAN]):
        lifts = None if name != MEAN else [outputs[b].get("beyond", {}) for b in data.benchmarks]
        c = cal.calibrate(est.output(name), X_cal, S[split.test, o], X_train, alpha=alpha, seed=seed, cache=cache,
                          s_train=S[split.train, o], beyond_outputs=lifts, missing_up_to=missing_up_to)
        shared = {key: c.pop(key) for key in ("alpha", "ood", "cal_answers", "seed", "n_calibration")}
        outputs[name] = c
    return shared | {"outputs": outputs, "split_seed": seed}


def joint_artifact_from_fit(data: JointData, split: Split, est: JointSparseEval, *,
                            alpha: float = defaults.DEFAULT_ALPHA, seed: int = defaults.DEFAULT_SEED,
                            models: pl.DataFrame | None = None,
                            settings: dict[str, dict[str, Any]] | None = None,
                            frontier: dict[str, Any] | None = None) -> PredictorArtifact:
    """Calibrate a joint estimator fitted on ``split.train`` (+ ``split.val``) on the held-out
    ``split.test`` models, per output (every benchmark and the mean), and wrap it as an unsaved
    artifact whose benchmark is ``sparseeval-joint``. ``settings``: per benchmark, as for
    :func:`artifact_from_fit`; ``frontier``: the joint frontier self-check, per output under
    ``outputs`` (:func:`sparseeval.evaluation.joint_frontier_selfcheck`), published with it.

    Calibrated by :func:`joint_calibration`; the artifact adds what the fitting models were and the
    anchors' order for ``next``."""
    assert est.anchors_ is not None
    calibration = joint_calibration(data, split, est, alpha=alpha, seed=seed)
    Y = data.Y
    S = np.concatenate([data.S, data.S.mean(axis=1, keepdims=True)], axis=1).astype(np.float64)
    X_train = Y[split.train][:, est.anchors_]
    fit_rows = np.concatenate([split.train, split.val])
    fit_models = [data.models[i] for i in fit_rows]
    train_models = _train_summary(fit_models, S[fit_rows, -1], models)
    train_models["score_range"] = {name: [float(S[fit_rows, o].min()), float(S[fit_rows, o].max())]
                                   for o, name in enumerate([*data.benchmarks, MEAN])}
    order = adaptive_info(est.output(MEAN), X_train, data.S[split.train], output_calibration(calibration, MEAN),
                          weights=est.weights_)
    order["q_by_prefix"] = {MEAN: order["q_by_prefix"]}
    extra: dict[str, Any] = {"joint": {"benchmarks": list(data.benchmarks),
                                       "allocation": est.allocation()},
                             "adaptive": order | {"target_output": MEAN}}
    if settings:
        extra["settings"] = settings
    if frontier:
        extra["frontier"] = frontier
    return PredictorArtifact(estimator=est, benchmark=JOINT_METHOD, item_ids=list(data.columns),
                             anchors=build_anchors(est, JOINT_METHOD, list(data.columns)),
                             calibration=calibration, train_models=train_models,
                             library_version=sparseeval.__version__, extra=extra)


def fit_joint_predictor(responses: pl.DataFrame, scores: pl.DataFrame | None, benchmarks: list[str], k: int, *,
                        calibration_frac: float = defaults.DEFAULT_CALIBRATION_FRAC, seed: int = defaults.DEFAULT_SEED,
                        device: str = defaults.DEFAULT_DEVICE, alpha: float = defaults.DEFAULT_ALPHA,
                        models: pl.DataFrame | None = None, method_params: dict[str, Any] | None = None,
                        row_mean_is_score: bool = False, settings: dict[str, dict[str, Any]] | None = None,
                        frontier_quantile: float | None = None) -> PredictorArtifact:
    """Fit and calibrate a ``sparseeval-joint`` predictor with ``k`` items per benchmark on the models
    that have every one of ``benchmarks`` (split as in :func:`fit_predictor`); an unsaved artifact.
    ``frontier_quantile``: also run both frontier self-checks the pipeline gates on (the cut on the mean
    score and each benchmark's own) on the fitting models, published with the predictor."""
    if not 0.0 < calibration_frac < 0.9:
        raise UsageError(f"calibration_frac must be in (0, 0.9), got {calibration_frac}")
    data = joint_data([build_matrix(responses, scores, b, row_mean_is_score=row_mean_is_score)
                       for b in benchmarks])
    split = make_split(data.models, policy="random", val_frac=VAL_FRAC * (1 - calibration_frac),
                       test_frac=calibration_frac, seed=seed)
    est = fit_joint(data, split, k, seed, device=device, method_params=method_params)
    frontier = None
    if frontier_quantile is not None:
        from sparseeval.evaluation import joint_frontier_selfcheck, joint_own_cut_selfcheck  # fit time only

        rows = np.concatenate([split.train, split.val])
        cut = {"quantile": frontier_quantile, "alpha": alpha, "device": device, "params": method_params}
        frontier = {"outputs": joint_frontier_selfcheck(data, rows, k, seed, **cut),
                    OWN_CUT: joint_own_cut_selfcheck(data, rows, k, seed, **cut)}
    return joint_artifact_from_fit(data, split, est, alpha=alpha, seed=seed, models=models, settings=settings,
                                   frontier=frontier)
