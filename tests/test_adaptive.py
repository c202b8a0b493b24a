"""Adaptive anchors: the published order, nominal coverage for every prefix on held-out models, and
``sparseeval next`` / ``export --first`` never proposing what was already answered."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sparseeval.estimate.adaptive import order_of
from sparseeval.estimate.artifact import PredictorArtifact, load_predictor
from sparseeval.estimate.fitting import fit_predictor
from sparseeval.estimate.predicting import TooFewAnchorsError, predict
from sparseeval.interfaces import cli

N_FIT, N_HELD, N_ITEMS, K = 900, 600, 50, 12


def synthetic(seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """2PL answers on ``N_ITEMS`` written items; the score is the expected accuracy on a 300-item pool."""
    rng = np.random.default_rng(seed)
    n = N_FIT + N_HELD
    theta = rng.normal(size=n)
    a, d = rng.uniform(0.7, 2.5, 300), rng.normal(scale=1.3, size=300)
    p = 1 / (1 + np.exp(-(a[None, :] * theta[:, None] - d[None, :])))
    y = (rng.random((n, N_ITEMS)) < p[:, :N_ITEMS]).astype(np.float32)
    models = [f"org{m % 30}/m{m}" for m in range(n)]
    resp = pl.DataFrame({"model": np.repeat(models, N_ITEMS), "benchmark": "arc",
                         "item_id": np.tile([str(i) for i in range(N_ITEMS)], n), "score": y.ravel()})
    scores = pl.DataFrame({"model": models, "benchmark": "arc", "score": p.mean(axis=1)})
    return resp, scores, models


@pytest.fixture(scope="module")
def fitted() -> tuple[PredictorArtifact, pl.DataFrame, dict[str, float]]:
    resp, scores, models = synthetic()
    held = set(models[N_FIT:])
    art = fit_predictor(resp.filter(~pl.col("model").is_in(held)), scores.filter(~pl.col("model").is_in(held)),
                        "arc", K, "sparseeval-linear", seed=0, device="cpu", calibration_frac=0.3)
    truth = dict(scores.filter(pl.col("model").is_in(held)).select("model", "score").iter_rows())
    return art, resp.filter(pl.col("model").is_in(held)), truth


def test_order_is_a_permutation_and_stored(fitted, tmp_path: Path) -> None:
    art, _, _ = fitted
    order = order_of(art)
    assert sorted(order) == list(range(K)) and order != []
    q = art.extra["adaptive"]["q_by_prefix"]
    assert len(q) == K + 1
    # more answers, narrower intervals: the full set is far narrower than one anchor
    assert q[K] < 0.7 * q[1]
    loaded = load_predictor(art.save(tmp_path / "p").folder)
    assert order_of(loaded) == order


def test_coverage_is_nominal_for_every_prefix(fitted) -> None:
    art, held, truth = fitted
    order = order_of(art)
    coverage, widths = [], []
    for p in (1, 2, 4, 6, 9, K):
        keep = [art.anchors[i].item_id for i in order[:p]]
        preds = predict(art, held.filter(pl.col("item_id").is_in(keep)))
        assert {x.n_anchors for x in preds} == {p}
        y = np.array([truth[x.model] for x in preds])
        lo, hi = np.array([x.lower for x in preds]), np.array([x.upper for x in preds])
        coverage.append(float(np.mean((lo <= y) & (y <= hi))))
        widths.append(float(np.mean(hi - lo)))
    assert all(0.83 <= c <= 0.97 for c in coverage), coverage
    assert 0.86 <= np.mean(coverage) <= 0.94, coverage
    assert widths[-1] < 0.7 * widths[0], widths  # the intervals really shrink with the prefix


def test_non_prefix_subsets_below_half_are_refused(fitted) -> None:
    art, held, _ = fitted
    order = order_of(art)
    one = held.filter(pl.col("model") == held.get_column("model")[0])
    # the last three of the order: fewer than half, and not a prefix
    tail = [art.anchors[i].item_id for i in order[-3:]]
    with pytest.raises(TooFewAnchorsError, match="sparseeval next"):
        predict(art, one.filter(pl.col("item_id").is_in(tail)))
    # any subset of at least half is fine
    half = [art.anchors[i].item_id for i in order[::2]]
    assert predict(art, one.filter(pl.col("item_id").is_in(half)))[0].n_anchors == K // 2


@pytest.fixture
def with_next():
    assert "next" in cli.COMMANDS  # registered in the CLI


def test_next_never_proposes_answered_items(fitted, tmp_path: Path, with_next, capsys) -> None:
    art, held, _ = fitted
    folder = art.save(tmp_path / "pred").folder
    order = order_of(art)
    model = held.get_column("model")[3]
    answered_pos = [*order[:4], order[8]]  # a prefix plus one item further down the order
    ids = [art.anchors[i].item_id for i in answered_pos]
    answers = tmp_path / "answers.parquet"
    held.filter((pl.col("model") == model) & pl.col("item_id").is_in(ids)).write_parquet(answers)
    out = tmp_path / "next.json"
    assert cli.main(["next", "--predictor", str(folder), "--answers", str(answers), "--batch", "5",
                     "--json", str(out)]) == 0
    (step,) = json.loads(out.read_text())
    proposed = [n["position"] for n in step["next"]]
    assert step["n_answered"] == 5 and not step["done"]
    assert not set(proposed) & set(answered_pos)
    assert proposed == [p for p in order if p not in answered_pos][:5]
    assert [n["item_id"] for n in step["next"]] == [art.anchors[p].item_id for p in proposed]
    # a target the interval already meets: nothing to run
    assert cli.main(["next", "--predictor", str(folder), "--answers", str(answers), "--target-width", "60",
                     "--json", str(out)]) == 0
    (done,) = json.loads(out.read_text())
    assert done["done"] and done["next"] == [] and "target met" in done["reason"]
    # everything answered: never proposes anything
    held.filter(pl.col("model") == model).write_parquet(answers)
    assert cli.main(["next", "--predictor", str(folder), "--answers", str(answers), "--json", str(out)]) == 0
    (full,) = json.loads(out.read_text())
    assert full["done"] and full["n_answered"] == K and full["next"] == []
    assert "run next" not in capsys.readouterr().out.splitlines()[-1]


def test_export_first_follows_the_order(fitted, tmp_path: Path, with_next) -> None:
    art, _, _ = fitted
    folder = art.save(tmp_path / "pred").folder
    out = tmp_path / "first.csv"
    assert cli.main(["export", "--predictor", str(folder), "--format", "csv", "--out", str(out), "--first", "4"]) == 0
    table = pl.read_csv(out, schema_overrides={"item_id": pl.String})
    assert table.get_column("position").to_list() == order_of(art)[:4]
    lm = tmp_path / "first.json"
    assert cli.main(["export", "--predictor", str(folder), "--out", str(lm), "--first", "4"]) == 0
    assert sum(len(v) for v in json.loads(lm.read_text()).values()) == 4
