"""MLflow tracking against a real local sqlite store and artifact folder in tmp_path."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Self

import numpy as np
import pandas as pd
import pytest
import torch

from sparseeval.methods import base as methods_base
from sparseeval.methods.base import AnchorEstimator, register
from sparseeval.tracking import (
    CHAMPION,
    TrackingConfig,
    download_predictor,
    ensure_experiment,
    load_estimator_from_folder,
    log_comparison,
    log_evaluation_run,
    register_predictor,
    registered_model_name,
)

_TEST_METHOD = "_test_weighted_mean"


class _WeightedMean(AnchorEstimator):
    """Tiny real estimator: the first k items, predict w . x + b (enough to round-trip a state)."""

    def fit(self, Y: np.ndarray, s: np.ndarray, Y_val: np.ndarray | None = None,
            s_val: np.ndarray | None = None) -> Self:
        self._set_anchors(np.arange(self.k), Y)
        X = np.nan_to_num(Y[:, : self.k], nan=0.5)
        A = np.c_[X, np.ones(len(X))]
        coef, *_ = np.linalg.lstsq(A, s, rcond=None)
        self.w_, self.b_ = coef[:-1].astype(np.float32), float(coef[-1])
        return self

    def _predict(self, X: np.ndarray) -> np.ndarray:
        return X @ self.w_ + self.b_

    def _get_params_state(self) -> dict[str, Any]:
        return {"w": torch.as_tensor(self.w_), "b": self.b_}

    def _set_params_state(self, state: dict[str, Any]) -> None:
        self.w_, self.b_ = state["w"].numpy(), float(state["b"])


@pytest.fixture
def estimator_cls():
    """Register the test estimator only for the test's duration (the registry is global)."""
    cls = register(_TEST_METHOD)(_WeightedMean)
    yield cls
    methods_base._REGISTRY.pop(_TEST_METHOD, None)


@pytest.fixture(scope="module")
def fresh_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One sqlite store for the module, created by a fresh process (as the CLI would) from an empty
    cwd: creating it runs MLflow's migrations, seconds on a busy disk, so it is done once."""
    root = tmp_path_factory.mktemp("tracking")
    folder = root / "data"
    code = ("import sys; from pathlib import Path; from sparseeval.tracking import TrackingConfig, "
            "ensure_experiment; print(ensure_experiment(TrackingConfig(data_dir=Path(sys.argv[1]), "
            "experiment='warm-up')))")
    done = subprocess.run([sys.executable, "-c", code, str(folder)], cwd=root, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return folder, done


@pytest.fixture(scope="module")
def data_dir(fresh_store: tuple[Path, subprocess.CompletedProcess[str]]) -> Path:
    return fresh_store[0]


@pytest.mark.slow
def test_store_creation_is_quiet_and_local(
        fresh_store: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    folder, done = fresh_store
    assert (folder / "mlflow.db").is_file()
    assert sorted(p.name for p in folder.parent.iterdir()) == ["data"]  # no ./mlruns in the cwd
    assert done.stdout.strip() != ""
    # alembic's migration lines and mlflow's "Creating initial MLflow database tables" are silenced
    assert done.stderr.strip() == "", done.stderr


@pytest.fixture
def cfg(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> TrackingConfig:
    # run from an empty cwd so a stray ./mlruns would be caught; one experiment per test
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return TrackingConfig(data_dir=data_dir, experiment=f"test-{request.node.name}")


def _artifact_dir(cfg: TrackingConfig, run_id: str) -> Path:
    return cfg.data_dir / "mlartifacts" / run_id / "artifacts"


def test_default_config_is_local_sqlite_with_explicit_artifacts(tmp_path: Path) -> None:
    cfg = TrackingConfig(data_dir=tmp_path)
    assert cfg.resolved_tracking_uri == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert cfg.resolved_artifact_location == (tmp_path.resolve() / "mlartifacts").as_uri()
    remote = TrackingConfig(tracking_uri="http://tracking.internal:5000", data_dir=tmp_path)
    assert remote.resolved_artifact_location is None  # the server decides
    explicit = TrackingConfig(artifact_location=str(tmp_path / "a"), data_dir=tmp_path)
    assert explicit.resolved_artifact_location == (tmp_path / "a").resolve().as_uri()


@pytest.mark.slow
def test_ensure_experiment_is_idempotent(cfg: TrackingConfig) -> None:
    first = ensure_experiment(cfg)
    assert ensure_experiment(cfg) == first
    exp = cfg.client().get_experiment(first)
    assert exp.name == cfg.experiment
    assert exp.artifact_location == (cfg.data_dir / "mlartifacts").resolve().as_uri()
    cfg.client().delete_experiment(first)  # a deleted experiment is restored, not a dead end
    assert ensure_experiment(cfg) == first
    assert (cfg.data_dir / "mlflow.db").is_file()


@pytest.mark.slow
def test_evaluation_runs_comparison_and_registry(cfg: TrackingConfig, tmp_path: Path, estimator_cls,
                                                 capfd: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    Y = (rng.random((80, 20)) < 0.6).astype(np.float32)
    s = Y.mean(axis=1)
    est = estimator_cls(k=5).fit(Y, s)
    predictor_dir = tmp_path / "predictor"
    predictor_dir.mkdir()
    torch.save(est.get_state(), predictor_dir / "state.pt")
    (predictor_dir / "meta.json").write_text(json.dumps({"benchmark": "arc", "k": 5}))
    extra = tmp_path / "notes.txt"
    extra.write_text("hello")
    anchors = [{"position": i, "item_id": f"item-{a}", "weight": 0.2} for i, a in enumerate(est.anchors_)]
    metrics = {"mae": 1.25, "tau": 0.9, "rho": 0.95, "max_error": 4.0, "seconds": 0.5}

    run_ids = [
        log_evaluation_run(cfg, benchmark="arc", method=_TEST_METHOD, k=5, seed=seed,
                           params={"init": "kmeans", "steps": 10, "grid": [1, 2]}, metrics=metrics,
                           anchors=anchors, predictor_state_path=predictor_dir / "state.pt",
                           extra_artifacts=[extra], tags={"split": "random"})
        for seed in (0, 0)
    ]
    assert len(set(run_ids)) == 2  # calling twice makes two runs

    client = cfg.client()
    run = client.get_run(run_ids[0])
    assert run.info.status == "FINISHED"
    assert run.data.metrics == pytest.approx(metrics)
    assert run.data.params["method"] == _TEST_METHOD and run.data.params["k"] == "5"
    assert run.data.params["grid"] == "[1, 2]" and run.data.params["init"] == "kmeans"
    assert run.data.tags["split"] == "random" and run.data.tags["benchmark"] == "arc"
    art = _artifact_dir(cfg, run_ids[0])
    assert json.loads((art / "anchors.json").read_text()) == [
        {"position": i, "item_id": a["item_id"], "weight": 0.2} for i, a in enumerate(anchors)]
    with (art / "anchors.csv").open() as fh:
        assert [r["item_id"] for r in csv.DictReader(fh)] == [a["item_id"] for a in anchors]
    assert (art / "predictor" / "state.pt").is_file() and (art / "notes.txt").read_text() == "hello"
    exp_runs = client.search_runs([ensure_experiment(cfg)], "tags.`sparseeval.kind` = 'evaluation'")
    assert {r.info.run_id for r in exp_runs} == set(run_ids)

    # comparison parent run: table + csv + plot, evaluation runs nested under it
    plot = tmp_path / "plot.png"
    plot.write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    rows = [{"method": "sparseeval", "k": 5, "mae": 1.2, "tau": 0.9},
            {"method": "random", "k": 5, "mae": 2.5, "tau": None}]
    parent = log_comparison(cfg, benchmark="arc", rows=rows, plot_path=plot, child_run_ids=run_ids)
    pdir = _artifact_dir(cfg, parent)
    table = json.loads((pdir / "comparison.json").read_text())
    assert table["columns"] == ["method", "k", "mae", "tau"] and len(table["data"]) == 2
    assert (pdir / "comparison.csv").read_text().splitlines()[0] == "method,k,mae,tau"
    assert (pdir / "plot.png").is_file()
    assert client.get_run(run_ids[1]).data.tags["mlflow.parentRunId"] == parent

    # registry: two versions, the alias follows the newest; the pyfunc model predicts
    v1 = register_predictor(cfg, benchmark="arc", predictor_dir=predictor_dir, run_id=run_ids[0])
    v2 = register_predictor(cfg, benchmark="arc", predictor_dir=predictor_dir, run_id=run_ids[1])
    assert (v1, v2) == ("1", "2")
    name = registered_model_name("arc")
    assert name == "sparseeval-arc"
    champion = client.get_model_version_by_alias(name, CHAMPION)
    assert str(champion.version) == "2" and champion.run_id == run_ids[1]
    assert (_artifact_dir(cfg, run_ids[1]) / "model" / "MLmodel").is_file()

    import mlflow.pyfunc

    model = mlflow.pyfunc.load_model(champion.source)
    X = Y[:7][:, est.anchors_]
    np.testing.assert_allclose(model.predict(X), est.predict(X), rtol=1e-6)
    frame = pd.DataFrame(X, columns=[a["item_id"] for a in anchors])
    np.testing.assert_allclose(model.predict(frame), est.predict(X), rtol=1e-6)
    folder = download_predictor(cfg, benchmark="arc", dst=tmp_path / "download")
    assert (folder / "meta.json").is_file()
    again = load_estimator_from_folder(folder)
    np.testing.assert_allclose(again.predict(X), est.predict(X), rtol=1e-6)

    # nothing leaked into the working directory; mlflow stayed quiet
    assert list(Path.cwd().iterdir()) == []
    assert capfd.readouterr().err == ""


def test_failed_run_is_marked_failed(cfg: TrackingConfig, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        log_evaluation_run(cfg, benchmark="gsm8k", method="random", k=3, seed=1, params={},
                           metrics={"mae": math.nan, "tau": None}, anchors=[],
                           predictor_state_path=tmp_path / "missing.pt")
    runs = cfg.client().search_runs([ensure_experiment(cfg)])
    assert len(runs) == 1 and runs[0].info.status == "FAILED"
    assert "tau" not in runs[0].data.metrics and math.isnan(runs[0].data.metrics["mae"])
    with pytest.raises(FileNotFoundError, match="predictor folder"):
        register_predictor(cfg, benchmark="gsm8k", predictor_dir=tmp_path / "nope",
                           run_id=runs[0].info.run_id)


@pytest.mark.slow
def test_register_published_predictor_folder(cfg: TrackingConfig, tmp_path: Path, estimator_cls) -> None:
    """A folder written by sparseeval.artifact (hash-verified on load) registers and predicts."""
    artifact = pytest.importorskip("sparseeval.artifact")
    rng = np.random.default_rng(1)
    Y = (rng.random((60, 12)) < 0.5).astype(np.float32)
    est = estimator_cls(k=4).fit(Y, Y.mean(axis=1))
    folder = tmp_path / "published"
    artifact.save_predictor(folder, estimator=est, benchmark="hellaswag",
                            item_ids=[str(i) for i in range(12)], train_models={"n": 60}, calibration={})
    run_id = log_evaluation_run(cfg, benchmark="hellaswag", method=_TEST_METHOD, k=4, seed=0, params={},
                                metrics={"mae": 1.0}, anchors=[])
    version = register_predictor(cfg, benchmark="hellaswag", predictor_dir=folder, run_id=run_id)
    import mlflow.pyfunc

    source = cfg.client().get_model_version(registered_model_name("hellaswag"), version).source
    X = Y[:5][:, est.anchors_]
    np.testing.assert_allclose(mlflow.pyfunc.load_model(source).predict(X), est.predict(X), rtol=1e-6)
    # a tampered copy is refused by the hash check
    copy = download_predictor(cfg, benchmark="hellaswag", dst=tmp_path / "dl")
    meta = json.loads((copy / "predictor.json").read_text())
    meta["benchmark"] = "mmlu"
    (copy / "predictor.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="hash"):
        load_estimator_from_folder(copy)
