"""Shared fixtures: a fresh DuckDB path, the real openllm_v1 data, and a small long-format folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from tests.support import OPENLLM_DIR, SMALL_MODELS, make_long_frames


@pytest.fixture
def tmp_db(tmp_path: Path) -> Path:
    """Path of a DuckDB file that does not exist yet (the store creates it)."""
    return tmp_path / "db" / "sparseeval.duckdb"


@pytest.fixture(scope="session")
def openllm_dir() -> Path:
    """The real Open LLM Leaderboard v1 sample shipped next to the repository, or skip."""
    if not (OPENLLM_DIR / "responses.parquet").exists():
        pytest.skip(f"real data not found at {OPENLLM_DIR}")
    return OPENLLM_DIR


@pytest.fixture
def small_long_dir(tmp_path: Path) -> Path:
    """``responses.parquet`` + ``scores.parquet`` + ``models.csv`` for 12 models x 2 benchmarks x 8 items."""
    folder = tmp_path / "small_long"
    folder.mkdir()
    responses, scores = make_long_frames()
    responses.write_parquet(folder / "responses.parquet")
    scores.write_parquet(folder / "scores.parquet")
    pl.DataFrame({
        "model": responses.get_column("model").unique().sort(),
        "submitted_at": [f"2024-01-{d + 1:02d}" for d in range(SMALL_MODELS)],
        "n_params": [7e9] * SMALL_MODELS,
    }).write_csv(folder / "models.csv")
    return folder


@pytest.fixture
def db_fingerprint() -> Callable[[Path], dict[str, tuple[int, int]]]:
    """(row count, order-independent hash of all rows) per data table of a store, read from the file.

    ``ingests`` is left out: a refusal is *supposed* to add its audit row there.
    """
    import duckdb

    from sparseeval.store import TABLES

    def fingerprint(db: Path) -> dict[str, tuple[int, int]]:
        con = duckdb.connect(str(db), read_only=True)
        try:
            return {t: con.sql(f"SELECT count(*), coalesce(bit_xor(hash(x)), 0) FROM {t} x").fetchall()[0]
                    for t in (*TABLES, "response_rows", "ingest_notes") if t != "ingests"}
        finally:
            con.close()

    return fingerprint


@pytest.fixture(scope="session")
def synthetic_matrix():
    """A small synthetic leaderboard benchmark as a ResponseMatrix (160 models x ~90 items)."""
    from sparseeval.matrix import build_matrix
    from sparseeval.synthetic import generate_leaderboard

    lb = generate_leaderboard(n_families=16, models_per_family=10, benchmarks={"arc": 150}, seed=3)
    responses = lb.responses.rename({"correct": "score"}).with_columns(pl.col("score").cast(pl.Float64))
    return build_matrix(responses, lb.scores, "arc")


@pytest.fixture(scope="session")
def openllm_parsed(openllm_dir: Path):
    """The real data read once per session through the project's own reader."""
    from sparseeval.sources import read_data

    return read_data(openllm_dir)
