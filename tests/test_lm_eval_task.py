"""lm-eval prints the estimate: ``export --format lm-eval-task``, a real ``lm_eval run`` (the ``dummy``
model), and the figures in lm-eval's own results equal ``sparseeval predict`` on the same run's samples,
for one benchmark, a joint predictor and several benchmarks (one run each: two exports of the same task
in one run answer its documents twice, which the reader refuses; the dummy model answers at random).

The tasks behind the predictors are the local toy tasks of ``fixtures/lm_eval_task`` (nothing
downloaded); the exported tasks take their prompt, choices and metric from lm-eval's own config of
them, through ``--lm-eval-include``. Skipped unless lm-eval is installed.
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

TASK_DIR = Path(__file__).resolve().parent / "fixtures" / "lm_eval_task"
TASKS = ("sparse_toy_mc", "sparse_toy_mc2")
N_DOCS, K = 40, 6


def leaderboard(folder: Path, n: int = 300) -> None:
    """``n`` models on both toy tasks' 40 documents (item ids = doc indices), 2PL; scores = row means."""
    rng = np.random.default_rng(4)
    theta = rng.normal(0, 1.2, n)
    frames = []
    for t, task in enumerate(TASKS):
        a, b = rng.uniform(0.5, 2.0, N_DOCS), rng.normal(0.3 * t, 1, N_DOCS)
        Y = (rng.random((n, N_DOCS)) < 1 / (1 + np.exp(-a * (theta[:, None] - b)))).astype(np.float64)
        frames.append(pl.DataFrame({"model": np.repeat([f"org{i % 7}/m{i}" for i in range(n)], N_DOCS),
                                    "benchmark": task, "item_id": np.tile([str(i) for i in range(N_DOCS)], n),
                                    "score": Y.ravel()}))
    folder.mkdir(parents=True)
    pl.concat(frames).write_parquet(folder / "responses.parquet")


def lm_eval(tmp: Path, include: Path, tasks: str, out: Path) -> dict:
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf"),
           "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-m", "lm_eval", "run", "--model", "dummy", "--include_path", str(include),
                           "--tasks", tasks, "--log_samples", "--output_path", str(out)],
                          cwd=TASK_DIR, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "estimate" in proc.stdout  # lm-eval's own results table shows the figures
    [results] = out.rglob("results_*.json")
    return json.loads(results.read_text())["results"]


def predicted(tmp: Path, predictors: list[Path], run: Path) -> dict[str, dict]:
    out = tmp / f"p-{len(list(tmp.glob('p-*.json')))}.json"
    args = [a for p in predictors for a in ("--predictor", str(p))]
    assert main(["predict", *args, "--answers", str(run), "--json", str(out), "--no-db"]) == 0
    return {r["benchmark"]: r for r in json.loads(out.read_text())}


def same(results: dict, task: str, row: dict) -> None:
    got = results[task]
    assert got["estimate,none"] == pytest.approx(row["predicted"], abs=1e-9)
    assert got["estimate_lower,none"] == pytest.approx(row["lower"], abs=1e-9)
    assert got["estimate_upper,none"] == pytest.approx(row["upper"], abs=1e-9)
    assert got["ood,none"] == float(row["ood"])


def test_lm_eval_prints_the_estimate_of_predict(tmp_path: Path) -> None:
    data = tmp_path / "data"
    leaderboard(data)
    fit = ["fit", "--data", str(data), "-k", str(K), "--row-mean-is-score"]
    singles = {t: tmp_path / "pred" / t for t in TASKS}
    for task, folder in singles.items():
        assert main([*fit, "--benchmark", task, "--method", "sparseeval-linear", "--out", str(folder)]) == 0
    joint = tmp_path / "pred" / "joint"
    assert main([*fit, "--benchmark", ",".join(TASKS), "--method", "sparseeval-joint", "--out", str(joint),
                 "--seed", "1"]) == 0
    include = ["--format", "lm-eval-task", "--lm-eval-include", str(TASK_DIR)]
    tasks = tmp_path / "tasks"
    probed = singles[TASKS[0]]
    assert main(["export", "--predictor", str(probed), *include, "--out", str(tasks / "one")]) == 0
    assert main(["export", "--predictor", str(joint), *include, "--out", str(tasks / "joint")]) == 0
    assert main(["export", *[a for f in singles.values() for a in ("--predictor", str(f))], *include,
                 "--out", str(tmp_path / "several")]) == 0

    # one benchmark: the run holds exactly the anchors, and predict reads them back from the run's samples
    # (a model's probe in lm-eval: tests/test_lm_eval_probe.py)
    results = lm_eval(tmp_path, tasks / "one", "sparseeval_sparse_toy_mc", tmp_path / "run1")
    run = next((tmp_path / "run1").iterdir())
    [samples] = run.glob("samples_sparseeval_sparse_toy_mc_*.jsonl")
    docs = sorted(json.loads(line)["doc"]["sparseeval_doc_id"] for line in samples.read_text().splitlines())
    meta = json.loads((probed / "predictor.json").read_text())
    assert docs == sorted(a["doc_id"] for a in meta["anchors"])
    one = predicted(tmp_path, [probed], run)
    same(results, "sparseeval_sparse_toy_mc", one["sparse_toy_mc"])
    assert one["sparse_toy_mc"]["n_anchors"] == K

    # the joint predictor: a group of one task per benchmark, and the joint's own mean with its interval
    results = lm_eval(tmp_path, tasks / "joint", "sparseeval_joint", tmp_path / "run3")
    both = predicted(tmp_path, [joint], next((tmp_path / "run3").iterdir()))
    for task in TASKS:
        same(results, f"sparseeval_joint_{task}", both[task])
    assert results["sparseeval_joint"]["mean_estimate,none"] == pytest.approx(both["mean"]["predicted"], abs=1e-9)
    assert results["sparseeval_joint"]["mean_lower,none"] == pytest.approx(both["mean"]["lower"], abs=1e-9)

    # several benchmarks (one predictor each): a group, every task's estimate and their mean
    results = lm_eval(tmp_path, tmp_path / "several", "sparseeval", tmp_path / "run2")
    rows = predicted(tmp_path, list(singles.values()), next((tmp_path / "run2").iterdir()))
    for task in TASKS:
        same(results, f"sparseeval_{task}", rows[task])
    assert results["sparseeval"]["mean_estimate,none"] == pytest.approx(
        np.mean([rows[t]["predicted"] for t in TASKS]), abs=1e-9)
