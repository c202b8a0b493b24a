"""Real lm-evaluation-harness round trip: fit -> export --samples -> lm_eval run -> predict.

Uses the tiny local multiple-choice task in ``fixtures/lm_eval_task`` (40 docs, loaded with the
``json`` dataset builder, nothing downloaded) and lm-eval's ``dummy`` model. Skipped unless
``lm_eval`` is installed (``pip install lm-eval==0.4.13``).
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

import sparseeval.estimate.methods
from sparseeval.interfaces.cli import main

pytest.importorskip("lm_eval")

TASK_DIR = Path(__file__).resolve().parent / "fixtures" / "lm_eval_task"
TASK = "sparse_toy_mc"
N_DOCS = 40
K = 8

pytestmark = pytest.mark.slow


def synthetic_leaderboard(folder: Path, seed: int = 0) -> None:
    """300 models answering the task's 40 docs (item ids = doc indices), 2PL, target = row mean."""
    rng = np.random.default_rng(seed)
    n = 300
    theta = rng.normal(0, 1.2, n)
    a, b = rng.uniform(0.5, 2.0, N_DOCS), rng.normal(0, 1, N_DOCS)
    Y = (rng.random((n, N_DOCS)) < 1 / (1 + np.exp(-a * (theta[:, None] - b)))).astype(np.float64)
    models = [f"org{i % 11}/m{i}" for i in range(n)]
    folder.mkdir(parents=True)
    pl.DataFrame({"model": np.repeat(models, N_DOCS), "benchmark": TASK,
                  "item_id": np.tile([str(i) for i in range(N_DOCS)], n), "score": Y.ravel()}) \
        .write_parquet(folder / "responses.parquet")


def test_lm_eval_round_trip(tmp_path: Path, capsys) -> None:
    method = next((m for m in ("sparseeval-linear", "random-linear")
                   if m in sparseeval.estimate.methods.available_methods()), None)
    if method is None:
        pytest.skip("no linear anchor method registered")
    data, pred, run = tmp_path / "data", tmp_path / "pred", tmp_path / "run"
    anchors = tmp_path / "anchors.json"
    synthetic_leaderboard(data)
    # the toy table holds every document of the task, so a row mean is the score: say so
    assert main(["fit", "--data", str(data), "--benchmark", TASK, "-k", str(K), "--method", method,
                 "--out", str(pred), "--row-mean-is-score"]) == 0
    assert main(["export", "--predictor", str(pred), "--format", "lm-eval", "--out", str(anchors)]) == 0
    exported = json.loads(anchors.read_text())
    assert list(exported) == [TASK] and len(exported[TASK]) == K

    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, "-m", "lm_eval", "run", "--model", "dummy", "--tasks", TASK,
         "--include_path", str(TASK_DIR), "--samples", str(anchors), "--log_samples",
         "--output_path", str(run)],
        cwd=TASK_DIR,  # the task's data_files path is relative to it
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    samples = list(run.rglob(f"samples_{TASK}_*.jsonl"))
    assert len(samples) == 1 and list(run.rglob("results_*.json"))
    evaluated = sorted(json.loads(line)["doc_id"] for line in samples[0].read_text().splitlines() if line)
    assert evaluated == exported[TASK]  # exactly the anchors, nothing else

    capsys.readouterr()
    assert main(["predict", "--no-db", "--predictor", str(pred), "--answers", str(run),
                 "--json", str(tmp_path / "p.json")]) == 0
    printed = capsys.readouterr().out
    assert TASK in printed and f"{K}/{K}" in printed
    (row,) = json.loads((tmp_path / "p.json").read_text())
    assert row["benchmark"] == TASK and row["n_anchors"] == K
    assert 0.0 <= row["lower"] <= row["predicted"] <= row["upper"] <= 1.0

    # the run answered chosen documents (--samples): ingest names it an anchor run, not a --limit run
    from sparseeval.data.store import Store

    store = Store(tmp_path / "s.duckdb")
    report = store.ingest(run)
    notes = [n.reason for f in report.files for n in f.notes]
    assert any(r.startswith(f"anchor run (lm-eval --samples, {K} chosen documents)") for r in notes), notes
    assert not any("--limit" in r for r in notes)
