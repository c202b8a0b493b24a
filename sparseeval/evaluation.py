"""The leak-proof evaluation protocol: every method on identical model splits and seeds.

For each seed one split of *models* is drawn (random, by family or by date); every method and
every K is fitted on that seed's training models (validation models for early stopping and
hyper-parameter choices) and scored on its test models, which ``fit`` never receives. Different
seeds give different splits and different initialisations, so the spread over seeds is honest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import polars as pl

from sparseeval.matrix import ResponseMatrix
from sparseeval.methods import AnchorEstimator, make_estimator
from sparseeval.metrics import score_metrics
from sparseeval.splits import Split, SplitPolicy, make_split

log = logging.getLogger(__name__)

#: the methods compared by default (all registered baselines and both SparseEval proxies)
DEFAULT_METHODS = ("random", "random-linear", "anchor-points", "irt", "p-irt", "gp-irt",
                   "sparseeval-linear", "sparseeval-mlp")


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

    def row(self) -> dict[str, Any]:
        """Flat record without the anchor list and details (for tables, JSON and DuckDB)."""
        out = asdict(self)
        out.pop("anchors")
        out.pop("details")
        return out


@dataclass(frozen=True)
class ProtocolConfig:
    """How models are split; the same config gives the same splits for every method."""

    split_policy: SplitPolicy = "random"
    val_frac: float = 0.1
    test_frac: float = 0.2


def split_for_seed(matrix: ResponseMatrix, seed: int, config: ProtocolConfig,
                   dates: Sequence[Any] | None = None) -> Split:
    """The split of ``matrix``'s models used by every method for ``seed``."""
    return make_split(matrix.models, policy=config.split_policy, val_frac=config.val_frac,
                      test_frac=config.test_frac, seed=seed, dates=dates)


def fit_on_split(matrix: ResponseMatrix, split: Split, method: str, k: int, seed: int, *,
                 device: str = "auto", params: dict[str, Any] | None = None) -> AnchorEstimator:
    """Fit ``method`` on the split's training models only; validation models (if the split has any)
    go in as ``Y_val``, otherwise the estimator makes its own choices from training models."""
    Y = matrix.with_nan()
    est = make_estimator(method, k, random_state=seed, device=device, **(params or {}))
    has_val = len(split.val) > 0
    return est.fit(Y[split.train], matrix.scores[split.train],
                   Y[split.val] if has_val else None, matrix.scores[split.val] if has_val else None)


def score_on_split(matrix: ResponseMatrix, split: Split, est: AnchorEstimator) -> np.ndarray:
    """Predictions for the split's test models from their answers to the anchors only."""
    assert est.anchors_ is not None
    Y = matrix.with_nan()
    return est.predict(Y[split.test][:, est.anchors_])


def evaluate_method(matrix: ResponseMatrix, split: Split, method: str, k: int, seed: int, *,
                    config: ProtocolConfig, device: str = "auto",
                    params: dict[str, Any] | None = None) -> tuple[EvalResult, AnchorEstimator]:
    """Fit, predict and score one method on one split; returns the result and the fitted estimator."""
    t0 = time.perf_counter()
    est = fit_on_split(matrix, split, method, k, seed, device=device, params=params)
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
        anchors=[matrix.items[i] for i in est.anchors_], details=details,
    )
    return result, est


def run_protocol(matrix: ResponseMatrix, methods: Iterable[str], ks: Iterable[int], seeds: Iterable[int], *,
                 config: ProtocolConfig | None = None, device: str = "auto",
                 dates: Sequence[Any] | None = None, method_params: dict[str, dict[str, Any]] | None = None,
                 progress: Callable[[EvalResult], None] | None = None) -> list[EvalResult]:
    """Evaluate every method x K x seed on ``matrix``; one split per seed shared by all methods.

    A K larger than the item pool is skipped with a warning rather than failing the whole run.
    """
    config = config or ProtocolConfig()
    methods, ks, seeds = list(methods), list(ks), list(seeds)
    results: list[EvalResult] = []
    n_items = len(matrix.items)
    for seed in seeds:
        split = split_for_seed(matrix, seed, config, dates)
        for k in ks:
            if k > n_items:
                log.warning("%s: skipping K=%d, the benchmark has only %d items",
                            matrix.benchmark, k, n_items)
                continue
            for method in methods:
                result, _ = evaluate_method(matrix, split, method, k, seed, config=config, device=device,
                                            params=(method_params or {}).get(method))
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
    """Mean and standard deviation over seeds per (benchmark, method, k), best MAE first."""
    df = results if isinstance(results, pl.DataFrame) else results_frame(results)
    metrics = ("mae", "tau", "rho", "max_error", "seconds")
    return (
        df.group_by("benchmark", "method", "k")
        .agg(pl.len().alias("seeds"),
             *[pl.col(m).mean().alias(f"{m}_mean") for m in metrics],
             *[pl.col(m).std().alias(f"{m}_sd") for m in metrics])
        .sort("benchmark", "k", "mae_mean")
    )
