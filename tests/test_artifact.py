"""Predictor artifact (save / load / tamper), calibration maths, export formats and answer files.

Fast tests on a small seeded item-response matrix; the real-data checks live in test_scoring.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sparseeval.data.access.answers import read_answers
from sparseeval.data.readers.base import InputError
from sparseeval.estimate import calibrate
from sparseeval.estimate import calibration as cal
from sparseeval.estimate.artifact import ArtifactError, harness_location, load_predictor
from sparseeval.estimate.fitting import fit_predictor
from sparseeval.estimate.predicting import TooFewAnchorsError, predict
from sparseeval.interfaces.cli import main
from sparseeval.interfaces.export import anchor_table, lm_eval_samples, write_export

#: the method the scoring tests publish (fast and deterministic)
METHOD = "sparseeval-linear"


def irt_long(n_models: int = 300, n_items: int = 60, pool: int = 400, seed: int = 0,
             benchmark: str = "toy") -> tuple[pl.DataFrame, pl.DataFrame]:
    """Seeded 2PL leaderboard: responses on ``n_items`` of a ``pool``; score = expected pool accuracy."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, 1.2, n_models)
    a, b = rng.uniform(0.5, 2.0, pool), rng.normal(0, 1, pool)
    p = 1 / (1 + np.exp(-a * (theta[:, None] - b)))
    Y = (rng.random((n_models, n_items)) < p[:, :n_items]).astype(np.float64)
    models = [f"org{i % 17}/m{i}" for i in range(n_models)]
    responses = pl.DataFrame({
        "model": np.repeat(models, n_items), "benchmark": benchmark,
        "item_id": np.tile([str(i) for i in range(n_items)], n_models), "score": Y.ravel(),
    })
    scores = pl.DataFrame({"model": models, "benchmark": benchmark, "score": p.mean(axis=1)})
    return responses, scores


@pytest.fixture(scope="module")
def fitted():
    responses, scores = irt_long()
    return fit_predictor(responses, scores, "toy", 10, METHOD, seed=1), responses, scores


def test_conformal_quantile_rank() -> None:
    scores = np.arange(1, 20, dtype=float)  # n = 19: rank ceil(20 * 0.9) = 18
    assert cal.conformal_quantile(scores, 0.1) == 18.0
    assert cal.conformal_quantile(np.arange(1, 10, dtype=float), 0.1) == 9.0  # rank capped at n
    assert cal.min_calibration_models(0.1) == 9


def test_split_conformal_covers_exchangeable_noise() -> None:
    rng = np.random.default_rng(3)
    hits = []
    for _ in range(200):
        resid = rng.standard_t(3, size=60)
        q = cal.conformal_quantile(np.abs(resid[:50]), 0.1)
        hits.extend(np.abs(resid[50:]) <= q)
    assert 0.87 <= np.mean(hits) <= 0.95


def test_save_load_roundtrip_and_idempotent(tmp_path: Path, fitted) -> None:
    art, responses, _ = fitted
    saved = art.save(tmp_path / "pred")
    meta = json.loads((tmp_path / "pred" / "predictor.json").read_text())
    assert meta["benchmark"] == "toy" and meta["k"] == 10 and meta["content_hash"].startswith("sha256:")
    assert [a["item_id"] for a in meta["anchors"]] == art.anchor_item_ids
    assert all(a["task"] == "toy" and a["doc_id"] == int(a["item_id"]) for a in meta["anchors"])
    loaded = load_predictor(tmp_path / "pred")
    assert loaded.content_hash == saved.content_hash
    assert [p.predicted for p in predict(loaded, responses.head(600))] == \
        [p.predicted for p in predict(art, responses.head(600))]
    before = {p.name: p.read_bytes() for p in (tmp_path / "pred").iterdir()}
    again = art.save(tmp_path / "pred")  # same content: same hash, same bytes, no temp folders left
    assert again.content_hash == saved.content_hash
    assert {p.name: p.read_bytes() for p in (tmp_path / "pred").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred"]


def test_tampered_artifact_is_refused(tmp_path: Path, fitted) -> None:
    art, _, _ = fitted
    folder = tmp_path / "pred"
    art.save(folder)
    meta_path = folder / "predictor.json"
    meta = json.loads(meta_path.read_text())
    meta["anchors"][0]["item_id"] = "59" if meta["anchors"][0]["item_id"] != "59" else "58"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="content hash mismatch"):
        load_predictor(folder)
    art.save(folder)  # re-publishing repairs it
    load_predictor(folder)
    state = folder / "state.safetensors"
    state.write_bytes(state.read_bytes()[:-1] + b"x")
    with pytest.raises(ArtifactError, match=str(folder)):
        load_predictor(folder)
    with pytest.raises(ArtifactError, match="not a predictor folder"):
        load_predictor(tmp_path)


def test_harness_location() -> None:
    assert harness_location("arc", "660") == ("arc_challenge", 660)
    assert harness_location("mmlu", "high_school_physics.12") == ("mmlu_high_school_physics", 12)
    assert harness_location("truthfulqa", "7") == ("truthfulqa_mc2", 7)
    assert harness_location("my_task", "3") == ("my_task", 3)
    assert harness_location("my_task", "q-3") == (None, None)


def test_export_formats(tmp_path: Path, fitted) -> None:
    art, _, _ = fitted
    samples = lm_eval_samples([art])
    assert list(samples) == ["toy"] and samples["toy"] == sorted(int(i) for i in art.anchor_item_ids)
    out = write_export([art], "lm-eval", tmp_path / "anchors.json")
    loaded = json.loads(out.read_text())
    assert loaded == samples and all(isinstance(v, int) for v in loaded["toy"])
    table = anchor_table([art])
    assert table.columns == ["benchmark", "task", "doc_id", "item_id", "position"] and table.height == 10
    csv = pl.read_csv(write_export([art], "csv", tmp_path / "anchors.csv"),
                      schema_overrides={"item_id": pl.String})
    assert csv.get_column("item_id").to_list() == art.anchor_item_ids


def test_missing_anchors_widen_and_too_few_refused(fitted) -> None:
    art, responses, _ = fitted
    one = responses.filter(pl.col("model") == "org3/m3")
    full = predict(art, one)[0]
    half = art.anchor_item_ids[: art.k // 2]
    partial = predict(art, one.filter(~pl.col("item_id").is_in(half)))[0]
    assert full.n_anchors == 10 and partial.n_anchors == 5
    assert partial.upper - partial.lower >= full.upper - full.lower
    assert any("not answered" in w for w in partial.warnings)
    with pytest.raises(TooFewAnchorsError, match="answered 4 of 10"):
        predict(art, one.filter(~pl.col("item_id").is_in(art.anchor_item_ids[:6])))


def test_missing_count_tables_measure_a_grid_and_never_narrow_between_its_counts() -> None:
    """Every missing count up to ten is measured; above, a geometric grid to K // 2, and a count between two
    grid counts takes the larger one's width (missing answers only lose information: never narrower)."""
    assert calibrate.missing_grid(10) == list(range(11)) and calibrate.missing_grid(0) == [0]
    assert calibrate.missing_grid(60) == [*range(11), 13, 17, 22, 28, 35, 44, 55, 60]
    responses, scores = irt_long(n_items=60)
    art = fit_predictor(responses, scores, "toy", 40, METHOD, seed=1)
    for name in ("q_by_missing", "q_pair_by_missing"):
        q = art.calibration[name]
        assert len(q) == 21 and q == sorted(q), name  # 0 .. K // 2, non-decreasing
        assert q[11] == q[12] == q[13] and q[14] == q[15] == q[16] == q[17] and q[18] == q[19] == q[20], name
    q = art.calibration["q_by_missing"]
    assert q[13] > q[10]  # the off-grid counts 11, 12 take 13's width, not 10's
    assert cal.pair_halfwidth(12, 0, art.calibration) == art.calibration["q_pair_by_missing"][13]


def test_ood_flags_inverted_answers(fitted) -> None:
    art = fitted[0]
    X_typical = np.array([[1.0] * art.k])
    # answers that contradict the items' difficulty ordering: easy ones wrong, hard ones right
    fill = np.asarray(art.calibration["ood"]["location"])
    X_odd = (fill < np.median(fill)).astype(float)[None, :]
    d_odd = cal.ood_scores(X_odd, art.calibration["ood"])[0]
    d_typ = cal.ood_scores(X_typical, art.calibration["ood"])[0]
    assert d_odd > art.calibration["ood"]["threshold"] > d_typ
    rows = pl.DataFrame({"model": "odd", "benchmark": "toy", "item_id": art.anchor_item_ids,
                         "score": X_odd[0]})
    pred = predict(art, rows)[0]
    assert pred.ood and any(w.startswith("OOD") for w in pred.warnings)


def test_answer_files(tmp_path: Path) -> None:
    two = tmp_path / "mine.csv"
    two.write_text("item_id,correct\n3,1\n5,0\n7,true\n")
    df = read_answers(two, benchmark="toy")
    assert df.rows() == [("mine", "toy", "3", 1.0), ("mine", "toy", "5", 0.0), ("mine", "toy", "7", 1.0)]
    with pytest.raises(InputError, match="no benchmark column"):
        read_answers(two)
    bad = tmp_path / "bad.csv"
    bad.write_text("model,benchmark,item_id,score\nm,toy,1,0.5\nm,toy,2,1.7\n")
    with pytest.raises(InputError, match=r"bad\.csv, line 3, column 'score': score outside \[0, 1\]: 1\.7"):
        read_answers(bad)
    word = tmp_path / "word.csv"
    word.write_text("model,benchmark,item_id,score\nm,toy,1,0.5\nm,toy,2,yes\n")
    with pytest.raises(InputError, match=r"word\.csv, line 3, column 'score': wrong type: score 'yes' is not a number"):
        read_answers(word)
    dup = tmp_path / "dup.csv"
    dup.write_text("model,benchmark,item_id,score\nm,toy,1,0.5\nm,toy,1,1\n")
    with pytest.raises(InputError, match=r"duplicate key .*item_id=.1.. appears more than once \(lines 2, 3\)"):
        read_answers(dup)
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(InputError, match=r"garbage\.parquet: not a readable parquet file"):
        read_answers(garbage)


def test_cli_fit_export_predict_compare(tmp_path: Path, capsys) -> None:
    responses, scores = irt_long(seed=5)
    data = tmp_path / "data"
    data.mkdir()
    responses.write_parquet(data / "responses.parquet")
    scores.write_parquet(data / "scores.parquet")
    reg = tmp_path / "registry"
    assert main(["fit", "--data", str(data), "--benchmark", "toy", "-k", "8", "--method", METHOD,
                 "--registry", str(reg)]) == 0
    assert (reg / "toy" / "predictor.json").is_file()
    assert main(["export", "--benchmark", "toy", "--registry", str(reg),
                 "--out", str(tmp_path / "a.json")]) == 0
    assert len(json.loads((tmp_path / "a.json").read_text())["toy"]) == 8
    # no --predictor/--benchmark: every published predictor in the registry
    assert main(["export", "--registry", str(reg), "--format", "csv", "--out", str(tmp_path / "all.csv")]) == 0
    assert pl.read_csv(tmp_path / "all.csv").height == 8
    assert main(["export", "--registry", str(tmp_path / "empty"), "--out", str(tmp_path / "x.json")]) == 2
    answers = tmp_path / "answers.parquet"
    responses.filter(pl.col("model").is_in(["org1/m1", "org2/m2"])).write_parquet(answers)
    capsys.readouterr()
    assert main(["predict", "--no-db",
                     "--benchmark", "toy", "--registry", str(reg), "--answers", str(answers),
                 "--json", str(tmp_path / "p.json")]) == 0
    assert "org1/m1" in capsys.readouterr().out
    rows = json.loads((tmp_path / "p.json").read_text())
    assert [r["model"] for r in rows] == ["org1/m1", "org2/m2"]
    assert set(rows[0]) == {"model", "benchmark", "predicted", "lower", "upper", "n_anchors", "k", "ood", "ood_score",
                            "ood_reasons", "warnings", "stage", "probe_items", "probe_next", "anchors_predicted",
                            "design_halfwidth"}
    assert all(r["lower"] <= r["predicted"] <= r["upper"] and r["n_anchors"] == 8 for r in rows)
    assert main(["compare", "--benchmark", "toy", "--registry", str(reg), "--answers", str(answers)]) == 0
    assert "paired interval" in capsys.readouterr().out
    assert main(["predict", "--no-db",
                     "--predictor", str(tmp_path / "nowhere"), "--answers", str(answers)]) == 2
    assert "nowhere: not a predictor folder" in capsys.readouterr().err


def test_answers_from_an_lm_eval_folder(tmp_path: Path) -> None:
    """Answers read from lm-eval samples: metric, filter (strict-match for gsm8k), MMLU ids, bad lines."""
    from sparseeval.data.access.answers import read_answers

    folder = tmp_path / "org__model"
    folder.mkdir()
    (folder / "results_2024-05-01T10-00-00.000000.json").write_text(
        json.dumps({"results": {}, "config": {"model_args": "pretrained=org/model,dtype=bfloat16"}}))
    mmlu = folder / "samples_mmlu_anatomy_2024-05-01T10-00-00.000000.jsonl"
    mmlu.write_text("\n".join(json.dumps({"doc_id": d, "filter": "none", "metrics": ["acc"],
                                          "acc": float(d % 2)}) for d in range(3)) + "\n")
    gsm = folder / "samples_gsm8k_2024-05-01T10-00-00.000000.jsonl"
    gsm.write_text("\n".join(json.dumps({"doc_id": d, "filter": f, "metrics": ["exact_match"],
                                         "exact_match": float(f == "flexible-extract")})
                             for d in range(2) for f in ("flexible-extract", "strict-match")) + "\n")
    df = read_answers(folder).sort("benchmark", "item_id")
    assert df.get_column("filter").to_list() == ["strict-match"] * 2 + ["none"] * 3  # the settings come along
    assert df.select("model", "benchmark", "item_id", "score").rows() == [
        ("org/model", "gsm8k", "0", 0.0), ("org/model", "gsm8k", "1", 0.0), ("org/model", "mmlu", "anatomy.0", 0.0),
        ("org/model", "mmlu", "anatomy.1", 1.0), ("org/model", "mmlu", "anatomy.2", 0.0)]
    gsm.write_text('{"doc_id": 0, "filter": "strict-match", "metrics": ["exact_match"], "exact_match": 1.0}\n'
                   '{"doc_id": 1, "filter": "strict-match"\n')
    with pytest.raises(InputError, match=r"samples_gsm8k_.*line 2"):
        read_answers(folder)
