"""Predictors from the Hub, ``hf://[datasets/]ORG/REPO[@revision][/PATH]``, through the real huggingface_hub
client against bench/support/hub_server.py: pinned revisions, the content hash checked, the client's cache and
``HF_HUB_OFFLINE=1``, and the Hub sources' faults and messages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.support.hub_server import HubServer, Repo, files_from
from sparseeval.data.access.predictor_hub import PredictorSourceError, parse
from sparseeval.estimate.artifact import ArtifactError, load_predictor
from sparseeval.estimate.fitting import fit_predictor
from sparseeval.interfaces.cli import main
from tests.test_artifact import irt_long


@pytest.fixture(scope="module")
def predictors(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Two versions of a toy predictor (different seeds) and answers of three models."""
    root = tmp_path_factory.mktemp("preds")
    responses, scores = irt_long(n_models=150, n_items=30, seed=11)
    for seed, name in ((1, "v1"), (2, "v2")):
        fit_predictor(responses, scores, "toy", 5, "sparseeval-linear", seed=seed).save(root / name)
    responses.filter(responses["model"].is_in(["org1/m1", "org2/m2", "org5/m5"])).write_csv(root / "answers.csv")
    return root / "v1", root / "v2", root / "answers.csv"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, predictors):
    v1, v2, _ = predictors
    server = HubServer()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    model = Repo()
    first = model.push(files_from(v1))
    model.push(files_from(v2))
    server.models["team/toy-predictor"] = model
    data = Repo()
    data.push(files_from(v1, "toy/") | {"README.md": b"several predictors\n"})
    server.repos["team/predictors"] = data
    yield server, first
    server.close()


def predicted(tmp_path: Path, source: str, answers: Path) -> dict[str, float]:
    out = tmp_path / "p.json"
    assert main(["predict", "--no-db", "--predictor", source, "--answers", str(answers), "--json", str(out)]) == 0
    return {r["model"]: r["predicted"] for r in json.loads(out.read_text())}


def test_predict_from_the_hub(tmp_path: Path, hub, predictors, monkeypatch: pytest.MonkeyPatch) -> None:
    server, first = hub
    v1, v2, answers = predictors
    local = {name: predicted(tmp_path, str(folder), answers) for name, folder in (("v1", v1), ("v2", v2))}
    assert local["v1"] != local["v2"]
    assert predicted(tmp_path, "hf://team/toy-predictor", answers) == local["v2"]  # main: the newest
    assert predicted(tmp_path, f"hf://team/toy-predictor@{first}", answers) == local["v1"]  # pinned
    assert predicted(tmp_path, "hf://datasets/team/predictors/toy", answers) == local["v1"]  # a dataset repo's folder
    calls = len(server.calls)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the client's cache, no call at all
    assert predicted(tmp_path, "hf://team/toy-predictor", answers) == local["v2"]
    assert predicted(tmp_path, f"hf://team/toy-predictor@{first}", answers) == local["v1"]
    assert len(server.calls) == calls
    art = load_predictor("hf://team/toy-predictor")
    assert art.source == "hf://team/toy-predictor" and art.content_hash == load_predictor(v2).content_hash


def test_export_reads_the_hub_predictor(tmp_path: Path, hub) -> None:
    assert main(["export", "--predictor", "hf://team/toy-predictor", "--format", "lm-eval-task",
                 "--out", str(tmp_path / "tasks")]) == 0
    copied = tmp_path / "tasks" / "predictors" / "toy"
    assert not (copied / "predictor.json").is_symlink()  # the bytes, not a link into the client's cache
    assert load_predictor(copied).content_hash == load_predictor("hf://team/toy-predictor").content_hash


@pytest.mark.parametrize(("setup", "source", "message"), [
    (lambda s: None, "hf://team/nope", "repo not found, or private"),
    (lambda s: setattr(s.models["team/toy-predictor"], "gated", True), "hf://team/toy-predictor", "gated repo"),
    (lambda s: None, "hf://team/toy-predictor@0123456789abcdef0123456789abcdef01234567", "revision not found"),
    (lambda s: None, "hf://datasets/team/predictors", "no predictor.json in the repo's top folder"),
    (lambda s: None, "hf://team", "expected hf://ORG/REPO[@revision][/PATH]"),
])
@pytest.mark.slow  # the Hub stand-in server per fault: make test runs it, make test-fast leaves it out
def test_hub_faults_are_one_line(tmp_path: Path, hub, predictors, setup, source: str, message: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    setup(hub[0])
    assert main(["predict", "--no-db", "--predictor", source, "--answers", str(predictors[2])]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_offline_without_cache_and_a_tampered_download(tmp_path: Path, hub, predictors,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    server, _ = hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PredictorSourceError, match=r"offline .* nothing of this repo in the client.s cache"):
        load_predictor("hf://team/toy-predictor")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    bad = Repo()
    files = files_from(predictors[0])
    files["state.safetensors"] = files["state.safetensors"][:-4] + b"\0\0\0\0"
    bad.push(files)
    server.models["team/tampered"] = bad
    with pytest.raises(ArtifactError, match="content hash mismatch"):
        load_predictor("hf://team/tampered")
    assert parse("hf://models/team/x@v1/sub/dir") == parse("hf://team/x@v1/sub/dir")
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)


def test_model_card_says_what_the_predictor_is(tmp_path: Path, predictors, capsys: pytest.CaptureFixture[str]) -> None:
    art = load_predictor(predictors[0])
    art.extra.update({"data_licence": "CC-BY-NC-SA-4.0", "frontier": {"k_for_2_points": 14}})
    folder = tmp_path / "pub"
    saved = art.save(folder)
    assert main(["export", "--predictor", str(folder), "--format", "model-card", "--repo", "team/toy-predictor",
                 "--out", str(folder / "README.md")]) == 0
    card = (folder / "README.md").read_text()
    assert card.startswith("---\nlicense: cc-by-nc-sa-4.0\nlibrary_name: sparseeval\n")
    for expected in ("sparseeval predict --predictor hf://team/toy-predictor --answers sparseeval_run",
                     f"| toy | {art.k} | `toy` ({art.k}) |", f"Fitted on **{art.train_models['count']} models**",
                     "| toy | " + f"{art.calibration['calibration_mae_points']:.2f}", "| k_for_2_points | 14 |",
                     "Data licence: **CC-BY-NC-SA-4.0**", saved.content_hash):
        assert expected in card, expected
    assert f"hf upload team/toy-predictor {folder} . --repo-type model" in capsys.readouterr().out
    assert load_predictor(folder).content_hash == saved.content_hash  # the card sits beside the hashed files
