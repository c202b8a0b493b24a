"""``predict --db`` records its predictions, so ``predictions_vs_truth`` works for CLI users (issue 31).

Real DuckDB store; the models' full scores are ingested, their anchor answers predicted by a predictor
fitted outside the store (so it is recorded as an outside anchor set, never served or published).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from sparseeval.data.store import Store
from sparseeval.interfaces.cli import main
from tests.test_artifact import irt_long


@pytest.fixture
def fitted(tmp_path: Path) -> tuple[Path, Path, Path]:
    responses, scores = irt_long(n_models=150, n_items=30, seed=9)
    data = tmp_path / "data"
    data.mkdir()
    responses.write_parquet(data / "responses.parquet")
    scores.write_parquet(data / "scores.parquet")
    assert main(["-q", "fit", "--data", str(data), "--benchmark", "toy", "-k", "6", "--method", "sparseeval-linear",
                 "--out", str(tmp_path / "pred")]) == 0
    answers = tmp_path / "answers.parquet"
    responses.filter(pl.col("model").is_in(["org1/m1", "org2/m2", "org3/m3"])).write_parquet(answers)
    return data, tmp_path / "pred", answers


def test_predict_records_in_the_store(tmp_path: Path, fitted, monkeypatch: pytest.MonkeyPatch) -> None:
    data, pred, answers = fitted
    db = tmp_path / "store.duckdb"
    store = Store(db)
    store.apply_schema()
    assert store.ingest(data).ok
    args = ["predict", "--predictor", str(pred), "--answers", str(answers)]
    assert main([*args, "--db", str(db)]) == 0
    truth = store.query("SELECT * FROM predictions_vs_truth ORDER BY model")
    assert truth.get_column("model").to_list() == ["org1/m1", "org2/m2", "org3/m3"]
    assert truth.get_column("true_score").null_count() == 0
    assert truth.get_column("abs_error").max() < 0.2
    sets = store.query("SELECT anchor_set_id, role, origin FROM anchor_sets")
    assert sets.rows() == [(truth["anchor_set_id"][0], "retired", "external")]  # never served or published
    # the same predictions again: an upsert, one outside anchor set
    monkeypatch.setenv("SPARSEEVAL_DB", str(db))  # the default store, when it exists
    assert main(args) == 0
    assert store.query("SELECT count(*) FROM predictions").item() == 3
    assert store.query("SELECT count(*) FROM anchor_sets").item() == 1
    assert main([*args, "--no-db"]) == 0
    monkeypatch.setenv("SPARSEEVAL_DB", str(tmp_path / "absent.duckdb"))
    assert main(args) == 0
    assert not (tmp_path / "absent.duckdb").exists()  # no store there: nothing created, nothing recorded
