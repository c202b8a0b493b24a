"""The synthetic leaderboard: layout, realism properties the methods rely on, reproducibility."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sparseeval.data.matrix import build_matrix
from sparseeval.data.synthetic import (
    DEFAULT_BENCHMARKS,
    SyntheticLeaderboard,
    generate_leaderboard,
    write_leaderboard,
)

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "openllm_v1"


@pytest.fixture(scope="module")
def lb() -> SyntheticLeaderboard:
    return generate_leaderboard(n_families=30, models_per_family=8, seed=7)


def test_shapes_and_dtypes(lb: SyntheticLeaderboard) -> None:
    assert lb.models.height == 240
    assert lb.models.get_column("model").n_unique() == 240
    assert lb.responses.schema == pl.Schema(
        {"model": pl.String, "benchmark": pl.String, "item_id": pl.String, "correct": pl.Int8})
    assert lb.scores.schema == pl.Schema({"model": pl.String, "benchmark": pl.String, "score": pl.Float64})
    assert lb.models.schema == pl.Schema(
        {"model": pl.String, "submitted_at": pl.Datetime("us"), "n_params": pl.Float64,
         "base_model": pl.String})
    assert set(lb.scores.get_column("benchmark")) == set(DEFAULT_BENCHMARKS)
    assert lb.scores.height == 240 * len(DEFAULT_BENCHMARKS)
    assert set(lb.responses.get_column("correct").unique()) == {0, 1}
    # unique keys, models are org/name, every base_model is itself a model
    assert not lb.responses.select("model", "benchmark", "item_id").is_duplicated().any()
    assert lb.models.get_column("model").str.contains(r"^org-\d+/[a-z0-9.-]+$").all()
    bases = lb.models.get_column("base_model").drop_nulls()
    assert bases.is_in(lb.models.get_column("model").implode()).all()
    assert lb.models.get_column("base_model").null_count() == 30  # one base per family
    # written pool is a strict subset of the full pool (60% by default)
    written = lb.responses.group_by("benchmark").agg(pl.col("item_id").n_unique()).rows()
    for bench, n in written:
        assert n == round(0.6 * DEFAULT_BENCHMARKS[bench])
    mmlu_ids = lb.responses.filter(pl.col("benchmark") == "mmlu").get_column("item_id")
    assert mmlu_ids.str.contains(r"^[a-z_]+\.\d+$").all()


def test_scores_in_range_and_realistic(lb: SyntheticLeaderboard) -> None:
    s = lb.scores.get_column("score")
    assert s.min() >= 0.0 and s.max() <= 1.0
    means = dict(lb.scores.group_by("benchmark").agg(pl.col("score").mean()).rows())
    assert means["hellaswag"] > means["mmlu"] > means["gsm8k"]  # calibrated to leaderboard levels
    spread = dict(lb.scores.group_by("benchmark").agg(pl.col("score").std()).rows())
    assert all(0.05 < v < 0.35 for v in spread.values())
    # gsm8k has no guessing floor: weak models get close to 0; 4-way MC floors near 0.25
    mins = dict(lb.scores.group_by("benchmark").agg(pl.col("score").min()).rows())
    assert mins["gsm8k"] < 0.05 < 0.15 < mins["arc"]


def test_missing_fraction_close_and_no_empty_row() -> None:
    lb = generate_leaderboard(n_families=20, models_per_family=5, missing_frac=0.1, seed=3)
    n_cells = 100 * sum(round(0.6 * n) for n in DEFAULT_BENCHMARKS.values())
    observed = lb.responses.height / n_cells
    assert abs((1 - observed) - 0.1) < 0.01
    # extreme missingness on a tiny benchmark still leaves every model at least one answer
    tiny = generate_leaderboard(n_families=20, models_per_family=5, benchmarks={"tiny": 3},
                                missing_frac=0.95, seed=3)
    per_model = tiny.responses.group_by("model").len()
    assert per_model.height == 100 and per_model.get_column("len").min() >= 1


def test_families_share_structure(lb: SyntheticLeaderboard) -> None:
    wide = lb.scores.pivot(on="benchmark", index="model", values="score").sort("model")
    Z = wide.drop("model").to_numpy()
    Z = (Z - Z.mean(axis=0)) / Z.std(axis=0)  # profile across benchmarks, per model
    C = np.corrcoef(Z)
    fam = wide.get_column("model").str.split("/").list.first().to_numpy()
    same = fam[:, None] == fam[None, :]
    off = ~np.eye(len(fam), dtype=bool)
    within, between = C[same & off].mean(), C[~same].mean()
    assert within > between + 0.3, (within, between)


def test_newer_models_are_stronger() -> None:
    lb = generate_leaderboard(seed=1)
    frame = lb.scores.group_by("model").agg(pl.col("score").mean()).join(lb.models, on="model")
    median = frame.get_column("submitted_at").median()
    newer = frame.filter(pl.col("submitted_at") > median).get_column("score").mean()
    older = frame.filter(pl.col("submitted_at") <= median).get_column("score").mean()
    assert newer > older + 0.03
    days = (frame.get_column("submitted_at").max() - frame.get_column("submitted_at").min()).days
    assert 365 < days <= 730


def test_reproducible_and_seed_sensitive() -> None:
    a = generate_leaderboard(n_families=6, models_per_family=4, seed=11)
    b = generate_leaderboard(n_families=6, models_per_family=4, seed=11)
    c = generate_leaderboard(n_families=6, models_per_family=4, seed=12)
    for name in ("responses", "scores", "models"):
        assert getattr(a, name).equals(getattr(b, name))
    assert not a.responses.equals(c.responses)
    assert not a.scores.equals(c.scores)


def test_custom_benchmarks_and_bad_arguments() -> None:
    lb = generate_leaderboard(n_families=4, models_per_family=3, benchmarks={"my_task": 50},
                              ability_dims=5, seed=0)
    assert set(lb.responses.get_column("benchmark")) == {"my_task"}
    assert lb.responses.get_column("item_id").n_unique() == 30
    with pytest.raises(ValueError, match="missing_frac"):
        generate_leaderboard(missing_frac=1.0)
    with pytest.raises(ValueError, match="benchmarks"):
        generate_leaderboard(benchmarks={"x": 0})
    with pytest.raises(ValueError, match="ability_dims"):
        generate_leaderboard(ability_dims=0)


def test_written_folder_row_mean_is_not_the_score(lb: SyntheticLeaderboard, tmp_path) -> None:
    paths = write_leaderboard(lb, tmp_path / "synthetic")
    assert set(paths) == {"responses", "scores", "models"}
    resp = pl.read_parquet(paths["responses"])
    scores = pl.read_parquet(paths["scores"])
    assert resp.equals(lb.responses) and pl.read_parquet(paths["models"]).equals(lb.models)
    # same layout as the real data folder, when present
    if (REAL / "responses.parquet").exists():
        real = pl.read_parquet_schema(REAL / "responses.parquet")
        assert resp.schema == pl.Schema(real)
        assert scores.schema == pl.Schema(pl.read_parquet_schema(REAL / "scores.parquet"))
    joined = (resp.group_by("model", "benchmark").agg(pl.col("correct").mean().alias("row_mean"))
              .join(scores, on=["model", "benchmark"]))
    per_bench = joined.group_by("benchmark").agg(
        pl.corr("row_mean", "score").alias("r"),
        (pl.col("row_mean") - pl.col("score")).abs().mean().alias("gap"),
    )
    assert (per_bench.get_column("r") > 0.8).all()
    assert (per_bench.get_column("gap") > 0.005).all()  # a subset pool: the row mean is not the score
    # the canonical matrix builder takes it with the reported score as target
    m = build_matrix(resp.rename({"correct": "score"}).with_columns(pl.col("score").cast(pl.Float64)),
                     scores, "arc")
    assert m.shape == (240, round(0.6 * DEFAULT_BENCHMARKS["arc"]))
    assert set(m.score_source) == {"reported"}
    # rewriting is idempotent and leaves no temporary files behind
    write_leaderboard(lb, tmp_path / "synthetic")
    assert sorted(p.name for p in (tmp_path / "synthetic").iterdir()) == [
        "models.parquet", "responses.parquet", "scores.parquet"]
