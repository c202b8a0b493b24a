"""MLflow tracking against a real local sqlite store and artifact folder in tmp_path."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import pytest
import torch

from sparseeval.estimate.methods import base as methods_base
from sparseeval.estimate.methods.base import AnchorEstimator, register

if TYPE_CHECKING:
    from sparseeval.publish.tracking import TrackingConfig

# sparseeval.publish.tracking (and with it mlflow, seconds of import) is imported inside the tests that use
# it, so collecting this module (every pytest-xdist worker does) stays cheap: all but one test is slow.

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
        return {"w": np.asarray(self.w_), "b": self.b_}

    def _set_params_state(self, state: dict[str, Any]) -> None:
        self.w_, self.b_ = np.asarray(state["w"], dtype=np.float32), float(state["b"])


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
    code = ("import sys; from pathlib import Path; from sparseeval.publish.tracking import TrackingConfig, "
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
    from sparseeval.publish.tracking import TrackingConfig

    # run from an empty cwd so a stray ./mlruns would be caught; one experiment per test
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return TrackingConfig(data_dir=data_dir, experiment=f"test-{request.node.name}")


def _artifact_dir(cfg: TrackingConfig, run_id: str) -> Path:
    return cfg.data_dir / "mlartifacts" / run_id / "artifacts"


def test_default_config_is_local_sqlite_with_explicit_artifacts(tmp_path: Path) -> None:
    from sparseeval.publish.tracking import TrackingConfig

    cfg = TrackingConfig(data_dir=tmp_path)
    assert cfg.resolved_tracking_uri == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert cfg.resolved_artifact_location == (tmp_path.resolve() / "mlartifacts").as_uri()
    remote = TrackingConfig(tracking_uri="http://tracking.internal:5000", data_dir=tmp_path)
    assert remote.resolved_artifact_location is None  # the server decides
    explicit = TrackingConfig(artifact_location=str(tmp_path / "a"), data_dir=tmp_path)
    assert explicit.resolved_artifact_location == (tmp_path / "a").resolve().as_uri()


@pytest.mark.slow
def test_ensure_experiment_is_idempotent(cfg: TrackingConfig) -> None:
    from sparseeval.publish.tracking import ensure_experiment

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
    import pandas as pd

    from sparseeval.publish.tracking import ensure_experiment, load_estimator_from_folder
    from sparseeval.publish.tracking_registry import (
        CHAMPION,
        download_predictor,
        register_predictor,
        registered_model_name,
    )
    from sparseeval.publish.tracking_runs import log_comparison, log_evaluation_run

    rng = np.random.default_rng(0)
    Y = (rng.random((80, 20)) < 0.6).astype(np.float32)
    s = Y.mean(axis=1)
    est = estimator_cls(k=5).fit(Y, s)
    predictor_dir = tmp_path / "predictor"
    predictor_dir.mkdir()
    # a bare estimator state as torch.save wrote it (tensors), the layout version 1 and MLflow runs used
    state = est.get_state()
    state = {**state, "anchors": torch.as_tensor(state["anchors"]),
             "anchor_fill": torch.as_tensor(state["anchor_fill"]),
             "params": {**state["params"], "w": torch.as_tensor(state["params"]["w"])}}
    torch.save(state, predictor_dir / "state.pt")
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


@pytest.mark.slow
def test_failed_run_is_marked_failed(cfg: TrackingConfig, tmp_path: Path) -> None:
    from sparseeval.publish.tracking import ensure_experiment
    from sparseeval.publish.tracking_registry import register_predictor
    from sparseeval.publish.tracking_runs import log_evaluation_run

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
    """A folder written by sparseeval.estimate.artifact (hash-verified on load) registers and predicts."""
    from sparseeval.publish.tracking import load_estimator_from_folder
    from sparseeval.publish.tracking_registry import download_predictor, register_predictor, registered_model_name
    from sparseeval.publish.tracking_runs import log_evaluation_run

    artifact = pytest.importorskip("sparseeval.estimate.artifact")
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


# --- runs that wrap a refresh step: dataset input, plots, duration, registry descriptions ------------

def _matrix(n_models: int = 120, n_items: int = 30, seed: int = 0):
    """A real ResponseMatrix with a latent ability, so a 5-anchor predictor is informative."""
    from sparseeval.data.matrix import ResponseMatrix

    rng = np.random.default_rng(seed)
    ability = rng.normal(size=n_models)
    difficulty = rng.normal(size=n_items)
    values = (rng.random((n_models, n_items)) < 1 / (1 + np.exp(difficulty - ability[:, None]))).astype(np.float32)
    return ResponseMatrix(benchmark="arc", models=[f"org/m{i}" for i in range(n_models)],
                          items=[f"q{j}" for j in range(n_items)], values=values,
                          observed=np.ones_like(values, dtype=bool), scores=values.mean(axis=1))


@pytest.mark.slow
def test_tracked_run_wraps_the_work_with_dataset_plots_and_metrics(cfg: TrackingConfig, tmp_path: Path,
                                                                   estimator_cls) -> None:
    from types import SimpleNamespace

    from sparseeval.publish.plots import (
        coverage_by_level,
        heldout_intervals,
        plot_coverage_by_level,
        plot_predicted_vs_true,
    )
    from sparseeval.publish.tracking import ensure_experiment, runs_page_url
    from sparseeval.publish.tracking_runs import log_comparison, log_evaluation_run, tracked_run

    matrix = _matrix()
    split = SimpleNamespace(train=np.arange(60), val=np.arange(0), test=np.arange(60, 120))
    store_file = tmp_path / "store" / "sparseeval.duckdb"
    with tracked_run(cfg, "candidate", benchmark="arc", params={"k": 5, "method": _TEST_METHOD},
                     tags={"dagster.run_id": "dagster-123"}) as run:
        run.log_matrix(matrix, source=store_file, digest="120-00000000deadbeef")
        est = estimator_cls(k=5).fit(matrix.values[split.train], matrix.scores[split.train])
        held = heldout_intervals(matrix, split, est, alpha=0.1, seed=0)
        levels = coverage_by_level(matrix, split, est, seed=0)
        plots = [plot_predicted_vs_true(held, tmp_path / "predicted_vs_true.png", title="arc"),
                 plot_coverage_by_level(levels, tmp_path / "coverage_by_level.png", n_models=len(held.true))]
        for plot in plots:
            run.log_artifact(plot, "plots")
        run.log_metrics({"test_mae": held.mae_points, "coverage": held.coverage, "undefined": math.nan})
        run.log_params({"k": 5})  # the same value again is fine
        rows = [{"method": m, "k": k, "seed": s, "mae": mae + s * 0.1, "tau": 0.8}
                for m, mae in (("sparseeval", 1.0), ("random", 2.0)) for k in (5, 10) for s in (0, 1)]
        log_comparison(cfg, benchmark="arc", rows=rows, run_id=run.run_id, plots=[plots[0]])
        log_evaluation_run(cfg, benchmark="arc", method=_TEST_METHOD, k=5, seed=0, params={"k": 5},
                           metrics={"mae": held.mae_points}, anchors=[], run_id=run.run_id)
        time.sleep(0.05)  # the step's work takes time: the run's duration must show it
        run_id = run.run_id
        assert cfg.client().get_run(run_id).info.status == "RUNNING"

    client = cfg.client()
    exp_id = ensure_experiment(cfg)
    assert client.get_experiment(exp_id).tags["mlflow.experimentKind"] == "custom_model_development"
    assert runs_page_url(cfg, "http://h:1/") == f"http://h:1/#/experiments/{exp_id}/runs?workflowType=machine_learning"
    assert [r.info.run_id for r in client.search_runs([exp_id])] == [run_id]  # everything went into one run
    got = client.get_run(run_id)
    assert got.info.status == "FINISHED" and got.info.run_name == "arc/candidate"
    assert got.info.end_time - got.info.start_time >= 50
    assert got.data.tags["sparseeval.step"] == "candidate" and got.data.tags["dagster.run_id"] == "dagster-123"
    assert got.data.tags["sparseeval.kind"] == "refresh"  # log_evaluation_run did not relabel the run
    assert got.data.params["k"] == "5" and got.data.params["method"] == _TEST_METHOD
    # dataset input: digest, rows, source
    (inp,) = got.inputs.dataset_inputs
    assert inp.dataset.name == "response_matrix/arc" and inp.dataset.digest == "120-00000000deadbeef"
    assert json.loads(inp.dataset.source)["uri"] == store_file.resolve().as_uri()
    profile = json.loads(inp.dataset.profile)
    assert (profile["num_rows"], profile["num_items"]) == (120, 30)
    assert {t.key: t.value for t in inp.tags}["mlflow.data.context"] == "training"
    # metrics: one key per (method, K), means over seeds; NaN never logged
    m = got.data.metrics
    assert m["mae/sparseeval/k5"] == pytest.approx(1.05) and m["mae/random/k10"] == pytest.approx(2.05)
    assert m["best_mae/k10"] == pytest.approx(1.05) and m["test_mae"] == pytest.approx(held.mae_points)
    assert "undefined" not in m
    # plots
    names = {a.path for a in client.list_artifacts(run_id, "plots")}
    assert names == {"plots/predicted_vs_true.png", "plots/coverage_by_level.png"}
    for plot in plots:
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 5000
    assert {a.path for a in client.list_artifacts(run_id)} >= {"comparison.csv", "comparison.json", "plots"}
    # the plotted numbers: cross-fitted intervals, coverage rising with the level
    assert held.true.shape == held.predicted.shape == (60,) and np.all(held.lower <= held.upper)
    cov = [levels[lv] for lv in sorted(levels)]
    assert cov == sorted(cov) and levels[0.9] == pytest.approx(held.coverage) and levels[0.95] >= 0.75


@pytest.mark.slow
def test_tracked_run_failure_is_recorded_and_raised(cfg: TrackingConfig) -> None:
    from sparseeval.publish.tracking import ensure_experiment
    from sparseeval.publish.tracking_runs import tracked_run

    with pytest.raises(RuntimeError, match="boom"), tracked_run(cfg, "champion", benchmark="gsm8k") as run:
        run.log_metrics({"test_mae": 2.0})
        raise RuntimeError("boom")
    (got,) = cfg.client().search_runs([ensure_experiment(cfg)])
    assert got.info.run_id == run.run_id and got.info.status == "FAILED" and got.data.metrics["test_mae"] == 2.0


@pytest.mark.slow
def test_registered_model_has_description_tags_and_alias(cfg: TrackingConfig, tmp_path: Path,
                                                         estimator_cls) -> None:
    from sparseeval.estimate.artifact import save_predictor
    from sparseeval.publish.tracking_registry import register_predictor, registered_model_name
    from sparseeval.publish.tracking_runs import tracked_run

    rng = np.random.default_rng(2)
    Y = (rng.random((60, 12)) < 0.5).astype(np.float32)
    est = estimator_cls(k=4).fit(Y, Y.mean(axis=1))
    folder = tmp_path / "published"
    save_predictor(folder, estimator=est, benchmark="mmlu", item_ids=[str(i) for i in range(12)],
                   train_models={"count": 60},
                   calibration={"alpha": 0.1, "mode": "binomial", "n_calibration": 30,
                                "calibration_mae_points": 1.5, "mean_halfwidth_points": 3.25},
                   extra={"settings": {"n_shot": 5, "metric": "acc", "filter": None}})
    with tracked_run(cfg, "champion", benchmark="mmlu") as run:
        v1 = register_predictor(cfg, benchmark="mmlu", predictor_dir=folder, run_id=run.run_id,
                                tags={"data_version": "60-abc"})
        v2 = register_predictor(cfg, benchmark="mmlu", predictor_dir=folder, run_id=run.run_id,
                                alias="challenger", artifact_path="challenger_model")
    client = cfg.client()
    name = registered_model_name("mmlu")
    model = client.get_registered_model(name)
    assert "champion" in model.description and "mmlu" in model.description
    assert {k: model.tags.get(k) for k in ("benchmark", "k", "method", "interval_level", "settings.n_shot",
                                           "settings.metric")} == {
        "benchmark": "mmlu", "k": "4", "method": _TEST_METHOD, "interval_level": "0.9", "settings.n_shot": "5",
        "settings.metric": "acc"}
    assert "settings.filter" not in model.tags
    assert {k: str(v) for k, v in model.aliases.items()} == {"champion": v1, "challenger": v2}
    version = client.get_model_version(name, v1)
    assert "K = 4" in version.description and "90%" in version.description and "n_shot=5" in version.description
    assert version.tags["data_version"] == "60-abc" and version.tags["registered_as"] == "champion"
    assert version.tags["content_hash"].startswith("sha256:")
    assert client.get_model_version(name, v2).source.endswith("/challenger_model")
