"""A saved predictor loads and predicts without torch; version-1 folders still load where torch is.

``tests/fixtures/predictor_v1`` was written by the previous release (format version 1, ``state.pt``
from ``torch.save``; see its README), with the predictions that release made on ``answers.csv``.
Without-torch runs go through a subprocess in which torch, scikit-learn, SciPy, pyarrow, pandas,
Dagster, MLflow and matplotlib cannot be imported (:mod:`tests.light_env`), which is what a
``pip install sparseeval`` without extras lacks.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sparseeval.estimate.artifact import STATE_FILE, ArtifactError, load_predictor, upgrade
from sparseeval.estimate.fitting import fit_predictor
from sparseeval.estimate.methods import available_methods
from sparseeval.estimate.predicting import predict
from tests.test_artifact import irt_long

V1 = Path(__file__).parent / "fixtures" / "predictor_v1"
LIGHT = [sys.executable, "-m", "tests.light_env"]
ROOT = Path(__file__).resolve().parents[1]

#: small but real fits of every single-benchmark method (the joint one is covered by the v1 fixture)
PARAMS = {"sparseeval-mlp": {"max_epochs": 100}, "irt": {"max_iter": 50, "dim": 2},
          "p-irt": {"max_iter": 50, "dim": 2}, "gp-irt": {"max_iter": 50, "dim": 2}}


def light_predict(folder: Path, answers: Path) -> list[dict]:
    """``sparseeval predict --json`` in a process where torch and the fitting stack are unimportable."""
    out = folder.parent / f"{folder.name}.json"
    proc = subprocess.run([*LIGHT, "predict", "--predictor", str(folder), "--answers", str(answers),
                           "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("method", sorted(set(available_methods()) - {"sparseeval-joint"}))
@pytest.mark.slow  # a subprocess per method in the light environment: make test runs it, make test-fast leaves it out
def test_every_method_predicts_without_torch(tmp_path: Path, method: str) -> None:
    responses, scores = irt_long(n_models=120, n_items=30, seed=3)
    art = fit_predictor(responses, scores, "toy", 5, method, seed=2, method_params=PARAMS.get(method))
    folder = tmp_path / "pred"
    art.save(folder)
    assert (folder / STATE_FILE).is_file() and not (folder / "state.pt").exists()
    answers = responses.filter(pl.col("model").is_in(["org1/m1", "org2/m2", "org4/m21"]))
    answers.write_csv(tmp_path / "answers.csv")
    here = {(p.model, p.benchmark): p.predicted for p in predict(load_predictor(folder), answers)}
    there = {(r["model"], r["benchmark"]): r["predicted"] for r in light_predict(folder, tmp_path / "answers.csv")}
    assert there.keys() == here.keys()
    assert np.allclose([there[k] for k in here], list(here.values()), atol=1e-6)


@pytest.mark.parametrize("name", ["toy-mlp", "joint"])
@pytest.mark.slow  # a subprocess in the light environment: make test runs it, make test-fast leaves it out
def test_version_1_folder_predicts_as_before(tmp_path: Path, name: str) -> None:
    """The numpy forward pass gives the predictions the torch one gave (recorded by the old release),
    and upgrading the folder to version 2 keeps them."""
    expected = json.loads((V1 / "expected.json").read_text())[name]
    answers = pl.read_csv(V1 / "answers.csv", schema_overrides={"item_id": pl.String})
    got = [[p.model, p.benchmark, p.predicted, p.lower, p.upper] for p in predict(load_predictor(V1 / name), answers)]
    assert [g[:2] for g in got] == [e[:2] for e in expected]
    assert np.allclose([g[2:] for g in got], [e[2:] for e in expected], atol=1e-5)

    folder = tmp_path / name
    shutil.copytree(V1 / name, folder)
    refused = subprocess.run([*LIGHT, "predict", "--predictor", str(folder), "--answers", str(V1 / "answers.csv")],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert refused.returncode == 2
    assert "format version 1" in refused.stderr and "sparseeval[fit]" in refused.stderr
    upgraded = upgrade(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["predictor.json", STATE_FILE]
    assert json.loads((folder / "predictor.json").read_text())["format_version"] == 2
    assert upgraded.anchor_item_ids == load_predictor(V1 / name).anchor_item_ids
    light = light_predict(folder, V1 / "answers.csv")
    assert np.allclose([[r["predicted"], r["lower"], r["upper"]] for r in light], [e[2:] for e in expected],
                       atol=1e-5)


def test_state_file_is_checked_against_predictor_json(tmp_path: Path) -> None:
    folder = tmp_path / "pred"
    shutil.copytree(V1 / "toy-mlp", folder)
    upgrade(folder)
    (folder / "state.pt").write_bytes((V1 / "toy-mlp" / "state.pt").read_bytes())
    (folder / STATE_FILE).unlink()
    with pytest.raises(ArtifactError, match=r"keeps its state in state\.safetensors"):
        load_predictor(folder)


@pytest.mark.slow  # subprocesses in the light environment: make test runs it, make test-fast leaves it out
def test_store_commands_run_without_the_extras(tmp_path: Path) -> None:
    """ingest, sql and doctor in a process without pyarrow, pandas, torch...: DuckDB and Polars meet through
    the Arrow C stream; fit, evaluate and refresh name the extra they need."""
    db = str(tmp_path / "s.duckdb")

    def light(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*LIGHT, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)

    real = ROOT / "tests" / "fixtures" / "real_formats" / "lm_eval_0.4.13" / "dummy"
    assert light("ingest", str(real), "--db", db).returncode == 0
    done = light("sql", "--db", db, "SELECT benchmark, count(*) AS n FROM responses GROUP BY 1 ORDER BY 1",
                 "--csv", "-")
    assert done.stdout.split() == ["benchmark,n", "toy_gen@3shot,6", "toy_group@3shot,12"], done.stderr
    assert light("sql", "--db", db, "SELECT * FROM responses", "--parquet", str(tmp_path / "r.parquet")).returncode == 0
    assert pl.read_parquet(tmp_path / "r.parquet").height == 18
    assert light("doctor", "--db", db).returncode == 0
    for command in ("fit", "evaluate"):
        refused = light(command, "--data", str(real), "--benchmark", "toy_gen@3shot")
        assert refused.returncode == 2 and "pip install 'sparseeval[fit]'" in refused.stderr, refused.stderr
    # the refresh records in MLflow: the advice names the extra that has it, not only torch's
    refused = light("refresh", "--db", db)
    assert refused.returncode == 2 and "pip install 'sparseeval[pipeline]'" in refused.stderr, refused.stderr


def _torch_forward(state: dict[str, np.ndarray], coef: np.ndarray, intercept: np.ndarray,
                   X: np.ndarray) -> np.ndarray:
    """``sparseeval-mlp``'s prediction written again in torch, one member and one layer at a time with
    ``torch.nn.functional.linear`` (not :class:`~sparseeval.estimate.methods.proxies.BatchedMLP`, not the NumPy
    code), in float64: the ridge's logit plus each member's MLP correction, through the sigmoid, averaged
    over the members."""
    import torch

    F = torch.nn.functional
    x = torch.as_tensor(X, dtype=torch.float64)
    base = torch.logit((x @ torch.as_tensor(coef, dtype=torch.float64) + float(intercept)).clamp(1e-3, 1 - 1e-3))
    layers = sum(1 for name in state if name.startswith("weights."))
    members = []
    for m in range(state["weights.0"].shape[0]):
        h = 2 * x - 1
        for i in range(layers):
            w = torch.as_tensor(state[f"weights.{i}"][m], dtype=torch.float64)  # (fan_in, fan_out)
            b = torch.as_tensor(state[f"biases.{i}"][m, 0], dtype=torch.float64)
            h = F.linear(h, w.T, b)
            if i < layers - 1:
                h = F.gelu(h)
        members.append(torch.sigmoid(h[:, 0] + base))
    return torch.stack(members).mean(0).numpy()


def test_the_numpy_mlp_matches_an_independent_torch_forward_pass_with_every_parameter_non_zero(
        tmp_path: Path) -> None:
    """The NumPy forward pass ``predict`` runs (and the light install, without torch) against torch, on a
    fit whose every weight and bias is non-zero. A fit's last-layer bias can be exactly 0 (the MLP starts
    from the ridge with its last layer zeroed, and a member whose early stopping kept that start keeps
    it), and so it is in ``tests/fixtures/predictor_v1``: there a forward pass that dropped that bias
    passed, while the predictors ``make run`` publishes carry biases up to 0.02 logit. Every parameter is
    moved by 0.01-0.05 here, so a pass that drops or misplaces any bias (or weight) differs from torch."""
    responses, scores = irt_long(n_models=120, n_items=30, seed=3)
    art = fit_predictor(responses, scores, "toy", 5, "sparseeval-mlp", seed=2, method_params=PARAMS["sparseeval-mlp"])
    est = art.estimator
    rng = np.random.default_rng(7)
    fitted = est.mlp_
    est.mlp_ = {name: (w + rng.choice([-1.0, 1.0], w.shape) * rng.uniform(0.01, 0.05, w.shape)).astype(np.float32)
                for name, w in fitted.items()}
    assert all(np.all(w != 0) for w in est.mlp_.values()), {n: int((w == 0).sum()) for n, w in est.mlp_.items()}
    assert est.mlp_["weights.0"].shape[0] > 1  # an ensemble: the members' average is part of the pass
    folder = tmp_path / "pred"
    art.save(folder)
    loaded = load_predictor(folder)
    assert {n: w.tolist() for n, w in loaded.estimator.mlp_.items()} == {n: w.tolist() for n, w in est.mlp_.items()}

    wide = responses.pivot(on="item_id", index="model", values="score")
    X = wide.select(loaded.anchor_item_ids).to_numpy().astype(np.float32)
    expected = _torch_forward(est.mlp_, est.coef_, est.intercept_, X)
    got = loaded.estimator.predict(X)
    assert np.allclose(got, expected, atol=2e-6), np.abs(got - expected).max()
    # the check can fail: the same pass with the last layer's bias dropped is off by far more than its tolerance
    last = max(int(n.split(".")[1]) for n in est.mlp_ if n.startswith("biases."))
    dropped = dict(est.mlp_, **{f"biases.{last}": np.zeros_like(est.mlp_[f"biases.{last}"])})
    assert np.abs(_torch_forward(dropped, est.coef_, est.intercept_, X) - expected).max() > 1e-3

    # and the light install (no torch; the standard library's erf in its GELU) predicts what predict does here
    answers = responses.filter(pl.col("model").is_in(["org1/m1", "org2/m2", "org4/m21"]))
    answers.write_csv(tmp_path / "answers.csv")
    here = {(p.model, p.benchmark): p.predicted for p in predict(loaded, answers)}
    there = {(r["model"], r["benchmark"]): r["predicted"] for r in light_predict(folder, tmp_path / "answers.csv")}
    assert there.keys() == here.keys()
    assert np.allclose([there[k] for k in here], list(here.values()), atol=1e-6)
