"""Per-benchmark dense models x items matrix built with Polars.

The algorithms want a dense float32 array; the store holds a long table. Building goes through
integer codes and one scatter (no pivot, no Python loop over rows), which stays fast at
leaderboard scale (thousands of models x tens of thousands of items).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl


@dataclass(frozen=True)
class ResponseMatrix:
    """Dense results of one benchmark.

    ``values[m, i]`` is model m's score on item i (0 where unobserved), ``observed`` says which
    cells are real, ``scores[m]`` is the target full-benchmark score. ``score_source`` tells per
    model whether the target is ``reported`` or the complete row's ``row_mean``.
    """

    benchmark: str
    models: list[str]
    items: list[str]
    values: np.ndarray  # float32 (n_models, n_items)
    observed: np.ndarray  # bool (n_models, n_items)
    scores: np.ndarray  # float32 (n_models,)
    score_source: list[str] = field(default_factory=list)
    dropped_models: list[str] = field(default_factory=list)  #: no reported score and incomplete row

    @property
    def shape(self) -> tuple[int, int]:
        return self.values.shape  # type: ignore[return-value]

    @property
    def density(self) -> float:
        return float(self.observed.mean()) if self.observed.size else 0.0

    def take_models(self, rows: np.ndarray) -> ResponseMatrix:
        """The same matrix restricted to the given model rows (used by splits)."""
        rows = np.asarray(rows)
        return ResponseMatrix(
            benchmark=self.benchmark,
            models=[self.models[r] for r in rows],
            items=self.items,
            values=self.values[rows],
            observed=self.observed[rows],
            scores=self.scores[rows],
            score_source=[self.score_source[r] for r in rows] if self.score_source else [],
        )

    def with_nan(self) -> np.ndarray:
        """``values`` with NaN in unobserved cells (what the estimators take)."""
        out = self.values.copy()
        out[~self.observed] = np.nan
        return out


class EmptyMatrixError(ValueError):
    """No usable model (with a target score) or no item for the benchmark."""


def build_matrix(responses: pl.DataFrame | pl.LazyFrame, scores: pl.DataFrame | pl.LazyFrame | None,
                 benchmark: str) -> ResponseMatrix:
    """Build the matrix of ``benchmark`` from long ``responses`` (model, benchmark, item_id, score)
    and reported ``scores`` (model, benchmark, score).

    Target per model: the reported score when given; otherwise the row mean, but only for a complete
    row (a partial row's mean is a biased estimate of nothing in particular); other models are
    dropped and listed in ``dropped_models``.
    """
    resp = (
        responses.lazy()
        .filter(pl.col("benchmark") == benchmark)
        .select("model", "item_id", pl.col("score").cast(pl.Float32))
        .collect()
    )
    if resp.height == 0:
        raise EmptyMatrixError(f"benchmark {benchmark!r} has no responses")
    models = resp.get_column("model").unique().sort()
    items = resp.get_column("item_id").unique().sort()
    model_idx = pl.DataFrame({"model": models, "row": np.arange(len(models), dtype=np.int64)})
    item_idx = pl.DataFrame({"item_id": items, "col": np.arange(len(items), dtype=np.int64)})
    coded = resp.join(model_idx, on="model").join(item_idx, on="item_id")
    rows = coded.get_column("row").to_numpy()
    cols = coded.get_column("col").to_numpy()
    values = np.zeros((len(models), len(items)), dtype=np.float32)
    observed = np.zeros((len(models), len(items)), dtype=bool)
    values[rows, cols] = coded.get_column("score").to_numpy()
    observed[rows, cols] = True

    reported = np.full(len(models), np.nan, dtype=np.float64)
    if scores is not None:
        sc = (
            scores.lazy()
            .filter(pl.col("benchmark") == benchmark)
            .select("model", pl.col("score").cast(pl.Float64).alias("target"))
            .collect()
            .join(model_idx, on="model")
        )
        reported[sc.get_column("row").to_numpy()] = sc.get_column("target").to_numpy()
    complete = observed.all(axis=1)
    row_mean = values.mean(axis=1, dtype=np.float64)
    has_reported = ~np.isnan(reported)
    target = np.where(has_reported, reported, np.where(complete, row_mean, np.nan))
    keep = ~np.isnan(target)
    model_list = models.to_list()
    if not keep.any():
        raise EmptyMatrixError(f"benchmark {benchmark!r}: no model has a reported score or a complete row")
    source = np.where(has_reported, "reported", "row_mean")
    return ResponseMatrix(
        benchmark=benchmark,
        models=[m for m, k in zip(model_list, keep, strict=True) if k],
        items=items.to_list(),
        values=values[keep],
        observed=observed[keep],
        scores=target[keep].astype(np.float32),
        score_source=source[keep].tolist(),
        dropped_models=[m for m, k in zip(model_list, keep, strict=True) if not k],
    )
