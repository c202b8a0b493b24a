"""build_matrix: target rules, observed mask, ordering, lazy input, and agreement with a naive pivot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sparseeval.data.matrix import EmptyMatrixError, build_matrix


def _long(rows: list[tuple[str, str, str, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"model": pl.String, "benchmark": pl.String, "item_id": pl.String,
                                      "score": pl.Float64}, orient="row")


@pytest.fixture
def mixed() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Three arc models: m_b complete without a reported score, m_a reported and partial,
    m_c neither (dropped); plus a gsm8k row that must not leak into arc."""
    responses = _long([
        ("m_b", "arc", "i2", 1.0), ("m_b", "arc", "i1", 0.0), ("m_b", "arc", "i10", 1.0),
        ("m_a", "arc", "i1", 1.0), ("m_a", "arc", "i10", 0.25),
        ("m_c", "arc", "i2", 1.0),
        ("m_z", "gsm8k", "i9", 1.0),
    ])
    scores = pl.DataFrame({"model": ["m_a", "m_z", "unknown"], "benchmark": ["arc", "gsm8k", "arc"],
                           "score": [0.4, 0.9, 0.7]})
    return responses, scores


def test_target_rules_mask_and_order(mixed: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    responses, scores = mixed
    default = build_matrix(responses, scores, "arc")  # items not declared to be the whole benchmark
    assert default.models == ["m_a"] and default.dropped_models == ["m_b", "m_c"]
    m = build_matrix(responses, scores, "arc", row_mean_is_score=True)
    assert m.items == ["i1", "i10", "i2"]  # ascending text order, not first appearance
    assert m.models == ["m_a", "m_b"]
    assert m.dropped_models == ["m_c"]  # no reported score and an incomplete row
    assert m.score_source == ["reported", "row_mean"]
    np.testing.assert_allclose(m.scores, [0.4, 2 / 3], rtol=1e-6)
    assert m.scores.dtype == np.float32
    assert m.values.dtype == np.float32 and m.observed.dtype == bool
    np.testing.assert_array_equal(m.observed, [[True, True, False], [True, True, True]])
    np.testing.assert_array_equal(m.values, [[1.0, 0.25, 0.0], [0.0, 1.0, 1.0]])  # 0 where unobserved
    nan = m.with_nan()
    assert np.isnan(nan[0, 2]) and not np.isnan(nan[1]).any()
    assert m.density == pytest.approx(5 / 6)


def test_without_scores_every_complete_row_is_its_mean(mixed: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    responses, _ = mixed
    m = build_matrix(responses, None, "arc", row_mean_is_score=True)
    assert m.models == ["m_b"]
    assert m.dropped_models == ["m_a", "m_c"]
    assert m.shape == (1, 3)


def test_lazy_input_equals_eager(mixed: tuple[pl.DataFrame, pl.DataFrame], tmp_path: Path) -> None:
    responses, scores = mixed
    path = tmp_path / "responses.parquet"
    responses.write_parquet(path)
    eager = build_matrix(responses, scores, "arc")
    lazy = build_matrix(pl.scan_parquet(path), scores.lazy(), "arc")
    assert lazy.models == eager.models and lazy.items == eager.items
    np.testing.assert_array_equal(lazy.values, eager.values)
    np.testing.assert_array_equal(lazy.observed, eager.observed)
    np.testing.assert_array_equal(lazy.scores, eager.scores)


def test_unknown_benchmark_and_no_target_raise(mixed: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    responses, scores = mixed
    with pytest.raises(EmptyMatrixError, match="no responses"):
        build_matrix(responses, scores, "hellaswag")
    partial = responses.filter(pl.col("model") != "m_b")
    with pytest.raises(EmptyMatrixError, match="no model has a reported score"):
        build_matrix(partial, None, "arc", row_mean_is_score=True)


def test_null_ids_and_nan_scores_are_not_observations() -> None:
    responses = pl.DataFrame({"model": ["a", "a", None, "b", "b"], "benchmark": ["arc"] * 5,
                              "item_id": ["1", "2", "1", "1", "2"],
                              "score": [1.0, float("nan"), 1.0, 0.0, 1.0]})
    m = build_matrix(responses, None, "arc", row_mean_is_score=True)
    assert m.models == ["b"] and m.dropped_models == ["a"]
    assert m.items == ["1", "2"]


def test_categorical_and_integer_ids_are_taken_as_text() -> None:
    responses = pl.DataFrame({"model": ["b", "a", "b", "a"], "benchmark": ["arc"] * 4,
                              "item_id": [10, 2, 2, 10], "score": [1, 0, 0, 1]}).with_columns(
        pl.col("model").cast(pl.Categorical), pl.col("score").cast(pl.Int8))
    m = build_matrix(responses, None, "arc", row_mean_is_score=True)
    assert m.models == ["a", "b"] and m.items == ["10", "2"]
    np.testing.assert_array_equal(m.values, [[1.0, 0.0], [1.0, 0.0]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_naive_pivot_on_random_sparse_data(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_models, n_items = 40, 57
    models = np.array([f"org{m % 4}/model-{rng.integers(1e6)}-{m}" for m in range(n_models)])
    items = np.array([f"q{rng.integers(1e4)}_{i}" for i in range(n_items)])
    mm, ii = np.meshgrid(np.arange(n_models), np.arange(n_items), indexing="ij")
    keep = rng.random(mm.size) < 0.8
    keep[: n_items * 5] = True  # the first five models answered everything
    rows = pl.DataFrame({"model": models[mm.ravel()[keep]], "item_id": items[ii.ravel()[keep]],
                         "score": rng.random(keep.sum()).round(3)}).with_columns(benchmark=pl.lit("mmlu"))
    rows = rows.sample(fraction=1.0, shuffle=True, seed=seed)  # order of the input must not matter
    other = rows.with_columns(benchmark=pl.lit("arc"), score=pl.lit(1.0))
    reported = pl.DataFrame({"model": models[5:20], "benchmark": "mmlu",
                             "score": rng.random(15)})
    m = build_matrix(pl.concat([other, rows]), reported, "mmlu", row_mean_is_score=True)

    pivot = rows.pivot(on="item_id", index="model", values="score").sort("model")
    order = sorted(items.tolist())
    dense = pivot.select(order).to_numpy().astype(np.float64)
    complete = ~np.isnan(dense).any(axis=1)
    by_model = dict(reported.select("model", "score").iter_rows())
    names = pivot.get_column("model").to_list()
    kept = [k for k, name in enumerate(names) if name in by_model or complete[k]]
    assert m.items == order
    assert m.models == [names[k] for k in kept]
    assert sorted(m.dropped_models) == sorted(set(names) - set(m.models))
    np.testing.assert_array_equal(m.observed, ~np.isnan(dense[kept]))
    np.testing.assert_allclose(m.values, np.nan_to_num(dense[kept]), rtol=1e-6)
    expected = [by_model.get(names[k], np.nanmean(dense[k])) for k in kept]
    np.testing.assert_allclose(m.scores, expected, rtol=1e-5)
    assert m.score_source == ["reported" if names[k] in by_model else "row_mean" for k in kept]


def test_take_models_keeps_alignment(mixed: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    responses, scores = mixed
    m = build_matrix(responses, scores, "arc", row_mean_is_score=True)
    sub = m.take_models(np.array([1]))
    assert sub.models == ["m_b"] and sub.score_source == ["row_mean"]
    np.testing.assert_array_equal(sub.values, m.values[1:])


# --- the store's bulk read/write path ---------------------------------------------------------------

def _contents(db: Path) -> dict[str, list[tuple]]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return {
            "responses": con.sql("SELECT model, benchmark, item_id, score FROM responses ORDER BY ALL")
                            .fetchall(),
            "scores": con.sql("SELECT model, benchmark, score FROM scores ORDER BY ALL").fetchall(),
            "items": con.sql("SELECT * FROM items ORDER BY ALL").fetchall(),
            "models": con.sql("SELECT model, family, submitted_at, n_params, base_model FROM models "
                              "ORDER BY ALL").fetchall(),
            "ingests": con.sql("SELECT status, format, n_responses, n_scores FROM ingests ORDER BY ingest_id")
                          .fetchall(),
        }
    finally:
        con.close()


def _odd_parquet(folder: Path) -> Path:
    """Clean except for an alias benchmark name (bulk path, renamed in SQL) ..."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = pl.DataFrame({"Model": ["org/a", "org/a", "org/b"], "benchmark": ["arc_challenge"] * 3,
                         "item_id": ["q1", "q2", "q1"], "correct": pl.Series([1, 0, 1], dtype=pl.Int8)})
    rows.write_parquet(folder / "alias.parquet")
    # ... and one whose ids need trimming (validator path, which trims)
    trim = rows.with_columns(pl.col("item_id") + "\u00a0", benchmark=pl.lit("gsm8k"))
    trim.write_parquet(folder / "trim.parquet")
    return folder


@pytest.mark.parametrize("source", ["small_long_dir", "odd"])
@pytest.mark.slow  # two stores filled from large parquet: make test runs it, make test-fast leaves it out
def test_bulk_parquet_path_stores_what_the_validator_path_stores(source: str, request: pytest.FixtureRequest,
                                                                 tmp_path: Path) -> None:
    """``Store.ingest`` checks clean parquet in SQL and inserts it set-wise; a custom reader forces the
    Polars reader + validator path. Both must leave identical stores (values, names, counts)."""
    from sparseeval.data.readers.detect import read_source
    from sparseeval.data.store import Store

    folder = request.getfixturevalue("small_long_dir") if source == "small_long_dir" else _odd_parquet(
        tmp_path / "odd")
    if source == "small_long_dir":
        from sparseeval.data.store import bulk_long as _bulk_long

        assert _bulk_long(folder) is not None
    bulk, regular = Store(tmp_path / "bulk.duckdb"), Store(tmp_path / "regular.duckdb")
    report_bulk = bulk.ingest(folder)
    report_regular = regular.ingest(folder, reader=lambda p: read_source(p))
    assert report_bulk.ok and report_regular.ok
    assert [(f.status, f.n_responses, f.n_scores, f.rows_read) for f in report_bulk.files] == [
        (f.status, f.n_responses, f.n_scores, f.rows_read) for f in report_regular.files]
    assert _contents(bulk.path) == _contents(regular.path)
    if source == "odd":
        from sparseeval.data.store import bulk_long as _bulk_long

        assert _bulk_long(folder / "alias.parquet") is not None  # checked in SQL, renamed in SQL
        assert _bulk_long(folder / "trim.parquet") is None  # left to the validator, which trims
        items = {i for _, _, i, _ in _contents(bulk.path)["responses"]}
        assert items == {"q1", "q2"}  # trimmed
        assert bulk.benchmarks() == ["arc", "gsm8k"]  # canonical


def test_bulk_path_overlap_adds_only_new_rows_and_refuses_conflicts(tmp_path: Path) -> None:
    from sparseeval.data.store import Store

    base = pl.DataFrame({"model": ["m1", "m1", "m2"], "benchmark": "arc", "item_id": ["a", "b", "a"],
                         "score": [1.0, 0.0, 1.0]})
    base.write_parquet(tmp_path / "first.parquet")
    superset = pl.concat([base, base.with_columns(pl.col("model") + "-new")])
    superset.write_parquet(tmp_path / "superset.parquet")
    base.with_columns(score=1.0 - pl.col("score")).write_parquet(tmp_path / "conflict.parquet")
    store = Store(tmp_path / "s.duckdb")
    assert store.ingest(tmp_path / "first.parquet").files[0].n_responses == 3
    assert store.ingest(tmp_path / "superset.parquet").files[0].n_responses == 3  # only the -new rows
    refused = store.ingest(tmp_path / "conflict.parquet").files[0]
    assert refused.status == "refused"
    assert "conflicting response" in refused.reason and "first.parquet" in refused.reason
    assert store.table_counts()["responses"] == 6
    # a repeated key within one file (another model answered the same item, so counts alone agree)
    dup = base.with_columns(item_id=pl.Series(["a", "a", "b"]), model=pl.Series(["m9", "m9", "m8"]))
    dup.write_parquet(tmp_path / "dup.parquet")
    from sparseeval.data.store import bulk_long as _bulk_long

    assert _bulk_long(tmp_path / "dup.parquet") is None
    refused = store.ingest(tmp_path / "dup.parquet").files[0]
    assert refused.status == "refused" and "duplicate key (model='m9'" in refused.reason


def test_matrix_from_the_store_lazily_equals_eager(small_long_dir: Path, tmp_path: Path) -> None:
    from sparseeval.data.store import Store

    store = Store(tmp_path / "s.duckdb")
    assert store.ingest(small_long_dir).ok
    lazy_resp, lazy_scores = store.load_long("gsm8k", lazy=True)
    assert isinstance(lazy_resp, pl.LazyFrame)
    eager = build_matrix(*store.load_long("gsm8k"), "gsm8k")
    lazy = build_matrix(lazy_resp, lazy_scores, "gsm8k")
    assert lazy.models == eager.models and lazy.items == eager.items
    np.testing.assert_array_equal(lazy.values, eager.values)
    np.testing.assert_array_equal(lazy.scores, eager.scores)
    assert lazy.score_source == ["reported"] * lazy.shape[0]
    assert store.load_long(None, lazy=True)[0].select(pl.len()).collect().item() == store.table_counts()[
        "responses"]
    with pytest.raises(EmptyMatrixError):
        build_matrix(*store.load_long("hellaswag", lazy=True), "hellaswag")
