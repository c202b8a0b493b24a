"""The evaluation protocol and the ``sparseeval evaluate`` command, on synthetic and real data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sparseeval.data.matrix import ResponseMatrix, build_matrix
from sparseeval.data.synthetic import generate_leaderboard, write_leaderboard
from sparseeval.estimate.evaluation import (
    ProtocolConfig,
    fit_on_split,
    run_protocol,
    score_on_split,
    split_for_seed,
    split_rows,
    summarize,
)
from sparseeval.estimate.methods import available_methods, make_estimator
from sparseeval.estimate.metrics import score_metrics
from sparseeval.interfaces.cli import main


def test_all_methods_share_each_seeds_split(synthetic_matrix: ResponseMatrix) -> None:
    results = run_protocol(synthetic_matrix, ["random-linear", "anchor-points", "sparseeval-linear"], [5, 10],
                           [0, 1], config=ProtocolConfig(test_frac=0.25))
    assert len(results) == 12
    for seed in (0, 1):
        sizes = {(r.n_train, r.n_val, r.n_test) for r in results if r.seed == seed}
        assert len(sizes) == 1
    assert all(len(set(r.anchors)) == r.k for r in results)
    summary = summarize(results)
    assert summary.height == 6 and set(summary["seeds"].to_list()) == {2}
    assert summary["mae_sd"].is_not_null().all()


def test_no_method_writes_into_the_rows_a_comparison_shares(synthetic_matrix: ResponseMatrix) -> None:
    """A comparison reads a split's rows once and hands the same arrays to every fit: each method must
    leave them as it found them (the next method would otherwise see another matrix)."""
    split = split_for_seed(synthetic_matrix, 0, ProtocolConfig())
    rows = split_rows(synthetic_matrix, split)
    before = [r.copy() for r in rows if r is not None]
    for method in available_methods():
        if method == "sparseeval-joint":  # needs benchmark groups: its own protocol (run_joint_protocol)
            continue
        fit_on_split(synthetic_matrix, split, method, 5, 0, device="cpu", rows=rows,
                     params={"max_iter": 20, "n_init": 1} if "irt" in method else None)
        assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(before, [r for r in rows if r is not None],
                                                                            strict=True)), method


def test_k_larger_than_pool_is_skipped_not_fatal(synthetic_matrix: ResponseMatrix) -> None:
    results = run_protocol(synthetic_matrix, ["random-linear"], [5, 10_000], [0])
    assert [r.k for r in results] == [5]


@pytest.fixture(scope="module")
def synthetic_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("synthetic")
    lb = generate_leaderboard(n_families=10, models_per_family=8, benchmarks={"arc": 60, "my_task": 40}, seed=1)
    write_leaderboard(lb, folder)
    return folder


def test_evaluate_cli_writes_records_and_seeds_differ(synthetic_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "eval.json"
    code = main(["evaluate", "--data", str(synthetic_dir), "--benchmark", "arc,my_task",
                 "--method", "random,sparseeval-linear", "-k", "5,8", "--seeds", "2", "--test-frac", "0.25",
                 "--json", str(out), "--csv", str(tmp_path / "eval.csv"), "--no-progress"])
    assert code == 0
    records = json.loads(out.read_text())
    assert len(records) == 2 * 2 * 2 * 2
    assert {"benchmark", "method", "k", "seed", "mae", "tau", "seconds"} <= set(records[0])
    assert {r["benchmark"] for r in records} == {"arc", "my_task"}  # an open-ended benchmark name works
    anchors = {(r["benchmark"], r["method"], r["k"], r["seed"]): r["anchors"] for r in records}
    assert anchors[("arc", "sparseeval-linear", 8, 0)] != anchors[("arc", "sparseeval-linear", 8, 1)]
    assert all(np.isfinite(r["mae"]) and r["mae"] >= 0 for r in records)
    assert pl.read_csv(tmp_path / "eval.csv").height == len(records)
    assert "sparseeval-linear" in capsys.readouterr().out


def test_evaluate_cli_errors_are_clear(synthetic_dir: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:  # refused by the parser, before anything is read
        main(["evaluate", "--data", str(tmp_path / "nowhere"), "--no-progress"])
    assert stop.value.code == 2 and "nowhere" in capsys.readouterr().err
    assert main(["evaluate", "--data", str(synthetic_dir), "--benchmark", "hellaswag", "--no-progress"]) == 2
    assert "no benchmark hellaswag" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", "--data", str(synthetic_dir), "--method", "oracle"])


@pytest.mark.slow
def test_installed_entry_point_runs() -> None:
    exe = Path(sys.executable).with_name("sparseeval")
    proc = subprocess.run([str(exe), "evaluate", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--test-frac" in proc.stdout


@pytest.mark.slow
def test_real_arc_sparseeval_beats_random_items(openllm_parsed) -> None:  # type: ignore[no-untyped-def]
    """On the real leaderboard, arc at K=20: SparseEval's test MAE is below K random items' (same split)."""
    matrix = build_matrix(openllm_parsed.responses, openllm_parsed.scores, "arc")
    split = split_for_seed(matrix, 0, ProtocolConfig(test_frac=0.2, val_frac=0.1))
    se = fit_on_split(matrix, split, "sparseeval-linear", 20, 0)
    se_mae = score_metrics(score_on_split(matrix, split, se), matrix.scores[split.test]).mae
    random_maes = []
    for seed in range(5):
        est = make_estimator("random-linear", 20, random_state=seed)
        Y = matrix.with_nan()
        est.fit(Y[split.train], matrix.scores[split.train], Y[split.val], matrix.scores[split.val])
        random_maes.append(score_metrics(est.predict(Y[split.test][:, est.anchors_]), matrix.scores[split.test]).mae)
    assert se_mae < np.mean(random_maes), (se_mae, random_maes)
    assert se_mae < 0.85 * np.mean(random_maes)


def test_library_api_is_reexported_at_top_level() -> None:
    import sparseeval

    for name in sparseeval.__all__:
        assert getattr(sparseeval, name) is not None
    assert "sparseeval-mlp" in sparseeval.available_methods()
    with pytest.raises(AttributeError):
        _ = sparseeval.no_such_function


def test_protocol_without_validation_models(synthetic_matrix: ResponseMatrix) -> None:
    """val_frac=0: estimators get no Y_val (not empty arrays) and choose from training models."""
    results = run_protocol(synthetic_matrix, ["gp-irt", "sparseeval-linear", "sparseeval-mlp"], [5], [0],
                           config=ProtocolConfig(val_frac=0.0, test_frac=0.25))
    assert [r.n_val for r in results] == [0, 0, 0]
    assert all(np.isfinite(r.mae) and len(set(r.anchors)) == 5 for r in results)
