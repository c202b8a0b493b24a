"""The stored matrix: new models are appended, and the result equals a full rebuild cell for cell; any
other change (a replaced run, new answers of a model already there) rebuilds and says why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sparseeval.data.access.matrix_store import MatrixStore
from sparseeval.data.matrix import ResponseMatrix, append_models, build_matrix
from sparseeval.data.store import Store


def _long(rows: list[tuple[str, str, float]], bench: str = "arc") -> pl.DataFrame:
    return pl.DataFrame([(m, bench, i, s) for m, i, s in rows], orient="row",
                        schema={"model": pl.String, "benchmark": pl.String, "item_id": pl.String, "score": pl.Float64})


def _unit(folder: Path, responses: list[tuple[str, str, float]], scores: dict[str, float]) -> Path:
    folder.mkdir(parents=True)
    _long(responses).write_parquet(folder / "responses.parquet")
    pl.DataFrame({"model": list(scores), "benchmark": "arc", "score": list(scores.values())}).write_parquet(
        folder / "scores.parquet")
    return folder


def _grid(models: list[str], items: list[str], seed: int, skip: float = 0.1) -> list[tuple[str, str, float]]:
    rng = np.random.default_rng(seed)
    return [(m, i, float(rng.integers(0, 2))) for m in models for i in items if rng.random() > skip]


def _same(a: ResponseMatrix, b: ResponseMatrix) -> None:
    """Cell for cell: names, values, mask, targets, their sources, dropped models, data version."""
    assert (a.models, a.items, a.dropped_models, a.score_source) == (b.models, b.items, b.dropped_models,
                                                                     b.score_source)
    assert np.array_equal(np.asarray(a.values), np.asarray(b.values))
    assert np.array_equal(np.asarray(a.observed), np.asarray(b.observed))
    assert np.array_equal(np.asarray(a.scores), np.asarray(b.scores))
    assert a.data_version == b.data_version


@pytest.fixture
def stored(tmp_path: Path) -> tuple[Store, MatrixStore, Path]:
    store = Store(tmp_path / "db" / "sparseeval.duckdb")
    items = [f"q{i:02d}" for i in range(12)]
    day1 = [f"org/m{i:02d}" for i in range(0, 30, 2)]  # new models will sort between these
    store.ingest(_unit(tmp_path / "src" / "day1", _grid(day1, items, 0), {m: 0.5 for m in day1}))
    return store, MatrixStore.beside(store), tmp_path / "src"


def test_new_models_are_appended_and_equal_a_full_rebuild(stored: tuple[Store, MatrixStore, Path]) -> None:
    store, matrices, src = stored
    first = matrices.update(store, "arc")
    assert first.how == "rebuilt" and first.reason == "no stored matrix"
    assert Path(first.matrix.stored_at).parent == matrices.folder / "arc"
    assert isinstance(first.matrix.values, np.memmap)  # read back memory-mapped, not copied
    # new models (sorting between the old ones), one answering a new item, one without a score (dropped)
    new = [f"org/m{i:02d}" for i in range(1, 9, 2)]
    rows = [*_grid(new, [f"q{i:02d}" for i in range(12)], 1), ("org/m03", "q99", 1.0), ("org/zz-noscore", "q00", 1.0)]
    store.ingest(_unit(src / "day2", rows, {m: 0.25 for m in new}))
    second = matrices.update(store, "arc")
    assert second.how == "appended" and second.added_models == 5, second.describe()
    rebuilt = store.read_benchmark("arc")  # every row, as before this design
    _same(second.matrix, rebuilt)
    assert "q99" in second.matrix.items and second.matrix.dropped_models == ["org/zz-noscore"]
    assert not second.matrix.observed[:, second.matrix.items.index("q99")][
        [second.matrix.models.index(m) for m in first.matrix.models]].any()  # old rows never saw the new item
    # unchanged store: the stored version again, nothing rebuilt
    again = matrices.update(store, "arc")
    assert again.how == "unchanged" and again.matrix.stored_at == second.matrix.stored_at


def test_replaced_runs_and_new_answers_of_known_models_rebuild(stored: tuple[Store, MatrixStore, Path]) -> None:
    store, matrices, src = stored
    matrices.update(store, "arc")
    # more answers of a model already in the matrix (merged into its row): not an append
    store.ingest(_unit(src / "more", [("org/m00", "q77", 1.0)], {}))
    update = matrices.update(store, "arc")
    assert update.how == "rebuilt" and "already in the matrix" in update.reason
    _same(update.matrix, store.read_benchmark("arc"))
    # a corrected re-run of the first file replaces its runs: not an append either
    day1 = src / "day1"
    frame = pl.read_parquet(day1 / "responses.parquet").with_columns(score=1.0 - pl.col("score"))
    frame.write_parquet(day1 / "responses.parquet")
    store.ingest(day1)
    update = matrices.update(store, "arc")
    assert update.how == "rebuilt" and "replaced" in update.reason
    _same(update.matrix, store.read_benchmark("arc"))


def test_a_damaged_stored_matrix_is_rebuilt_and_old_versions_pruned(stored: tuple[Store, MatrixStore, Path]) -> None:
    store, matrices, src = stored
    first = matrices.update(store, "arc")
    (Path(first.matrix.stored_at) / "meta.json").write_text("{not json")
    update = matrices.update(store, "arc")
    assert update.how == "rebuilt" and update.reason == "no stored matrix"
    for day in range(5):  # one version per new data version; only the newest few stay
        model = f"org/new{day}"
        store.ingest(_unit(src / f"d{day}", _grid([model], ["q00", "q01"], day, skip=0.0), {model: 0.5}))
        assert matrices.update(store, "arc").how == "appended"
    versions = [p for p in (matrices.folder / "arc").iterdir() if p.is_dir()]
    assert len(versions) == 3
    _same(MatrixStore.load(matrices.latest("arc")[0]), store.read_benchmark("arc"))


def test_a_reader_of_an_older_version_gets_the_newer_one_another_writer_stored(
        stored: tuple[Store, MatrixStore, Path]) -> None:
    """The pipeline passes a reference to the version its matrix step stored; when ``sparseeval refresh``
    stored a newer one of the same benchmark since, a later step (the joint predictor, the comparison) reads
    that one, not a matrix behind the store."""
    store, matrices, src = stored
    first = Path(matrices.update(store, "arc").matrix.stored_at)
    assert MatrixStore.newest(first) == first
    model = "org/later"
    store.ingest(_unit(src / "later", _grid([model], ["q00", "q01"], 5, skip=0.0), {model: 0.5}))
    second = Path(matrices.update(store, "arc").matrix.stored_at)
    assert second != first and MatrixStore.newest(first) == second and MatrixStore.newest(second) == second
    assert MatrixStore.load(MatrixStore.newest(first)).data_version == store.data_version("arc")


def test_append_models_refuses_a_model_it_already_holds() -> None:
    old = build_matrix(_long([("a", "i1", 1.0), ("b", "i1", 0.0)]), pl.DataFrame(
        {"model": ["a", "b"], "benchmark": "arc", "score": [1.0, 0.0]}), "arc")
    with pytest.raises(ValueError, match="already in the matrix"):
        append_models(old, old)


def test_the_store_built_matrix_equals_the_polars_one_on_hostile_names(tmp_path: Path) -> None:
    """The full rebuild codes cells in DuckDB (:meth:`Store.read_matrix`); its order of names and every cell
    must be :func:`build_matrix`'s, names that sort differently by case, accent or script included."""
    store = Store(tmp_path / "sparseeval.duckdb")
    models = ["org/Zeta", "org/alpha", "org/Ärger", "org/a\u0301b", "org/ab", "org/日本", "Org/x", "org/zz-noscore"]
    items = ["q10", "q9", "Q1", "é", "e\u0301", "z z", "_x", "日"]
    rows = _grid(models, items, 3, skip=0.3)
    store.ingest(_unit(tmp_path / "u", rows, {m: 0.4 for m in models if m != "org/zz-noscore"}))
    _same(store.read_matrix("arc"), store.read_benchmark("arc"))
