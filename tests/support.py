"""Helpers shared by the tests (imported as ``tests.support``; fixtures live in conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest

OPENLLM_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "openllm_v1"
#: tests on the real data: skipped where it is absent, except under CI (which has it), where they run and
#: fail, so a CI run without the data can never pass by skipping them
needs_real_data = pytest.mark.skipif(not (OPENLLM_DIR / "responses.parquet").is_file() and not os.environ.get("CI"),
                                     reason=f"real data absent at {OPENLLM_DIR}")

#: shape of ``small_long_dir``: benchmarks x models x items, fixed so tests can assert counts
SMALL_BENCHMARKS = ("arc", "gsm8k")
SMALL_MODELS = 12
SMALL_ITEMS = 8


def make_long_frames(seed: int = 0, n_models: int = SMALL_MODELS, n_items: int = SMALL_ITEMS,
                     benchmarks: tuple[str, ...] = SMALL_BENCHMARKS,
                     prefix: str = "org") -> tuple[pl.DataFrame, pl.DataFrame]:
    """Seeded long responses (0/1) and their row-mean scores, with ``org{k}/model-{m}`` names."""
    rng = np.random.default_rng(seed)
    models = [f"{prefix}{m % 3}/model-{m}" for m in range(n_models)]
    rows = pl.DataFrame({"model": models}).join(
        pl.DataFrame({"benchmark": list(benchmarks)}), how="cross").join(
        pl.DataFrame({"item_id": [str(i) for i in range(n_items)]}), how="cross")
    responses = rows.with_columns(correct=pl.Series(rng.integers(0, 2, rows.height), dtype=pl.Int8))
    scores = responses.group_by("model", "benchmark").agg(score=pl.col("correct").mean()).sort(
        "model", "benchmark")
    return responses, scores
