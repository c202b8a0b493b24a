"""The leak-proof evaluation protocol: every method on identical model splits and seeds.

For each seed one split of *models* is drawn (random, by family or by date); every method and
every K is fitted on that seed's training models (validation models for early stopping and
hyper-parameter choices) and scored on its test models, which ``fit`` never receives. Different
seeds give different splits and different initialisations, so the spread over seeds is honest.

With ``calibration_frac`` the protocol also runs the product's interval path: that share of the
fitting side (never the test models) is held out of fitting as conformal calibration models, and each
test model gets its interval and the extrapolation guard's flags (:mod:`sparseeval.estimate.frontier`), as
``sparseeval fit`` then ``sparseeval predict`` would give it. Under a ``frontier`` split the test
models are the ones stronger than every fitting and calibration model: the protocol for new models.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from sparseeval.core import settings as defaults
from sparseeval.data.matrix import ResponseMatrix
from sparseeval.estimate import calibrate
from sparseeval.estimate.frontier import carry_overall, guarded_predictions, interval_figures
from sparseeval.estimate.joint_fit import fit_joint, joint_calibration
from sparseeval.estimate.methods import AnchorEstimator, make_estimator
from sparseeval.estimate.methods.joint import (
    JOINT_METHOD,
    JOINT_SEP,
    MEAN,
    JointData,
    JointSparseEval,
    common_models,
    joint_data,
    restrict_models,
)
from sparseeval.estimate.metrics import score_metrics
from sparseeval.estimate.predicting import output_calibration
from sparseeval.estimate.selfcheck import CutFigures
from sparseeval.estimate.splits import FRONTIER_QUANTILE, Split, SplitPolicy, frontier_cut, make_split

log = logging.getLogger(__name__)

#: the methods compared by default (all registered baselines and both SparseEval proxies)
DEFAULT_METHODS = defaults.PROTOCOL_METHODS


@dataclass
class EvalResult:
    """One (benchmark, method, k, seed) evaluation on held-out test models."""

    benchmark: str
    method: str
    k: int
    seed: int
    split_policy: str
    mae: float
    tau: float
    rho: float
    max_error: float
    seconds: float
    n_train: int
    n_val: int
    n_test: int
    anchors: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    # measured only with a calibration share (ProtocolConfig.calibration_frac): None otherwise
    bias: float | None = None  #: mean of predicted - true, points
    coverage: float | None = None  #: share of test models inside their conformal interval
    halfwidth: float | None = None  #: mean interval half-width, points
    flagged: float | None = None  #: share of test models flagged (OOD reasons)
    silent_misses: float | None = None  #: share outside their interval and not flagged
    n_cal: int | None = None

    def row(self) -> dict[str, Any]:
        """Flat record without the anchor list and details (for tables, JSON and DuckDB); the interval
        figures only when they were measured."""
        out = asdict(self)
        out.pop("anchors")
        out.pop("details")
        return {key: v for key, v in out.items() if key not in INTERVAL_FIELDS or v is not None}


#: the fields of :class:`EvalResult` measured only with a calibration share
INTERVAL_FIELDS = ("bias", "coverage", "halfwidth", "flagged", "silent_misses", "n_cal")


@dataclass(frozen=True)
class ProtocolConfig:
    """How models are split; the same config gives the same splits for every method."""

    split_policy: SplitPolicy = defaults.DEFAULT_SPLIT_POLICY  # type: ignore[assignment]
    val_frac: float = defaults.DEFAULT_VAL_FRAC
    #: ignored by the frontier policies (their test share is 1 - frontier_quantile)
    test_frac: float = defaults.DEFAULT_TEST_FRAC
    frontier_quantile: float = FRONTIER_QUANTILE
    #: share of the fitting side held out as conformal calibration models (0: point predictions only)
    calibration_frac: float = 0.0
    alpha: float = defaults.DEFAULT_ALPHA  #: interval miscoverage when calibrating
    #: flag with the extrapolation guard's reasons too (False: the answer-pattern distance alone, as
    #: predictors calibrated before the guard existed: the "before" figures)
    guard: bool = True
    #: tail mass of the lift at the top of the training range (:mod:`sparseeval.estimate.beyond`; 0: no lift,
    #: predictions as the estimator makes them)
    beyond_prior: float = defaults.DEFAULT_BEYOND_PRIOR

    @classmethod
    def of(cls, s: defaults.RefreshSettings) -> ProtocolConfig:
        """The split a refresh's settings ``s`` ask for (the rest at its defaults)."""
        return cls(split_policy=s.split_policy, val_frac=s.val_frac, test_frac=s.test_frac)  # type: ignore[arg-type]


def split_for_seed(matrix: ResponseMatrix, seed: int, config: ProtocolConfig,
                   dates: Sequence[Any] | None = None) -> Split:
    """The split of ``matrix``'s models used by every method for ``seed``."""
    return make_split(matrix.models, policy=config.split_policy, val_frac=config.val_frac,
                      test_frac=config.test_frac, seed=seed, dates=dates, scores=matrix.scores,
                      frontier_quantile=config.frontier_quantile)


def calibration_split(models: Sequence[str], split: Split, frac: float, seed: int) -> tuple[Split, np.ndarray]:
    """(the split with ``frac`` of its fitting side (training + validation models) moved out of training,
    those calibration rows): the models a conformal calibration sees and the estimator never does.
    Drawn from the training side only, with spellings of one model kept together; test untouched."""
    n_fit = len(split.train) + len(split.val)
    share = frac * n_fit / max(len(split.train), 1)
    if not 0.0 < share < 1.0:
        raise ValueError(f"calibration_frac {frac} leaves no training models")
    inner = make_split([models[i] for i in split.train], policy="random", val_frac=0.0, test_frac=share,
                       seed=seed + 7907)
    return Split(split.train[inner.train], split.val, split.test), split.train[inner.test]


def split_rows(matrix: ResponseMatrix, split: Split) -> tuple[np.ndarray, np.ndarray | None]:
    """The training and validation rows (NaN where unobserved) every fit on ``split`` reads: a
    comparison computes them once per split for all its fits (at leaderboard scale 600 MB each time;
    no estimator writes into its input, ``tests/test_evaluation.py`` checks every method). Only those
    rows are copied, never the whole matrix first."""
    return matrix.with_nan_at(split.train), matrix.with_nan_at(split.val) if len(split.val) else None


def fit_on_split(matrix: ResponseMatrix, split: Split, method: str, k: int, seed: int, *,
                 device: str = defaults.DEFAULT_DEVICE, params: dict[str, Any] | None = None,
                 rows: tuple[np.ndarray, np.ndarray | None] | None = None) -> AnchorEstimator:
    """Fit ``method`` on the split's training models only; validation models (if the split has any)
    go in as ``Y_val``, otherwise the estimator makes its own choices from training models. ``rows``:
    :func:`split_rows` of this matrix and split, when the caller reuses them across fits."""
    est = make_estimator(method, k, random_state=seed, device=device, **(params or {}))
    train, val = rows if rows is not None else split_rows(matrix, split)
    return est.fit(train, matrix.scores[split.train], val, matrix.scores[split.val] if val is not None else None)


def score_on_split(matrix: ResponseMatrix, split: Split, est: AnchorEstimator) -> np.ndarray:
    """Predictions for the split's test models from their answers to the anchors only."""
    assert est.anchors_ is not None
    return est.predict(matrix.with_nan_at(split.test, est.anchors_))


def evaluate_method(matrix: ResponseMatrix, split: Split, method: str, k: int, seed: int, *,
                    config: ProtocolConfig, device: str = defaults.DEFAULT_DEVICE,
                    params: dict[str, Any] | None = None,
                    fitted: tuple[AnchorEstimator, float] | None = None,
                    rows: tuple[np.ndarray, np.ndarray | None] | None = None) -> tuple[EvalResult, AnchorEstimator]:
    """Fit, predict and score one method on one split; returns the result and the fitted estimator.

    ``fitted``: (estimator, seconds its fit took) already fitted with exactly this (method, k, seed)
    on this split (the pipeline's published fit), scored instead of fitting the costliest cell twice."""
    t0 = time.perf_counter() - (fitted[1] if fitted is not None else 0.0)
    figures: dict[str, Any] = {}
    if config.calibration_frac > 0:
        if fitted is not None:
            raise ValueError("a fit made without holding out calibration models cannot be calibrated")
        split, cal_rows = calibration_split(matrix.models, split, config.calibration_frac, seed)
        est = fit_on_split(matrix, split, method, k, seed, device=device, params=params)  # its own rows
        pred, figures = _calibrated_scores(matrix, split, cal_rows, est, config.alpha, seed, guard=config.guard,
                                           beyond_prior=config.beyond_prior)
    else:
        est = fitted[0] if fitted is not None else fit_on_split(matrix, split, method, k, seed, device=device,
                                                                params=params, rows=rows)
        pred = score_on_split(matrix, split, est)
    seconds = time.perf_counter() - t0
    m = score_metrics(pred, matrix.scores[split.test])
    details: dict[str, Any] = {}
    for attr in ("timings_", "selection_"):
        value = getattr(est, attr, None)
        if value:
            details[attr.rstrip("_")] = value
    assert est.anchors_ is not None
    result = EvalResult(
        benchmark=matrix.benchmark, method=method, k=k, seed=seed, split_policy=config.split_policy,
        mae=m.mae, tau=m.tau, rho=m.rho, max_error=m.max_error, seconds=seconds,
        n_train=len(split.train), n_val=len(split.val), n_test=len(split.test),
        anchors=[matrix.items[i] for i in est.anchors_], details=details, **figures,
    )
    return result, est


def _calibrated_scores(matrix: ResponseMatrix, split: Split, cal_rows: np.ndarray, est: AnchorEstimator,
                       alpha: float, seed: int, *, guard: bool = True,
                       beyond_prior: float = defaults.DEFAULT_BEYOND_PRIOR) -> tuple[np.ndarray, dict[str, Any]]:
    """Calibrate ``est`` on ``cal_rows`` and predict the test models as ``predict`` would (intervals,
    flags): the predictions and the interval figures of :class:`EvalResult`."""
    assert est.anchors_ is not None
    def anchors_of(rows: np.ndarray) -> np.ndarray:  # the anchor columns only: no copy of the whole matrix
        return matrix.with_nan_at(rows, est.anchors_)

    s = matrix.scores.astype(np.float64)
    calibration = calibrate.calibrate(est, anchors_of(cal_rows), s[cal_rows], anchors_of(split.train), alpha=alpha,
                                seed=seed, s_train=s[split.train] if guard else None, beyond_prior=beyond_prior)
    g = guarded_predictions(est, calibration, anchors_of(split.test))
    f = interval_figures(g, s[split.test])
    return g.pred, {"bias": f.bias, "coverage": f.coverage, "halfwidth": f.halfwidth, "flagged": f.flagged,
                    "silent_misses": f.silent_misses, "n_cal": len(cal_rows)}


#: calibration share of the fitting side in the frontier self-check (as ``sparseeval fit`` holds out)
SELFCHECK_CALIBRATION = 0.2
#: fewer models above the self-check's cut than this: nothing measured (one miss would be 5 % or more)
MIN_FRONTIER_MODELS = 20
#: the self-check figures logged as metrics (MLflow ``frontier/<name>``, asset metadata ``frontier_<name>``)
def frontier_selfcheck(matrix: ResponseMatrix, rows: np.ndarray, method: str, k: int, seed: int, *,
                       quantile: float = FRONTIER_QUANTILE, alpha: float = defaults.DEFAULT_ALPHA,
                       val_frac: float = defaults.DEFAULT_VAL_FRAC, device: str = defaults.DEFAULT_DEVICE,
                       params: dict[str, Any] | None = None,
                       beyond_prior: float = defaults.DEFAULT_BEYOND_PRIOR) -> CutFigures:
    """How ``method`` fares on models stronger than every model it learned from, measured on the
    candidate's *own* fitting models ``rows`` (row indices of ``matrix``): fitted and calibrated on
    those at or below their ``quantile`` quantile of the score, scored on the stronger rest, with the
    product's intervals and flags. The candidate's held-out models are never touched, so the figures
    can gate publication without leaking them; they say what happens to the next, stronger model.

    Returns the figures (:class:`~sparseeval.estimate.selfcheck.CutFigures`; with fewer than
    ``MIN_FRONTIER_MODELS`` stronger models not measured, with a note)."""
    sub = matrix.take_models(np.asarray(rows, dtype=np.int64))
    cut, beyond = frontier_cut(sub.scores, quantile)
    if (unmeasured := too_few_beyond(beyond, quantile, "")) is not None:
        return unmeasured
    config = ProtocolConfig(split_policy="frontier", val_frac=val_frac, frontier_quantile=quantile,
                            calibration_frac=SELFCHECK_CALIBRATION, alpha=alpha, beyond_prior=beyond_prior)
    r = evaluate_method(sub, split_for_seed(sub, seed, config), method, k, seed, config=config, device=device,
                        params=params)[0]
    return CutFigures(measured=True, mae=r.mae, bias=r.bias, coverage=r.coverage, halfwidth=r.halfwidth,
                      flagged=r.flagged, silent_misses=r.silent_misses, n=r.n_test, n_train=r.n_train,
                      quantile=quantile, cut_score=cut, method=r.method, k=r.k)


def joint_frontier_selfcheck(data: JointData, rows: np.ndarray, k: int, seed: int, *,
                             quantile: float = FRONTIER_QUANTILE, alpha: float = defaults.DEFAULT_ALPHA,
                             val_frac: float = defaults.DEFAULT_VAL_FRAC, device: str = defaults.DEFAULT_DEVICE,
                             params: dict[str, Any] | None = None) -> dict[str, CutFigures]:
    """:func:`frontier_selfcheck` for the joint predictor, per output (each benchmark and the mean).

    The cut is on the fitting models' *mean* score: ``sparseeval-joint`` (``k`` items per benchmark)
    is fitted and calibrated, as the pipeline fits and calibrates it, on the models ``rows`` at or
    below its ``quantile`` quantile, and every output is scored on the stronger rest with the product's
    intervals and flags. Why the mean: a refresh's newcomers are often stronger across the board, and
    one fit measures every output under that shift. An output may then miss on models that are not
    beyond *its* own range (a benchmark the strongest models improved on more than their other scores
    foretell): exactly the silent miss the publishing check must see. The other shift, newcomers
    stronger on one benchmark only, is :func:`joint_own_cut_selfcheck`'s.

    Returns ``{output: figures}`` with :func:`frontier_selfcheck`'s figures (all ``measured: False``
    with a ``note`` when fewer than ``MIN_FRONTIER_MODELS`` models lie above the cut)."""
    sub = data.take(np.asarray(rows, dtype=np.int64))
    return _joint_beyond_cut(sub, sub.S.mean(axis=1), MEAN, [*sub.benchmarks, MEAN], k, seed, quantile=quantile,
                             alpha=alpha, val_frac=val_frac, device=device, params=params)


def joint_own_cut_selfcheck(data: JointData, rows: np.ndarray, k: int, seed: int, *,
                            quantile: float = FRONTIER_QUANTILE, alpha: float = defaults.DEFAULT_ALPHA,
                            val_frac: float = defaults.DEFAULT_VAL_FRAC, device: str = defaults.DEFAULT_DEVICE,
                            params: dict[str, Any] | None = None) -> dict[str, CutFigures]:
    """The joint predictor's frontier self-check with each benchmark output cut on *its own* score:
    for every benchmark, ``sparseeval-joint`` refitted and calibrated on the fitting models ``rows`` at
    or below that benchmark's ``quantile`` quantile, and that output scored on the stronger rest, with
    the product's intervals and flags (the mean's flags carried, as ``predict`` does).

    Why, beside the mean's cut: newcomers are also stronger on one benchmark than every model before
    them without being so on the mean, which the mean's cut never puts above it. On the shared Open LLM
    Leaderboard data the joint predictor's mmlu output passed the mean's cut (3.7 % silent misses) and
    missed 87 % of the models above mmlu's own cut silently (MAE 10.1 points; the per-benchmark mmlu
    predictor, refused by the same check, 76 %): docs/results/frontier.md, round 7. One joint fit per
    benchmark: the cost, paid only when the self-check is measured (it is stored and reused).

    Returns ``{benchmark: figures}``, each as :func:`frontier_selfcheck`'s with ``cut_on`` the benchmark."""
    sub = data.take(np.asarray(rows, dtype=np.int64))
    return {b: _joint_beyond_cut(sub, sub.S[:, j], b, [b], k, seed, quantile=quantile, alpha=alpha,
                                 val_frac=val_frac, device=device, params=params)[b]
            for j, b in enumerate(sub.benchmarks)}


def _joint_beyond_cut(sub: JointData, cut_scores: np.ndarray, cut_on: str, score: list[str], k: int, seed: int, *,
                      quantile: float, alpha: float, val_frac: float, device: str,
                      params: dict[str, Any] | None) -> dict[str, CutFigures]:
    """``sparseeval-joint`` fitted and calibrated on ``sub``'s models at or below the ``quantile``
    quantile of ``cut_scores`` (named ``cut_on``: ``mean`` or a benchmark), the outputs ``score``
    scored on the stronger rest as ``predict`` flags them; figures per output."""
    cut_scores = np.asarray(cut_scores, dtype=np.float64)
    cut, beyond = frontier_cut(cut_scores, quantile)
    of = " of the mean score" if cut_on == MEAN else f" of the {cut_on} score"
    if (unmeasured := too_few_beyond(beyond, quantile, of)) is not None:
        return {o: replace(unmeasured, cut_on=cut_on) for o in score}
    split = make_split(sub.models, policy="frontier", val_frac=val_frac, seed=seed, scores=cut_scores,
                       frontier_quantile=quantile)
    fitting, cal_rows = calibration_split(sub.models, split, SELFCHECK_CALIBRATION, seed)
    est = fit_joint(sub, fitting, k, seed, device=device, method_params=params)
    # complete and partial answer sheets get the intervals predict gives them (partial ones are calibrated
    # exactly for their pattern): the per-missing-count tables are not needed
    calibration = joint_calibration(sub, Split(fitting.train, fitting.val, cal_rows), est, alpha=alpha, seed=seed,
                                    missing_up_to=0)
    assert est.anchors_ is not None
    outputs = [*sub.benchmarks, MEAN]
    X = sub.Y[split.test][:, est.anchors_]
    truth = np.concatenate([sub.S[split.test], sub.S[split.test].mean(axis=1, keepdims=True)], axis=1)
    guarded = carry_overall({name: guarded_predictions(est.output(name), output_calibration(calibration, name), X)
                             for name in outputs}, MEAN)  # as predict flags them
    return {name: CutFigures(measured=True, **interval_figures(guarded[name], truth[:, outputs.index(name)]).as_dict(),
                             n_train=len(fitting.train), quantile=quantile, cut_on=cut_on, cut_score=cut,
                             method=JOINT_METHOD, k=k)
            for name in score}


def too_few_beyond(beyond: np.ndarray, quantile: float, of: str) -> CutFigures | None:
    """A self-check's figures when fewer than ``MIN_FRONTIER_MODELS`` of its fitting models lie beyond
    the cut (``beyond``: their mask; ``of``: what the cut is on, for the note); None when enough do."""
    n_beyond = int(beyond.sum())
    if n_beyond >= MIN_FRONTIER_MODELS:
        return None
    return CutFigures.too_few(n_beyond, quantile, f"only {n_beyond} of {beyond.size} fitting models above the "
                                                  f"{quantile:g} quantile{of}: too few to measure (at least "
                                                  f"{MIN_FRONTIER_MODELS})")


def run_protocol(matrix: ResponseMatrix, methods: Iterable[str], ks: Iterable[int], seeds: Iterable[int], *,
                 config: ProtocolConfig | None = None, device: str = defaults.DEFAULT_DEVICE,
                 dates: Sequence[Any] | None = None, method_params: dict[str, dict[str, Any]] | None = None,
                 progress: Callable[[EvalResult], None] | None = None,
                 fitted: Mapping[tuple[str, int, int], tuple[AnchorEstimator, float]] | None = None
                 ) -> list[EvalResult]:
    """Evaluate every method x K x seed on ``matrix``; one split per seed shared by all methods.

    A K larger than the item pool is skipped with a warning rather than failing the whole run.
    ``fitted`` maps (method, k, seed) to (estimator, fit seconds) already fitted on that seed's split.
    """
    config = config or ProtocolConfig()
    methods, ks, seeds = list(methods), list(ks), list(seeds)
    results: list[EvalResult] = []
    n_items = len(matrix.items)
    for seed in seeds:
        split = split_for_seed(matrix, seed, config, dates)
        rows = split_rows(matrix, split)  # read once per split, shared (read-only) by every fit on it
        for k in ks:
            if k > n_items:
                log.warning("%s: skipping K=%d, the benchmark has only %d items",
                            matrix.benchmark, k, n_items)
                continue
            for method in methods:
                result, _ = evaluate_method(matrix, split, method, k, seed, config=config, device=device,
                                            params=(method_params or {}).get(method),
                                            fitted=(fitted or {}).get((method, k, seed)), rows=rows)
                results.append(result)
                if progress is not None:
                    progress(result)
    return results


def results_frame(results: Iterable[EvalResult]) -> pl.DataFrame:
    """All results as a Polars frame (one row per benchmark, method, k, seed)."""
    rows = [r.row() for r in results]
    if not rows:
        return pl.DataFrame(schema={"benchmark": pl.String, "method": pl.String, "k": pl.Int64,
                                    "seed": pl.Int64, "mae": pl.Float64, "tau": pl.Float64})
    return pl.DataFrame(rows)


def summarize(results: Iterable[EvalResult] | pl.DataFrame) -> pl.DataFrame:
    """Mean and standard deviation over seeds per (benchmark, method, k, split policy), best MAE first."""
    df = results if isinstance(results, pl.DataFrame) else results_frame(results)
    metrics = ("mae", "tau", "rho", "max_error", "seconds", *[f for f in INTERVAL_FIELDS[:-1] if f in df.columns])
    return (
        df.group_by("benchmark", "method", "k", *(["split_policy"] if "split_policy" in df.columns else []))
        .agg(pl.len().alias("seeds"),
             *[pl.col(m).mean().alias(f"{m}_mean") for m in metrics],
             *[pl.col(m).std().alias(f"{m}_sd") for m in metrics])
        .sort("benchmark", "k", "mae_mean")
    )


# ------------------------------------------------------------------------------------------------
# Several benchmarks at once: sparseeval-joint next to per-benchmark methods, on the same splits
# ------------------------------------------------------------------------------------------------
def evaluate_joint(data: JointData, split: Split, k: int, seed: int, *, config: ProtocolConfig,
                   device: str = defaults.DEFAULT_DEVICE, params: dict[str, Any] | None = None
                   ) -> tuple[list[EvalResult], JointSparseEval]:
    """Fit ``sparseeval-joint`` with ``k`` items *per benchmark* (``k x benchmarks`` in all) on the
    split's training models (validation for early stopping) and score every benchmark and the mean
    on its test models. One result per benchmark plus one for ``mean``."""
    t0 = time.perf_counter()
    n_b = len(data.benchmarks)
    est = make_estimator(JOINT_METHOD, k * n_b, random_state=seed, device=device, groups=data.groups,
                         benchmarks=data.benchmarks, **(params or {}))
    assert isinstance(est, JointSparseEval)
    has_val = len(split.val) > 0
    est.fit(data.Y[split.train], data.S[split.train], data.Y[split.val] if has_val else None,
            data.S[split.val] if has_val else None)
    assert est.anchors_ is not None
    pred = est.predict_mean(data.Y[split.test][:, est.anchors_])
    seconds = time.perf_counter() - t0
    truth = np.concatenate([data.S[split.test], data.S[split.test].mean(axis=1, keepdims=True)], axis=1)
    details = {"timings": est.timings_, "selection": est.selection_, "total_items": est.k}
    results = []
    for b, name in enumerate([*data.benchmarks, MEAN]):
        m = score_metrics(pred[:, b], truth[:, b])
        cols = est.anchors_ if name == MEAN else est.anchors_[est.anchor_groups_ == b]
        results.append(EvalResult(
            benchmark=name, method=JOINT_METHOD, k=k, seed=seed, split_policy=config.split_policy, mae=m.mae,
            tau=m.tau, rho=m.rho, max_error=m.max_error, seconds=seconds, n_train=len(split.train),
            n_val=len(split.val), n_test=len(split.test), anchors=[data.columns[c] for c in cols],
            details=details))
    return results, est


def run_joint_protocol(matrices: Sequence[ResponseMatrix], methods: Iterable[str], ks: Iterable[int],
                       seeds: Iterable[int], *, config: ProtocolConfig | None = None,
                       device: str = defaults.DEFAULT_DEVICE,
                       dates: Sequence[Any] | None = None,
                       method_params: dict[str, dict[str, Any]] | None = None,
                       progress: Callable[[EvalResult], None] | None = None) -> list[EvalResult]:
    """Evaluate ``sparseeval-joint`` and per-benchmark methods side by side.

    Only models that have every benchmark take part, and every method sees the same split of them
    per seed: per-benchmark methods are fitted benchmark by benchmark with ``k`` anchors each, the
    joint method once with ``k x benchmarks`` items in all, so both spend the same total. Each method
    also gets a ``mean`` row: the mean of its per-benchmark predictions against the mean score.
    ``dates``: aligned with :func:`~sparseeval.estimate.methods.joint.common_models` (for a date split).
    """
    config = config or ProtocolConfig()
    methods, ks, seeds = list(methods), list(ks), list(seeds)
    models = common_models(matrices)
    parts = [restrict_models(m, models) for m in matrices]
    data = joint_data(parts)
    results: list[EvalResult] = []

    def emit(rs: list[EvalResult]) -> None:
        results.extend(rs)
        if progress is not None:
            for r in rs:
                progress(r)

    for seed in seeds:
        split = make_split(models, policy=config.split_policy, val_frac=config.val_frac,
                           test_frac=config.test_frac, seed=seed, dates=dates, scores=data.S.mean(axis=1),
                           frontier_quantile=config.frontier_quantile)
        for k in ks:
            for method in methods:
                params = (method_params or {}).get(method)
                if method == JOINT_METHOD:
                    if k * len(parts) > data.Y.shape[1]:
                        log.warning("joint: skipping K=%d, the benchmarks have %d items in all", k, data.Y.shape[1])
                        continue
                    emit(evaluate_joint(data, split, k, seed, config=config, device=device, params=params)[0])
                    continue
                if any(k > len(p.items) for p in parts):
                    log.warning("%s: skipping K=%d, a benchmark has fewer items", method, k)
                    continue
                emit(evaluate_per_benchmark(parts, split, method, k, seed, config=config, device=device,
                                            params=params))
    return results


def evaluate_per_benchmark(parts: Sequence[ResponseMatrix], split: Split, method: str, k: int, seed: int, *,
                           config: ProtocolConfig, device: str = defaults.DEFAULT_DEVICE,
                           params: dict[str, Any] | None = None) -> list[EvalResult]:
    """A per-benchmark ``method`` on a joint split: ``parts`` are the benchmarks restricted to the
    joint models (same rows, same order), each fitted with ``k`` of its own anchors; one result per
    benchmark plus ``mean`` (the mean of its predictions against the mean score): the reference a
    ``sparseeval-joint`` fit with ``k`` items per benchmark is compared with."""
    rows, preds, seconds = [], [], 0.0
    for part in parts:
        result, est = evaluate_method(part, split, method, k, seed, config=config, device=device, params=params)
        rows.append(result)
        preds.append(score_on_split(part, split, est))
        seconds += result.seconds
    mean_score = np.mean([p.scores[split.test] for p in parts], axis=0)
    m = score_metrics(np.mean(preds, axis=0), mean_score)
    rows.append(EvalResult(
        benchmark=MEAN, method=method, k=k, seed=seed, split_policy=config.split_policy, mae=m.mae,
        tau=m.tau, rho=m.rho, max_error=m.max_error, seconds=seconds, n_train=len(split.train),
        n_val=len(split.val), n_test=len(split.test),
        anchors=[f"{r.benchmark}{JOINT_SEP}{a}" for r in rows for a in r.anchors]))
    return rows
