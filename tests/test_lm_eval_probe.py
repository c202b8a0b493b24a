"""The second stage end to end in lm-eval, with a model that answers like a strong one.

A local task of 400 additions (nothing downloaded); a predictor fitted on synthetic models answering it
(its items are the whole benchmark: the score is their mean); a scripted lm-eval model
(``fixtures/lm_eval_task/scripted_lm.py``) right on every addition whose sum is not a multiple of 7, so
its true score is known and lies above every training model. Run as a user runs it:

1. the exported anchor task: lm-eval's table prints the anchors' estimate, ``stage`` 1 and ``probe_next``
   (the items of its probe it should run next);
2. ``sparseeval next`` names those items (the model's own draw) and ``export --probe-for`` writes a task
   that runs them; lm-eval prints the design-based estimate, its interval and ``stage`` 2, equal to
   ``sparseeval predict`` on the same run's samples, and the truth lies inside;
3. while the probe asks for more (``probe_next``), the next export runs more of the same draw, until done.

Skipped unless lm-eval is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sparseeval.interfaces.cli import main

pytest.importorskip("lm_eval")
pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "lm_eval_task"
TASK, N_DOCS, K = "sparse_toy_add", 400, 10
MODEL = "strong/scripted-7b"
TASK_YAML = f"""task: {TASK}
dataset_path: json
dataset_kwargs:
  data_files:
    test: add.jsonl
output_type: multiple_choice
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def write_task(folder: Path) -> float:
    """The task's config and 400 questions; returns the scripted model's true accuracy on them."""
    rng = np.random.default_rng(11)
    folder.mkdir(parents=True)
    right = 0
    with (folder / "add.jsonl").open("w") as f:
        for _ in range(N_DOCS):
            a, b = (int(x) for x in rng.integers(2, 60, 2))
            choices = [a + b - 1, a + b, a + b + 1, a + b + 2]
            rng.shuffle(choices)
            f.write(json.dumps({"question": f"What is {a} + {b}?", "choices": [str(c) for c in choices],
                                "answer": choices.index(a + b)}) + "\n")
            right += (a + b) % 7 != 0
    (folder / f"{TASK}.yaml").write_text(TASK_YAML)
    return right / N_DOCS


def leaderboard(folder: Path, n: int = 700) -> None:
    """``n`` models answering the 400 questions (2PL) and scoring below 75 %, the scripted model's 84.5 % out of
    their reach; scores = row means."""
    rng = np.random.default_rng(5)
    theta = rng.normal(-0.2, 0.9, n)
    a, b = rng.uniform(0.6, 2.0, N_DOCS), rng.normal(0.2, 1.0, N_DOCS)
    Y = (rng.random((n, N_DOCS)) < 1 / (1 + np.exp(-a * (theta[:, None] - b)))).astype(np.float64)
    Y = Y[Y.mean(axis=1) < 0.75]
    n = Y.shape[0]
    folder.mkdir(parents=True)
    pl.DataFrame({"model": np.repeat([f"org{i % 9}/m{i}" for i in range(n)], N_DOCS),
                  "benchmark": TASK, "item_id": np.tile([str(i) for i in range(N_DOCS)], n),
                  "score": Y.ravel()}).write_parquet(folder / "responses.parquet")


def lm_eval(tmp: Path, task_dir: Path, include: Path, task: str, out: Path) -> tuple[dict, str]:
    """A real ``lm_eval run`` with the scripted model: lm-eval's results and its printed table."""
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf"),
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": os.pathsep.join([str(FIXTURES), *sys.path])}
    proc = subprocess.run([sys.executable, "-c", "import scripted_lm; from lm_eval.__main__ import cli_evaluate; "
                                                 "cli_evaluate()",
                           "run", "--model", "scripted", "--model_args", f"pretrained={MODEL}",
                           "--include_path", str(include), "--tasks", task, "--log_samples", "--output_path", str(out)],
                          cwd=task_dir, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [results] = out.rglob("results_*.json")
    return json.loads(results.read_text())["results"][f"sparseeval_{TASK}"], proc.stdout


def predicted(predictor: Path, run: Path, out: Path) -> dict:
    assert main(["predict", "--predictor", str(predictor), "--answers", str(run), "--json", str(out), "--no-db"]) == 0
    [row] = json.loads(out.read_text())
    return row


def test_a_strong_model_runs_its_probe_in_lm_eval_and_lm_eval_prints_the_design_based_estimate(tmp_path: Path,
                                                                                             capsys) -> None:
    task_dir = tmp_path / "task"
    truth = write_task(task_dir)
    leaderboard(tmp_path / "data")
    predictor = tmp_path / "pred"
    assert main(["fit", "--data", str(tmp_path / "data"), "--benchmark", TASK, "-k", str(K), "--method",
                 "sparseeval-linear", "--row-mean-is-score", "--probe-target", "8", "--frontier-quantile", "off",
                 "--out", str(predictor)]) == 0
    meta = json.loads((predictor / "predictor.json").read_text())
    plan = meta["extra"]["probe"]
    assert plan["link"]["whole"] and truth > meta["train_models"]["score_max"]  # stronger than every training model
    export = ["export", "--predictor", str(predictor), "--format", "lm-eval-task", "--lm-eval-include", str(task_dir)]

    # 1. the anchors: lm-eval prints the anchors' estimate, and how many probe items to run next
    assert main([*export, "--out", str(tmp_path / "anchors")]) == 0
    first, table = lm_eval(tmp_path, task_dir, tmp_path / "anchors", f"sparseeval_{TASK}", tmp_path / "run0")
    assert first["stage,none"] == 1.0 and first["probe_next,none"] == plan["first"]
    assert "probe_next" in table and "estimate" in table
    run0 = next((tmp_path / "run0").iterdir())
    alone = predicted(predictor, run0, tmp_path / "p0.json")
    assert alone["model"] == MODEL and alone["stage"] == "anchors" and alone["probe_next"] == plan["first"]
    assert first["estimate,none"] == pytest.approx(alone["predicted"], abs=1e-9)

    # 2. next names the model's own probe items; export --probe-for writes exactly them beside the anchors
    capsys.readouterr()
    assert main(["next", "--predictor", str(predictor), "--answers", str(run0), "--json", "-"]) == 0
    [step] = json.loads(capsys.readouterr().out)
    named = [n["item_id"] for n in step["next"]]
    assert len(named) == plan["first"] and all(n["probe"] for n in step["next"])
    n_items, run, row = plan["first"], run0, alone
    for attempt in range(1, 6):  # 3. until the probe asks for nothing more
        folder = tmp_path / f"probe{attempt}"
        assert main([*export, "--probe-for", MODEL, "--probe-items", str(n_items), "--out", str(folder)]) == 0
        got, table = lm_eval(tmp_path, task_dir, folder, f"sparseeval_{TASK}", tmp_path / f"run{attempt}")
        run = next((tmp_path / f"run{attempt}").iterdir())
        [samples] = run.glob(f"samples_sparseeval_{TASK}_*.jsonl")
        docs = {json.loads(line)["doc"]["sparseeval_doc_id"] for line in samples.read_text().splitlines()}
        assert len(docs) == K + n_items and set(map(str, docs)) >= set(named)  # its draw's items, then more of it
        row = predicted(predictor, run, tmp_path / f"p{attempt}.json")
        assert row["stage"] == "probe" and row["probe_items"] == n_items
        assert got["stage,none"] == 2.0 and "stage" in table
        for key, field in (("estimate", "predicted"), ("estimate_lower", "lower"), ("estimate_upper", "upper")):
            assert got[f"{key},none"] == pytest.approx(row[field], abs=1e-9)
        assert got["probe_next,none"] == row["probe_next"]
        if not row["probe_next"]:
            break
        n_items += row["probe_next"]
    else:
        raise AssertionError("the probe never said done")
    assert attempt >= 2  # 40 items were not enough for the 8-point target: it asked for more of its draw
    assert row["lower"] <= truth <= row["upper"]
    assert abs(row["predicted"] - truth) < abs(alone["predicted"] - truth)
    assert row["anchors_predicted"] == pytest.approx(alone["predicted"], abs=1e-9)
