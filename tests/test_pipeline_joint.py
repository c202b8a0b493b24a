"""End to end, the joint predictor: real Dagster materializations of its assets after the benchmarks' own
refreshes (as ``make run`` runs them), into a temporary DuckDB file and MLflow store. Its fit, checks and
publication; ``predict`` on what it published; an unchanged store skips it and it waits for refreshes
under way; it needs two benchmarks and enough models they share.

The helpers are the per-benchmark pipeline tests' (``tests/test_pipeline.py``)."""

import json
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest
from mlflow.tracking import MlflowClient

from pipelines.assets import response_matrix
from pipelines.automation import joint_sensor
from pipelines.checks import publishing_checks
from pipelines.definitions import defs
from pipelines.joint import joint_anchors, joint_champion
from pipelines.resources import SettingsResource
from sparseeval.data.synthetic import generate_leaderboard, write_leaderboard
from sparseeval.interfaces.cli import main as cli_main
from tests.test_pipeline import (
    PUBLISH,
    K,
    _audit,
    _checks,
    _count,
    _logs,
    _materialized,
    _meta,
    _refresh,
    _resources,
)

pytestmark = pytest.mark.slow
# --- the joint predictor ------------------------------------------------------------------------------

JOINT = [joint_anchors, joint_champion]


@pytest.fixture(scope="module")
def joint(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Three correlated benchmarks refreshed one by one, then the joint job, as ``make run`` does."""
    root = tmp_path_factory.mktemp("joint")
    source = root / "source"
    lb = generate_leaderboard(n_families=20, models_per_family=8, benchmarks={"arc": 60, "gsm8k": 50, "mmlu": 60},
                              seed=2)
    write_leaderboard(lb, source / "leaderboard")
    resources = _resources(root, source)
    instance = dg.DagsterInstance.ephemeral()
    refresh = _refresh(resources, instance)
    first = dg.materialize([response_matrix, *JOINT, *publishing_checks], resources=resources, instance=instance,
                           selection=JOINT, raise_on_error=False)
    return {"root": root, "source": source, "lb": lb, "resources": resources, "instance": instance,
            "refresh": refresh, "first": first, "db": root / "sparseeval.duckdb"}


def test_joint_asset_fits_checks_and_publishes(joint: dict) -> None:
    first, db = joint["first"], joint["db"]
    assert first.success
    assert _checks(first) == PUBLISH
    fit = _meta(first, "joint_anchors")
    assert fit["benchmarks"] == ["arc", "gsm8k", "mmlu"] and fit["k_per_benchmark"] == K and fit["items"] == 3 * K
    assert "published #" in _meta(first, "joint_champion")["decision"]
    assert _audit(joint["resources"], joint["root"], "sparseeval-joint") == []
    # one anchor set, champion, its anchors each under its own benchmark
    assert _count(db, "SELECT count(*) FROM anchor_sets WHERE benchmark = 'sparseeval-joint'") == 1
    with duckdb.connect(str(db.with_name("sparseeval.snapshot.duckdb")), read_only=True) as con:
        rows = con.execute("SELECT item_benchmark, item_id FROM latest_anchors WHERE benchmark = 'sparseeval-joint' "
                           "ORDER BY position").fetchall()
        evals = con.execute("SELECT benchmark, method, k, mae FROM evaluations "
                            "WHERE benchmark LIKE 'sparseeval-joint/%' ORDER BY ALL").fetchall()
    assert len(rows) == 3 * K and {b for b, _ in rows} <= {"arc", "gsm8k", "mmlu"}
    responses = joint["lb"].responses
    for bench, item in rows:  # every anchor is a real item of the benchmark it is stored under
        assert responses.filter((pl.col("benchmark") == bench) & (pl.col("item_id") == item)).height > 0
    # the comparison on the joint split: joint and the per-benchmark method, every benchmark and the mean
    assert {(b, m) for b, m, _, _ in evals} == {(f"sparseeval-joint/{o}", m) for o in ("arc", "gsm8k", "mmlu", "mean")
                                                for m in ("sparseeval-joint", "sparseeval-linear")}
    assert all(k == K and mae > 0 for _, _, k, mae in evals)
    # per-benchmark comparison rows are untouched (their own splits, their own names)
    assert _count(db, "SELECT count(*) FROM evaluations WHERE benchmark = 'arc'") == 2 * 2
    # registry and published folder, where predict --benchmark sparseeval-joint looks
    cfg = joint["resources"]["tracking"].config()
    version = MlflowClient(cfg.resolved_tracking_uri).get_model_version_by_alias("sparseeval-joint", "champion")
    assert int(version.version) == 1
    meta = json.loads((joint["root"] / "predictors" / "sparseeval-joint" / "predictor.json").read_text())
    assert meta["extra"]["joint"]["benchmarks"] == ["arc", "gsm8k", "mmlu"]


def test_predict_on_the_published_joint_predictor(joint: dict, tmp_path: Path) -> None:
    """The payoff: a model's answers to the joint anchors -> one row per benchmark plus the mean."""
    meta = json.loads((joint["root"] / "predictors" / "sparseeval-joint" / "predictor.json").read_text())
    wanted = pl.DataFrame({"benchmark": [a["benchmark"] for a in meta["anchors"]],
                           "item_id": [a["item_id"] for a in meta["anchors"]]})
    answered = joint["lb"].responses.join(wanted, on=["benchmark", "item_id"])
    model = answered.group_by("model").len().sort("len", "model", descending=[True, False]).row(0)[0]
    answers = answered.filter(pl.col("model") == model)
    assert answers.height == 3 * K  # a model that answered every anchor
    answers.write_csv(tmp_path / "answers.csv")
    assert cli_main(["predict", "--no-db",
                     "--registry", str(joint["root"] / "predictors"), "--benchmark", "sparseeval-joint",
                     "--answers", str(tmp_path / "answers.csv"), "--json", str(tmp_path / "p.json")]) == 0
    preds = pl.DataFrame(json.loads((tmp_path / "p.json").read_text()))
    assert preds.get_column("benchmark").to_list() == ["arc", "gsm8k", "mmlu", "mean"]
    truth = joint["lb"].scores.filter(pl.col("model") == model)
    for row in preds.iter_rows(named=True):
        assert 0 <= row["lower"] <= row["predicted"] <= row["upper"] <= 1
        if row["benchmark"] != "mean":
            true = truth.filter(pl.col("benchmark") == row["benchmark"]).get_column("score").item()
            assert abs(row["predicted"] - true) < 0.2
    mean = preds.filter(pl.col("benchmark") == "mean").get_column("predicted").item()
    assert mean == pytest.approx(preds.filter(pl.col("benchmark") != "mean").get_column("predicted").mean(), abs=1e-6)


def test_joint_unchanged_skips_and_waits_for_refreshes(joint: dict) -> None:
    again = dg.materialize([response_matrix, *JOINT, *publishing_checks], resources=joint["resources"],
                           instance=joint["instance"], selection=JOINT)
    assert again.success and not _materialized(again)  # its fit key is decided: nothing refit or published
    assert "already decided" in _logs(again, joint["instance"])
    assert _count(joint["db"], "SELECT count(*) FROM anchor_sets WHERE benchmark = 'sparseeval-joint'") == 1
    # the sensor: nothing while the joint predictor is up to date, nothing while a refresh runs,
    # one request when a benchmark changed and its refresh is over (succeeded or failed)
    resources = {"store": joint["resources"]["store"], "settings": joint["resources"]["settings"]}
    context = dg.build_sensor_context(instance=joint["instance"], resources=resources, definitions=defs)
    assert "up to date" in joint_sensor(context).skip_message
    settings = {**resources, "settings": SettingsResource(**{**resources["settings"].model_dump(), "seed": 5})}
    request = joint_sensor(dg.build_sensor_context(instance=joint["instance"], resources=settings, definitions=defs))
    assert isinstance(request, dg.SkipReason) and "waiting for the refresh" in request.skip_message
    run = joint["instance"].create_run_for_job(defs.resolve_job_def("refresh"), run_config={}, tags={},
                                               status=dg.DagsterRunStatus.STARTED)
    assert "still in progress" in joint_sensor(context).skip_message
    joint["instance"].report_run_failed(run)


def test_joint_needs_two_benchmarks_and_enough_shared_models(joint: dict, tmp_path: Path) -> None:
    resources = {**joint["resources"], "settings": SettingsResource(
        k=K, method="sparseeval-linear", joint_benchmarks="arc", predictor_dir=str(tmp_path))}
    result = dg.materialize([response_matrix, *JOINT, *publishing_checks], resources=resources,
                            instance=joint["instance"], selection=JOINT)
    assert not _materialized(result) and "needs two benchmarks" in _logs(result, joint["instance"])
    resources["settings"] = SettingsResource(k=K, joint_benchmarks="arc,hellaswag", predictor_dir=str(tmp_path))
    with pytest.raises(Exception, match="joint benchmarks not in the data: hellaswag"):
        dg.materialize([response_matrix, *JOINT, *publishing_checks], resources=resources, instance=joint["instance"],
                       selection=JOINT)
