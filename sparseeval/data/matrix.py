"""Per-benchmark dense models x items matrix built with Polars.

The algorithms want a dense float32 array; the store holds a long table. Building goes through
integer codes and one scatter (no pivot, no Python loop over rows), which stays fast at
leaderboard scale (thousands of models x tens of thousands of items).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from sparseeval.core.errors import UserError


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
    #: the store's data version of the state this matrix was built from ("" when not from a store)
    data_version: str = ""
    #: the :mod:`sparseeval.data.access.matrix_store` folder that holds exactly this matrix ("" when only in memory)
    stored_at: str = ""

    @property
    def shape(self) -> tuple[int, int]:
        return self.values.shape  # type: ignore[return-value]

    @property
    def density(self) -> float:
        return float(self.observed.mean()) if self.observed.size else 0.0

    def digest(self) -> str:
        """sha256 of the matrix's content (names, cells, mask, targets): what a fit on it saw, so a
        step that reads several matrices can tell exactly which data it was given."""
        h = hashlib.sha256()
        h.update(json.dumps([self.benchmark, self.models, self.items]).encode("utf-8"))
        for array in (self.values, self.observed, self.scores):
            h.update(np.ascontiguousarray(array).tobytes())
        return h.hexdigest()

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
        out = np.array(self.values, dtype=np.float32, copy=True)
        out[~self.observed] = np.nan
        return out

    def with_nan_at(self, rows: np.ndarray | None = None, cols: np.ndarray | None = None) -> np.ndarray:
        """:meth:`with_nan` of the given rows and/or columns only, without copying the whole matrix
        first: at leaderboard scale (210 M cells) a full copy is 840 MB and a second one for the
        training rows another 600 MB, while a refit or a calibration reads 20 anchor columns."""
        if rows is None and cols is None:
            return self.with_nan()
        if cols is None:
            out = np.array(self.values[np.asarray(rows)], dtype=np.float32)
            out[~np.asarray(self.observed[np.asarray(rows)])] = np.nan
            return out
        index = (slice(None) if rows is None else np.asarray(rows), np.asarray(cols))
        index = np.ix_(*(np.arange(self.shape[0]) if isinstance(i, slice) else i for i in index))
        # column-major, as ``with_nan()[rows][:, cols]`` is: the same memory layout gives the estimators'
        # matrix products the same rounding, so a predictor is bit for bit what it was before
        out = np.array(self.values[index], dtype=np.float32, order="F")
        out[~np.asarray(self.observed[index])] = np.nan
        return out


#: rows scattered into the dense matrix per step (bounds the working memory of a build)
SCATTER_ROWS = 1 << 24


class EmptyMatrixError(UserError, ValueError):
    """No usable model (with a target score) or no item for the benchmark."""


def _rank_of_code(categories: pl.Categories) -> tuple[list[str], pl.Series]:
    """The category strings sorted, and for each physical code its position in that sorted list."""
    names = categories.to_series()
    order = names.arg_sort()
    return names.gather(order).to_list(), order.arg_sort().cast(pl.UInt32)


def build_matrix(responses: pl.DataFrame | pl.LazyFrame, scores: pl.DataFrame | pl.LazyFrame | None,
                 benchmark: str, *, row_mean_is_score: bool = False) -> ResponseMatrix:
    """Build the matrix of ``benchmark`` from long ``responses`` (model, benchmark, item_id, score)
    and reported ``scores`` (model, benchmark, score).

    Target per model: the reported score. Only when the caller declares that the item set is the
    whole benchmark (``row_mean_is_score``) does a model without one take its row mean, and only for
    a complete row (a partial row's mean is a biased estimate of nothing in particular). By default it
    does not: stored items are often a subset (the shared leaderboard data holds informative items
    only, whose mean is far from the score), and a row mean there is a wrong target that looks right.
    Models without a target are dropped and listed in ``dropped_models``. Models and items are
    sorted ascending (byte order of their text), so the same data always gives the same matrix.

    ``responses`` may be a LazyFrame (``pl.scan_parquet``, :meth:`Store.load_long`): the benchmark
    filter is pushed into the scan and one streaming pass collects only integer codes and float32
    scores, never the id strings of every row; at leaderboard scale (7,000 x 14,000 = 98 M rows)
    the strings alone would take 5-6 GB. Ids are coded by casting to a private ``Categorical``
    (codes in order of appearance), then mapped to their sorted positions through two small
    lookup tables. Rows with a null id or a null/NaN score are not observations and are left out;
    a duplicated cell keeps one of its values.
    """
    model_cats, item_cats = pl.Categories.random(), pl.Categories.random()
    coded = (
        responses.lazy()
        .filter(pl.col("benchmark") == benchmark)
        .filter(pl.col("model").is_not_null() & pl.col("item_id").is_not_null()
                & pl.col("score").is_not_null() & pl.col("score").cast(pl.Float32).is_not_nan())
        .select(pl.col("model").cast(pl.String).cast(pl.Categorical(model_cats)),
                pl.col("item_id").cast(pl.String).cast(pl.Categorical(item_cats)),
                pl.col("score").cast(pl.Float32))
        .collect(engine="streaming")
    )
    if coded.height == 0:
        raise EmptyMatrixError(f"benchmark {benchmark!r} has no responses")
    # the Categories hold exactly this benchmark's ids (fresh, and the frame keeps them alive)
    models, model_rank = _rank_of_code(model_cats)
    items, item_rank = _rank_of_code(item_cats)
    n_models, n_items = len(models), len(items)
    flat_dtype = np.uint32 if n_models * n_items < 2**32 else np.uint64
    row_of, col_of = model_rank.to_numpy().astype(flat_dtype), item_rank.to_numpy().astype(flat_dtype)
    # NaN marks "not observed", so the mask needs no second scatter; the rows are scattered a slice at a
    # time, so the cell indices of all 210 M rows (1.7 GB at leaderboard scale) never exist at once
    values = np.full((n_models, n_items), np.nan, dtype=np.float32)
    flat = values.reshape(-1)
    for start in range(0, coded.height, SCATTER_ROWS):
        part = coded.slice(start, SCATTER_ROWS)
        cells = row_of[part.get_column("model").to_physical().to_numpy()] * flat_dtype(n_items)
        cells += col_of[part.get_column("item_id").to_physical().to_numpy()]
        flat[cells] = part.get_column("score").to_numpy()
    del coded, part, cells
    scored = None if scores is None else scores.lazy().filter(pl.col("benchmark") == benchmark).collect()
    return assemble_matrix(benchmark, models, items, values, scored, row_mean_is_score=row_mean_is_score)


def assemble_matrix(benchmark: str, models: list[str], items: list[str], values: np.ndarray,
                    scores: pl.DataFrame | None, *, row_mean_is_score: bool = False) -> ResponseMatrix:
    """The matrix from its sorted ``models`` and ``items`` and ``values`` with NaN where unobserved
    (taken over and changed in place), with the target rules of :func:`build_matrix` (``scores``: the
    benchmark's reported scores, model and score): the one place they are applied, whoever coded the
    cells."""
    n_models = len(models)
    observed = ~np.isnan(values)
    values[~observed] = 0.0
    reported = np.full(n_models, np.nan, dtype=np.float64)
    if scores is not None and scores.height:
        sc = (scores.select(pl.col("model").cast(pl.String), pl.col("score").cast(pl.Float64).alias("target"))
              .join(pl.DataFrame({"model": models, "row": np.arange(n_models, dtype=np.int64)}), on="model"))
        reported[sc.get_column("row").to_numpy()] = sc.get_column("target").to_numpy()
    complete = observed.all(axis=1)
    row_mean = values.mean(axis=1, dtype=np.float64)
    has_reported = ~np.isnan(reported)
    target = np.where(has_reported, reported, np.where(complete & row_mean_is_score, row_mean, np.nan))
    keep = ~np.isnan(target)
    if not keep.any():
        raise EmptyMatrixError(
            f"benchmark {benchmark!r}: no model has a reported score"
            + (" or a complete row" if row_mean_is_score else " (the row mean of the stored items is used as the "
               "score only when they are declared to be the whole benchmark: --row-mean-is-score)"))
    source = np.where(has_reported, "reported", "row_mean")
    if not keep.all():  # the usual case keeps every row and copies nothing
        values, observed = values[keep], observed[keep]
    return ResponseMatrix(
        benchmark=benchmark,
        models=[m for m, k in zip(models, keep, strict=True) if k],
        items=items,
        values=values,
        observed=observed,
        scores=target[keep].astype(np.float32),
        score_source=source[keep].tolist(),
        dropped_models=[m for m, k in zip(models, keep, strict=True) if not k],
    )


def append_models(old: ResponseMatrix, new: ResponseMatrix, *,
                  alloc: Any = np.empty) -> ResponseMatrix:
    """``old`` with the rows of ``new`` (models ``old`` has never seen) merged in: the matrix
    :func:`build_matrix` would give on both sets of rows together, cell for cell.

    Models and items stay sorted (byte order, as :func:`build_matrix` sorts them): the new rows are
    merged into place, and items only ``new`` answered become columns no earlier model has observed.
    ``alloc(shape, dtype)`` allocates the result's two large arrays (a file-backed memmap keeps them
    out of the process' anonymous memory). A model of ``new`` that ``old`` holds or dropped is
    refused (ValueError): its row changed, which is not an append.
    """
    seen = set(old.models).union(old.dropped_models)
    clash = sorted(seen.intersection([*new.models, *new.dropped_models]))
    if clash:
        raise ValueError(f"{old.benchmark}: models already in the matrix: {', '.join(clash[:5])}")
    models = sorted([*old.models, *new.models])
    items = sorted(set(old.items).union(new.items))
    row = {m: i for i, m in enumerate(models)}
    col = {it: i for i, it in enumerate(items)}
    old_rows = np.array([row[m] for m in old.models], dtype=np.int64)
    new_rows = np.array([row[m] for m in new.models], dtype=np.int64)
    old_cols = np.array([col[it] for it in old.items], dtype=np.int64)
    new_cols = np.array([col[it] for it in new.items], dtype=np.int64)
    values = alloc((len(models), len(items)), np.float32)
    observed = alloc((len(models), len(items)), np.bool_)
    same_items = len(old_cols) == len(items)  # no new column: old rows copy whole
    block = max(1, (1 << 24) // max(1, len(items)))  # ~64 MB of float32 per step: bounded working memory
    for start in range(0, len(old_rows), block):
        rows = old_rows[start:start + block]
        if same_items:
            values[rows] = old.values[start:start + block]
            observed[rows] = old.observed[start:start + block]
        else:
            values[rows] = 0.0
            observed[rows] = False
            values[np.ix_(rows, old_cols)] = old.values[start:start + block]
            observed[np.ix_(rows, old_cols)] = old.observed[start:start + block]
    values[new_rows] = 0.0
    observed[new_rows] = False
    values[np.ix_(new_rows, new_cols)] = new.values
    observed[np.ix_(new_rows, new_cols)] = new.observed
    scores = np.empty(len(models), dtype=np.float32)
    scores[old_rows], scores[new_rows] = old.scores, new.scores
    source = [""] * len(models)
    for rows, part in ((old_rows, old.score_source), (new_rows, new.score_source)):
        for r, s in zip(rows.tolist(), part, strict=True):
            source[r] = s
    return ResponseMatrix(benchmark=old.benchmark, models=models, items=items, values=values, observed=observed,
                          scores=scores, score_source=source,
                          dropped_models=sorted([*old.dropped_models, *new.dropped_models]))
