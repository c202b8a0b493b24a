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
from sparseeval.artifact import PredictorArtifact, build_anchors, load_predictor
from sparseeval.evaluation import fit_on_split
from sparseeval.matrix import ResponseMatrix, build_matrix
from sparseeval.methods.base import AnchorEstimator
from sparseeval.splits import Split, make_split

#: fraction of the fitting models the estimator may use for early stopping (never calibration)
VAL_FRAC = 0.1


class TooFewAnchorsError(ValueError):
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
    ood: bool  #: anchor answers unlike the training models' (interval less trustworthy)
    ood_score: float
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["warnings"] = list(self.warnings)
        return d


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


def _as_artifact(artifact_or_folder: PredictorArtifact | str | Path) -> PredictorArtifact:
    if isinstance(artifact_or_folder, PredictorArtifact):
        return artifact_or_folder
    return load_predictor(artifact_or_folder)


def anchor_matrix(artifact: PredictorArtifact, answers: pl.DataFrame) -> tuple[list[str], np.ndarray]:
    """Models of ``answers`` on the artifact's benchmark and their answers to the anchors (NaN = none).

    Raises ``ValueError`` when the answers hold nothing for the benchmark or repeat an item.
    """
    rows = answers.lazy().filter(pl.col("benchmark") == artifact.benchmark).select(
        pl.col("model").cast(pl.String), pl.col("item_id").cast(pl.String), pl.col("score").cast(pl.Float32)
    ).collect()
    if rows.height == 0:
        raise ValueError(f"the answers contain no results for benchmark {artifact.benchmark!r}")
    dup = rows.select("model", "item_id").is_duplicated()
    if dup.any():
        m, item = rows.filter(dup).row(0)[:2]
        raise ValueError(f"benchmark {artifact.benchmark!r}: model {m!r} answers item {item!r} twice "
                         "(two answer files for the same model name?)")
    models = rows.get_column("model").unique(maintain_order=True).to_list()
    model_idx = pl.DataFrame({"model": models, "row": np.arange(len(models), dtype=np.int64)})
    anchor_idx = pl.DataFrame({"item_id": artifact.anchor_item_ids,
                               "col": np.arange(artifact.k, dtype=np.int64)})
    coded = rows.join(anchor_idx, on="item_id").join(model_idx, on="model")
    X = np.full((len(models), artifact.k), np.nan, dtype=np.float32)
    rows_i, cols_i = coded.get_column("row").to_numpy(), coded.get_column("col").to_numpy()
    X[rows_i, cols_i] = coded.get_column("score").to_numpy()
    return models, X


def _predict_matrix(artifact: PredictorArtifact, models: list[str], X: np.ndarray) -> list[Prediction]:
    k = artifact.k
    answered = (~np.isnan(X)).sum(axis=1)
    need = (k + 1) // 2
    short = np.flatnonzero(answered < need)
    if short.size:
        m = models[short[0]]
        missing = [a for a, v in zip(artifact.anchor_item_ids, X[short[0]], strict=True) if np.isnan(v)]
        raise TooFewAnchorsError(
            f"model {m!r} answered {int(answered[short[0]])} of {k} anchors of {artifact.benchmark!r}; "
            f"at least {need} are needed (missing item ids: {', '.join(missing[:10])}"
            f"{' ...' if len(missing) > 10 else ''})"
            + (f"; {short.size - 1} other model(s) are also short" if short.size > 1 else ""))
    pred = artifact.estimator.predict(cal.conditional_impute(X, artifact.calibration["ood"]))
    lower, upper = cal.interval(pred, cal.halfwidths(artifact.estimator, pred, ~np.isnan(X),
                                                     artifact.calibration))
    ood_cfg = artifact.calibration["ood"]
    d2 = cal.ood_scores(X, ood_cfg)
    ood = d2 > ood_cfg["threshold"]
    lo_train, hi_train = artifact.train_models.get("score_min"), artifact.train_models.get("score_max")
    out = []
    for i, model in enumerate(models):
        warns = []
        if ood[i]:
            warns.append(f"OOD: anchor answers unlike the training models' (distance {d2[i]:.1f} > "
                         f"{ood_cfg['threshold']:.1f}, the {ood_cfg['percentile']:g}th percentile); "
                         "the interval may not hold")
        if answered[i] < k:
            warns.append(f"{k - answered[i]} of {k} anchors not answered: predicted from the rest, "
                         "interval widened")
        if lo_train is not None and hi_train is not None and not lo_train <= pred[i] <= hi_train:
            warns.append("prediction outside the training models' score range "
                         f"[{lo_train:.3f}, {hi_train:.3f}]")
        out.append(Prediction(model=model, benchmark=artifact.benchmark, predicted=float(pred[i]),
                              lower=float(lower[i]), upper=float(upper[i]), n_anchors=int(answered[i]),
                              k=k, ood=bool(ood[i]), ood_score=float(d2[i]), warnings=tuple(warns)))
    return out


def predict(artifact_or_folder: PredictorArtifact | str | Path, answers: pl.DataFrame) -> list[Prediction]:
    """Predict every model in ``answers`` (model, benchmark, item_id, score) on the artifact's benchmark.

    Missing anchors are predicted from the rest with a wider interval; a model with fewer than
    half of the anchors answered raises :class:`TooFewAnchorsError` naming it.
    """
    artifact = _as_artifact(artifact_or_folder)
    models, X = anchor_matrix(artifact, answers)
    return _predict_matrix(artifact, models, X)


def compare(artifact_or_folder: PredictorArtifact | str | Path, answers: pl.DataFrame,
            model_a: str, model_b: str) -> Comparison:
    """Paired comparison of two models answered on the same anchors.

    The interval is conformal on differences of pairs of calibration models, so errors the two
    models share (same anchors, same predictor) cancel instead of adding up.
    """
    artifact = _as_artifact(artifact_or_folder)
    models, X = anchor_matrix(artifact, answers)
    for m in (model_a, model_b):
        if m not in models:
            raise ValueError(f"model {m!r} has no answers for benchmark {artifact.benchmark!r} "
                             f"(models present: {', '.join(models[:10])})")
    if model_a == model_b:
        raise ValueError("compare needs two different models")
    rows = [models.index(model_a), models.index(model_b)]
    pa, pb = _predict_matrix(artifact, [model_a, model_b], X[rows])
    half = cal.pair_halfwidth(pa.k - pa.n_anchors, pb.k - pb.n_anchors, artifact.calibration)
    diff = pa.predicted - pb.predicted
    lower, upper = diff - half, diff + half
    warns = tuple(f"{p.model}: {w}" for p in (pa, pb) for w in p.warnings)
    return Comparison(model_a, model_b, artifact.benchmark, pa.predicted, pb.predicted, diff,
                      lower, upper, bool(lower > 0 or upper < 0), warns)


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
                  method: str, *, calibration_frac: float = 0.2, seed: int = 0, device: str = "auto",
                  alpha: float = 0.1, models: pl.DataFrame | None = None,
                  method_params: dict[str, Any] | None = None, row_mean_is_score: bool = False,
                  settings: dict[str, Any] | None = None) -> PredictorArtifact:
    """Fit ``method`` with ``k`` anchors on ``benchmark`` and calibrate it; return an unsaved artifact.

    Models are split once with ``seed``: ``calibration_frac`` held out for conformal calibration
    and the OOD threshold (never seen by the estimator), 10 % of the rest for the estimator's own
    validation (early stopping), the remainder for fitting. ``models`` (optional metadata with
    ``submitted_at``) adds the training date range to the artifact.
    """
    if not 0.0 < calibration_frac < 0.9:
        raise ValueError(f"calibration_frac must be in (0, 0.9), got {calibration_frac}")
    matrix = build_matrix(responses, scores, benchmark, row_mean_is_score=row_mean_is_score)
    split = make_split(matrix.models, policy="random", val_frac=VAL_FRAC * (1 - calibration_frac),
                       test_frac=calibration_frac, seed=seed)
    est = fit_on_split(matrix, split, method, k, seed, device=device, params=method_params)
    return artifact_from_fit(matrix, split, est, alpha=alpha, seed=seed, models=models, settings=settings)


def artifact_from_fit(matrix: ResponseMatrix, split: Split, est: AnchorEstimator, *, alpha: float = 0.1,
                      seed: int = 0, models: pl.DataFrame | None = None,
                      settings: dict[str, Any] | None = None) -> PredictorArtifact:
    """Calibrate an estimator fitted on ``split.train`` (+ ``split.val``) on the held-out
    ``split.test`` models and wrap it as an unsaved artifact.

    ``settings``: the evaluation settings of the training data (n-shot, metric, filter, harness;
    :meth:`sparseeval.store.Store.training_settings`), recorded in ``predictor.json`` so a user
    runs the anchors the same way (``export``) and ``predict`` can refuse answers run otherwise.

    The pipeline fits anchors once per benchmark and publishes that same estimator, so the test
    models of its split are the conformal calibration set: the estimator never saw them.
    """
    Y = matrix.with_nan()
    s = matrix.scores.astype(np.float32)
    fit_rows = np.concatenate([split.train, split.val])
    calibration = cal.calibrate(est, Y[split.test][:, est.anchors_], s[split.test],
                                Y[split.train][:, est.anchors_], alpha=alpha, seed=seed)
    calibration["split_seed"] = seed
    train_models = _train_summary([matrix.models[i] for i in fit_rows], s[fit_rows], models)
    return PredictorArtifact(estimator=est, benchmark=matrix.benchmark, item_ids=matrix.items,
                             anchors=build_anchors(est, matrix.benchmark, matrix.items),
                             calibration=calibration, train_models=train_models,
                             library_version=sparseeval.__version__,
                             extra={"settings": settings} if settings else {})
