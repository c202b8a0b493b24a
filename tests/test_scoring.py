"""Scoring held-out real models from their anchor answers (Open LLM Leaderboard v1, ARC, K=20).

The predictor is fitted and calibrated on models that exclude a held-out set; those held-out
models are then scored the way a user would: anchors exported for lm-eval, answers written as an
lm-eval samples folder, ``sparseeval predict`` run on it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sparseeval.data.access.answers import read_answers
from sparseeval.data.readers.base import InputError
from sparseeval.estimate.fitting import fit_predictor
from sparseeval.estimate.predicting import TooFewAnchorsError, compare, predict
from sparseeval.interfaces.cli import main
from sparseeval.interfaces.export import write_export
from tests.support import needs_real_data

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "openllm_v1"
N_HELD_OUT = 400

pytestmark = [pytest.mark.slow, needs_real_data]


#: the method the scoring tests publish (fast and deterministic)
METHOD = "sparseeval-linear"


@pytest.fixture(scope="module")
def arc():
    responses = pl.read_parquet(DATA / "responses.parquet").filter(pl.col("benchmark") == "arc") \
        .rename({"correct": "score"}).with_columns(pl.col("score").cast(pl.Float64))
    scores = pl.read_parquet(DATA / "scores.parquet").filter(pl.col("benchmark") == "arc")
    models = scores.get_column("model").sort().to_list()
    held = set(np.random.default_rng(42).choice(models, size=N_HELD_OUT, replace=False).tolist())
    keep = ~pl.col("model").is_in(held)
    art = fit_predictor(responses.filter(keep), scores.filter(keep), "arc", 20, METHOD, seed=0)
    return art, responses.filter(pl.col("model").is_in(held)), scores.filter(pl.col("model").is_in(held))


def write_samples_folder(root: Path, model: str, answers: dict[str, float]) -> Path:
    """An lm-eval ``--log_samples`` folder for ``model`` with one arc_challenge samples file."""
    folder = root / model.replace("/", "__")
    folder.mkdir(parents=True)
    lines = [json.dumps({"doc_id": int(doc), "filter": "none", "metrics": ["acc", "acc_norm"],
                         "acc": v, "acc_norm": v}) for doc, v in answers.items()]
    (folder / "samples_arc_challenge_2024-05-01T10-00-00.000000.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_held_out_coverage_and_accuracy(arc) -> None:
    art, held, held_scores = arc
    preds = predict(art, held)
    truth = dict(held_scores.select("model", "score").iter_rows())
    assert len(preds) == N_HELD_OUT
    inside = np.mean([p.lower <= truth[p.model] <= p.upper for p in preds])
    mae = np.mean([abs(p.predicted - truth[p.model]) for p in preds]) * 100
    assert 0.84 <= inside <= 0.97, inside
    assert mae < 4.0, mae
    assert np.mean([p.ood for p in preds]) < 0.05  # in-distribution models are rarely flagged


def test_export_then_predict_from_lm_eval_folder(arc, tmp_path: Path, capsys) -> None:
    art, held, _ = arc
    out = write_export([art], "lm-eval", tmp_path / "anchors.json")
    exported = json.loads(out.read_text())
    assert list(exported) == ["arc_challenge"]
    assert all(isinstance(d, int) for d in exported["arc_challenge"]) and len(exported["arc_challenge"]) == 20
    model = held.get_column("model")[0]
    rows = held.filter((pl.col("model") == model) & pl.col("item_id").is_in(art.anchor_item_ids))
    folder = write_samples_folder(tmp_path / "run", model, dict(rows.select("item_id", "score").iter_rows()))
    assert sorted(int(i) for i in rows.get_column("item_id")) == exported["arc_challenge"]
    art.save(tmp_path / "pred")
    capsys.readouterr()
    assert main(["predict", "--no-db",
                     "--predictor", str(tmp_path / "pred"), "--answers", str(tmp_path / "run"),
                 "--json", str(tmp_path / "p.json")]) == 0
    assert "20/20" in capsys.readouterr().out
    got = json.loads((tmp_path / "p.json").read_text())
    direct = predict(art, held.filter(pl.col("model") == model))[0]
    assert len(got) == 1 and got[0]["benchmark"] == "arc" and got[0]["n_anchors"] == 20
    assert got[0]["predicted"] == pytest.approx(direct.predicted)
    assert read_answers(folder).height == 20


def test_half_missing_widens_and_warns(arc) -> None:
    art, held, _ = arc
    model = held.get_column("model")[1]
    one = held.filter(pl.col("model") == model)
    full = predict(art, one)[0]
    half = predict(art, one.filter(~pl.col("item_id").is_in(art.anchor_item_ids[::2])))[0]
    assert half.n_anchors == 10 and full.n_anchors == 20
    assert half.upper - half.lower > full.upper - full.lower
    assert any("10 of 20 anchors not answered" in w for w in half.warnings)
    with pytest.raises(TooFewAnchorsError, match=f"{model}.*answered 9 of 20"):
        predict(art, one.filter(~pl.col("item_id").is_in(art.anchor_item_ids[:11])))


def test_garbage_answers_file_is_named(arc, tmp_path: Path, capsys) -> None:
    art, _, _ = arc
    art.save(tmp_path / "pred")
    garbage = tmp_path / "answers.csv"
    garbage.write_bytes(b"\x00\xff garbage \x01\x02\n\x00\x00")
    with pytest.raises(InputError, match=r"answers\.csv"):
        read_answers(garbage)
    assert main(["predict", "--no-db",
                     "--predictor", str(tmp_path / "pred"), "--answers", str(garbage)]) == 2
    assert str(garbage) in capsys.readouterr().err
    empty_run = tmp_path / "run"
    empty_run.mkdir()
    assert main(["predict", "--no-db",
                     "--predictor", str(tmp_path / "pred"), "--answers", str(empty_run)]) == 2
    assert "no lm-eval samples" in capsys.readouterr().err


def test_compare_paired_intervals(arc) -> None:
    art, held, held_scores = arc
    truth = dict(held_scores.select("model", "score").iter_rows())
    models = sorted(truth, key=truth.get)
    weak, strong = models[0], models[-1]
    c = compare(art, held, strong, weak)
    assert c.distinguishable and c.diff > 0 and c.lower > 0
    same = held.filter(pl.col("model") == strong).with_columns(pl.lit("copy").alias("model"))
    c_same = compare(art, pl.concat([held, same]), strong, "copy")
    assert c_same.diff == 0 and not c_same.distinguishable
    # the paired interval covers the true difference for most held-out pairs
    rng = np.random.default_rng(0)
    pairs = rng.choice(len(models), size=(60, 2), replace=False)
    hits = []
    for i, j in pairs:
        cc = compare(art, held, models[i], models[j])
        hits.append(cc.lower <= truth[models[i]] - truth[models[j]] <= cc.upper)
    assert np.mean(hits) >= 0.8
