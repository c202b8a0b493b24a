"""The naming faults of issue 31, each on a real file that shows it (through the real store and predict).

* ``lm_eval_0.4.3_mmlu5``: lm-eval 0.4.3's own output of an MMLU-shaped group (57 subject tasks in four
  category groups) run ``--num_fewshot 5``: its ``n-shot`` says ``"mmlu": 0``. The group's score was
  stored as ``mmlu@0shot``; a group's setting is its subtasks' when they agree: ``mmlu``, 5-shot.
* ``lighteval_reference_gpt2``: lighteval's own reference scores of gpt2 (``leaderboard|gsm8k|5`` scored
  ``qem``, ``leaderboard|truthfulqa:mc|0`` scored ``truthfulqa_mc2``) were stored as ``gsm8k:qem`` and
  ``truthfulqa:truthfulqa_mc2``; the metric is settings data, never a name suffix.
* ``lm_eval_0.4.13``: lm-eval's answers scored ``acc``; a predictor trained on ``acc_norm`` refuses them as
  it refuses another few-shot count.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sparseeval.core.errors import UsageError
from sparseeval.data.access.answers import read_answers
from sparseeval.data.store import Store
from sparseeval.estimate.fitting import fit_predictor
from sparseeval.interfaces.commands.predict import predict_all

REAL = Path(__file__).parent / "fixtures" / "real_formats"


def test_mmlu_group_takes_its_subjects_n_shot(tmp_db: Path) -> None:
    store = Store(tmp_db)
    assert store.ingest(REAL / "lm_eval_0.4.3_mmlu5" / "dummy").ok
    assert store.benchmarks() == ["mmlu"]  # was ["mmlu@0shot"]: the group's own n-shot entry is 0
    runs = store.query("SELECT benchmark, kind, n_shot FROM current_runs")
    assert runs.rows() == [("mmlu", "score", 5)]


def test_lighteval_metric_is_settings_data_not_a_name(tmp_db: Path) -> None:
    store = Store(tmp_db)
    assert store.ingest(REAL / "lighteval_reference_gpt2").ok
    assert store.benchmarks() == ["arc", "gsm8k", "hellaswag", "truthfulqa"]  # not gsm8k:qem, ...
    runs = dict(store.query("SELECT benchmark, metric FROM current_runs").rows())
    assert runs == {"arc": "acc_norm", "gsm8k": "qem", "hellaswag": "acc_norm", "truthfulqa": "truthfulqa_mc2"}
    scores = dict(store.query("SELECT benchmark, score FROM scores").rows())
    assert scores["gsm8k"] == pytest.approx(0.006065200909780136)  # lighteval's number, unchanged


def _toy_group_predictor(metric: str):
    """A predictor of lm-eval's toy_group run 3-shot (12 items), trained on answers scored by ``metric``."""
    rng = np.random.default_rng(0)
    items = [f"toy_{t}.{i}" for t in "ab" for i in range(6)]
    theta = rng.normal(0, 1, 120)
    Y = (rng.random((120, 12)) < 1 / (1 + np.exp(-(theta[:, None] - rng.normal(0, 1, 12))))).astype(float)
    models = [f"m{i}" for i in range(120)]
    responses = pl.DataFrame({"model": np.repeat(models, 12), "benchmark": "toy_group@3shot",
                              "item_id": np.tile(items, 120), "score": Y.ravel()})
    return fit_predictor(responses, None, "toy_group@3shot", 4, "random-linear", row_mean_is_score=True,
                         settings={"n_shot": 3, "metric": metric, "filter": "none", "harness": "lm-eval"})


def test_predictor_refuses_answers_scored_by_another_metric() -> None:
    answers = read_answers(REAL / "lm_eval_0.4.13" / "dummy")
    assert set(answers.filter(pl.col("benchmark") == "toy_group@3shot")["metric"]) == {"acc"}
    with pytest.raises(UsageError, match=r"scored by metric 'acc' but the predictor was trained on 'acc_norm'"):
        predict_all([_toy_group_predictor("acc_norm")], answers)
    forced = predict_all([_toy_group_predictor("acc_norm")], answers, force_settings=True)
    assert all(any("forced onto a predictor trained on acc_norm" in w for w in p.warnings) for p in forced)
    [accepted] = predict_all([_toy_group_predictor("acc")], answers)
    assert accepted.benchmark == "toy_group@3shot" and not any("forced" in w for w in accepted.warnings)


def test_fit_refuses_runs_scored_by_different_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without the metric in the name, runs scored differently share one; fit refuses to pool them."""
    from sparseeval.interfaces.cli import main

    rows = [(f"m{i}", "arc", str(j), float((i + j) % 2), metric) for i in range(12) for j in range(5)
            for metric in (["acc_norm"] if i < 8 else ["acc"])]
    frame = pl.DataFrame(rows, schema=["model", "benchmark", "item_id", "score", "metric"], orient="row")
    frame.write_parquet(tmp_path / "mixed.parquet")
    assert main(["fit", "--data", str(tmp_path / "mixed.parquet"), "--benchmark", "arc", "-k", "2",
                 "--out", str(tmp_path / "p")]) == 2
    assert "scored by different metrics (acc_norm (8 runs), acc (4 runs))" in capsys.readouterr().err
