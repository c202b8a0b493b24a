"""End to end: real Dagster materializations into a temporary DuckDB file and MLflow store."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest
from mlflow.tracking import MlflowClient

from pipelines.assets import anchors, evaluation, predictions, predictor, raw_results, response_matrix
from pipelines.automation import changed_units, daily_refresh, new_results_sensor
from pipelines.definitions import defs
from pipelines.resources import SettingsResource, SourceResource, StoreResource, TrackingResource
from sparseeval.synthetic import generate_leaderboard, write_leaderboard

ASSETS = [raw_results, response_matrix, anchors, predictor, evaluation, predictions]
K = 8


@pytest.fixture(scope="module")
def materialized(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("pipeline")
    source = root / "source"
    lb = generate_leaderboard(n_families=12, models_per_family=8, benchmarks={"arc": 60, "gsm8k": 50}, seed=2)
    write_leaderboard(lb, source / "leaderboard")  # the source folder holds units; users drop more beside it
    resources = {
        "store": StoreResource(path=str(root / "sparseeval.duckdb")),
        "tracking": TrackingResource(data_dir=str(root)),
        "source": SourceResource(path=str(source)),
        "settings": SettingsResource(k=K, compare_methods="random-linear,sparseeval-linear", compare_ks="5,8",
                                     compare_seeds=2, predictor_dir=str(root / "predictors")),
    }
    instance = dg.DagsterInstance.ephemeral()
    results = {key: dg.materialize(ASSETS, partition_key=key, resources=resources, instance=instance)
               for key in ("arc", "gsm8k")}
    return {"root": root, "source": source, "lb": lb, "results": results, "resources": resources,
            "instance": instance}


def _count(db: Path, sql: str) -> int:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchone()[0]


def test_every_asset_materialized_and_checks_pass(materialized: dict) -> None:
    for result in materialized["results"].values():
        assert result.success
        keys = {m.asset_key.to_user_string() for m in result.get_asset_materialization_events()
                for m in [m.event_specific_data.materialization]}
        assert keys == {"raw_results", "response_matrix", "anchors", "predictor", "evaluation", "predictions"}
        checks = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        assert {c.check_name for c in checks} == {"every_file_accepted", "matrix_not_empty",
                                                  "scores_within_unit_interval", "anchors_unique_and_k",
                                                  "test_mae_finite"}
        assert all(c.passed for c in checks)


def test_duckdb_tables_hold_the_run(materialized: dict) -> None:
    db = materialized["root"] / "sparseeval.duckdb"
    lb = materialized["lb"]
    assert _count(db, "SELECT count(*) FROM responses") == lb.responses.height
    assert _count(db, "SELECT count(*) FROM scores") == lb.scores.height
    assert _count(db, "SELECT count(*) FROM ingests WHERE status = 'ok'") == 1  # second partition skipped it
    for bench in ("arc", "gsm8k"):
        assert _count(db, f"SELECT count(*) FROM anchors a JOIN anchor_sets s USING (anchor_set_id) "
                          f"WHERE s.benchmark = '{bench}' AND s.mlflow_run_id IS NOT NULL") == K
        # 2 methods x 2 K x 2 seeds
        assert _count(db, f"SELECT count(*) FROM evaluations WHERE benchmark = '{bench}'") == 8
    assert _count(db, "SELECT count(*) FROM latest_anchors") == 2 * K
    assert _count(db, "SELECT count(*) FROM evaluation_summary") == 2 * 2 * 2


def test_mlflow_has_runs_with_metrics_and_a_registered_model(materialized: dict) -> None:
    cfg = materialized["resources"]["tracking"].config()
    client = MlflowClient(cfg.resolved_tracking_uri)
    exp = client.get_experiment_by_name("sparseeval")
    runs = client.search_runs([exp.experiment_id], "tags.`sparseeval.kind` = 'evaluation'")
    assert {r.data.tags["benchmark"] for r in runs} == {"arc", "gsm8k"}
    for run in runs:
        assert {"mae", "tau", "seconds"} <= set(run.data.metrics)
        assert run.data.params["k"] == str(K)
        names = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"anchors.json", "predictor"} <= names
    version = client.get_model_version_by_alias("sparseeval-arc", "champion")
    assert version.run_id in {r.info.run_id for r in runs}
    assert not (Path.cwd() / "mlruns").exists()


def test_published_predictor_scores_a_new_model(materialized: dict) -> None:
    from sparseeval.scoring import predict

    folder = materialized["root"] / "predictors" / "arc"
    meta = json.loads((folder / "predictor.json").read_text())
    assert meta["k"] == K and meta["content_hash"].startswith("sha256:")
    answers = materialized["lb"].responses.filter(
        (materialized["lb"].responses["benchmark"] == "arc")
        & (materialized["lb"].responses["model"] == materialized["lb"].responses["model"][0]))
    preds = predict(folder, answers.rename({"correct": "score"}).with_columns(pl.col("score").cast(pl.Float64)))
    assert len(preds) == 1 and preds[0].lower <= preds[0].predicted <= preds[0].upper


def test_rematerializing_is_idempotent_for_stored_rows(materialized: dict) -> None:
    db = materialized["root"] / "sparseeval.duckdb"
    before = _count(db, "SELECT count(*) FROM responses")
    result = dg.materialize([raw_results], partition_key="arc", resources=materialized["resources"],
                            instance=materialized["instance"])
    assert result.success
    assert _count(db, "SELECT count(*) FROM responses") == before
    meta = result.get_asset_materialization_events()[0].event_specific_data.materialization.metadata
    assert meta["files_skipped"].value == 1 and meta["files_stored"].value == 0


def test_refused_files_fail_the_check_and_are_named(materialized: dict, tmp_path: Path) -> None:
    """A bad file beside good data: the good data is stored, the run is marked (check fails), the UI
    metadata names the file and the reason."""
    source = tmp_path / "src"
    write_leaderboard(generate_leaderboard(n_families=3, models_per_family=3, benchmarks={"arc": 20}, seed=5),
                      source / "good")
    (source / "broken.csv").write_text("model,benchmark,item_id,score\nm,arc,1,1.7\n")
    resources = {**materialized["resources"], "store": StoreResource(path=str(tmp_path / "s.duckdb")),
                 "source": SourceResource(path=str(source))}
    result = dg.materialize([raw_results], partition_key="arc", resources=resources,
                            instance=materialized["instance"], raise_on_error=False)
    assert result.success  # what was good is stored and downstream can run
    check = next(e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION")
    assert check.check_name == "every_file_accepted" and not check.passed
    meta = result.get_asset_materialization_events()[0].event_specific_data.materialization.metadata
    assert meta["files_refused"].value == 1 and meta["files_stored"].value == 1
    assert "broken.csv" in meta["refused"].value and "score outside [0, 1]" in meta["refused"].value


def test_sensor_requests_runs_only_for_changed_files(materialized: dict, tmp_path: Path) -> None:
    source = tmp_path / "src"
    lb = generate_leaderboard(n_families=3, models_per_family=3, benchmarks={"arc": 20}, seed=5)
    write_leaderboard(lb, source / "first")
    resources = {"source": SourceResource(path=str(source))}
    ctx = dg.build_sensor_context(resources=resources)
    requests = list(new_results_sensor(ctx))
    assert [r.partition_key for r in requests] == ["arc"]
    cursor = ctx.cursor
    ctx2 = dg.build_sensor_context(cursor=cursor, resources=resources)
    assert list(new_results_sensor(ctx2)) == []  # nothing changed
    lb2 = generate_leaderboard(n_families=3, models_per_family=3, benchmarks={"gsm8k": 20}, seed=6)
    write_leaderboard(lb2, source / "second")
    ctx3 = dg.build_sensor_context(cursor=cursor, resources=resources)
    assert [r.partition_key for r in new_results_sensor(ctx3)] == ["gsm8k"]
    changed, _ = changed_units(source, json.loads(cursor))
    assert [p.name for p in changed] == ["second"]


def test_schedule_and_job_are_defined() -> None:
    job = defs.resolve_job_def("refresh")
    assert job.partitions_def is not None
    ctx = dg.build_schedule_context(scheduled_execution_time=__import__("datetime").datetime(2026, 1, 2, 3))
    requests = list(daily_refresh(ctx))
    assert {r.partition_key for r in requests} == set(job.partitions_def.get_partition_keys())
    assert defs.resolve_schedule_def("daily_refresh").default_status == dg.DefaultScheduleStatus.RUNNING


def test_predictions_asset_scores_models_with_only_anchor_answers(materialized: dict) -> None:
    """A newcomer that ran only the published anchors lands in `predictions`, with an interval."""
    root = materialized["root"]
    meta = json.loads((root / "predictors" / "arc" / "predictor.json").read_text())
    items = [a["item_id"] for a in meta["anchors"]]
    newcomer = pl.DataFrame({"model": "newcomer/just-anchors", "benchmark": "arc", "item_id": items,
                             "correct": [i % 2 for i in range(len(items))]})
    newcomer.write_csv(materialized["source"] / "newcomer.csv")
    result = dg.materialize(ASSETS, partition_key="arc", resources=materialized["resources"],
                            instance=materialized["instance"])
    assert result.success
    db = root / "sparseeval.duckdb"
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT model, predicted, lower, upper, n_anchors FROM predictions").fetchall()
        assert con.execute("SELECT count(*) FROM predictions_vs_truth").fetchone()[0] == 0  # no true score
    assert [r[0] for r in rows] == ["newcomer/just-anchors"]
    _, predicted, lower, upper, n_anchors = rows[0]
    assert 0 <= lower <= predicted <= upper <= 1 and n_anchors == K
