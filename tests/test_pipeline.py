"""End to end: real Dagster materializations into a temporary DuckDB file and MLflow store.

Covers the refresh contract: ingest once per refresh; partitions discovered from the data;
nothing recomputed or republished on unchanged data (the fit step does not materialize, its checks
are skipped); champion anchors kept when new models arrive (predictor refit, calibration
recomputed); a challenger replaces the champion only when clearly better; a benchmark turned to
noise fails the checks and leaves the champion in DuckDB, the registry alias and the published
folder; sensors request only what changed, whoever wrote it to the store.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest
from mlflow.tracking import MlflowClient

from pipelines.assets import candidate, challenger, champion, evaluation, predictions, raw_results, response_matrix
from pipelines.automation import (
    comparison_sensor,
    daily_refresh,
    new_results_sensor,
    stale_benchmarks_sensor,
    weekly_comparison,
)
from pipelines.checks import publishing_checks
from pipelines.definitions import build_definitions, defs
from pipelines.io_managers import MatrixIOManager
from pipelines.partitions import BENCHMARK_PARTITIONS, add_benchmarks
from pipelines.resources import SettingsResource, SourceResource, StoreResource, TrackingResource
from pipelines.run_all import INFO_LOGS, succeeded, summary_line
from sparseeval.data.access.matrix_store import MatrixStore
from sparseeval.data.store import Store
from sparseeval.data.synthetic import generate_leaderboard, scrambled, write_leaderboard
from sparseeval.estimate.methods.device import cpu_threads
from sparseeval.interfaces.cli import main as cli_main
from sparseeval.publish.publishing import audit

PARTITIONED = [response_matrix, candidate, champion, challenger, evaluation, predictions]
#: what a refresh run materializes: the partitioned assets and their standalone checks
REFRESH = [*PARTITIONED, *publishing_checks]
K = 8
PUBLISH = {"beats_random_linear": True, "beats_mean_score": True, "coverage_near_nominal": True, "anchors_valid": True,
           "frontier_misses_flagged": True}

pytestmark = pytest.mark.slow


def _resources(root: Path, source: Path, **settings: object) -> dict:
    return {
        "store": StoreResource(path=str(root / "sparseeval.duckdb")),
        "tracking": TrackingResource(data_dir=str(root)),
        "source": SourceResource(path=str(source)),
        "settings": SettingsResource(**{"k": K, "method": "sparseeval-linear", "compare_methods":
                                        "random-linear,sparseeval-linear", "compare_ks": "5,8", "compare_seeds": 1,
                                        "predictor_dir": str(root / "predictors"), **settings}),
        "io_manager": MatrixIOManager(base_dir=str(root / "io")),
    }


def _refresh(resources: dict, instance: dg.DagsterInstance, keys: list[str] | None = None) -> dict:
    """What ``make run`` does: one ingest, partitions added, one refresh run per benchmark."""
    ingest = dg.materialize([raw_results], resources=resources, instance=instance)
    assert ingest.success
    meta = _meta(ingest, "raw_results")
    add_benchmarks(instance, meta["benchmarks"])
    runs = {key: dg.materialize(REFRESH, partition_key=key, resources=resources, instance=instance,
                                selection=PARTITIONED, raise_on_error=False)
            for key in (keys or meta["benchmarks"])}
    return {"ingest": ingest, "runs": runs, "meta": meta}


def _meta(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        if mat.asset_key.to_user_string() == asset:
            return {k: v.value for k, v in mat.metadata.items()}
    raise AssertionError(f"no materialization of {asset}")


def _materialized(result: dg.ExecuteInProcessResult) -> set[str]:
    return {e.event_specific_data.materialization.asset_key.to_user_string()
            for e in result.get_asset_materialization_events()}


def _skipped_steps(result: dg.ExecuteInProcessResult) -> set[str]:
    return {e.step_key for e in result.all_events if e.event_type_value == "STEP_SKIPPED"}


def _logs(result: dg.ExecuteInProcessResult, instance: dg.DagsterInstance) -> str:
    return "\n".join(e.user_message for e in instance.all_logs(result.run_id))


def _audit(resources: dict, root: Path, bench: str) -> list[str]:
    return audit(resources["store"].store(), resources["tracking"].config(), root / "predictors", bench)


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    return {e.event_specific_data.check_name: e.event_specific_data.passed for e in result.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION"}


def _count(db: Path, sql: str) -> int:
    with duckdb.connect(str(db.with_name("sparseeval.snapshot.duckdb")), read_only=True) as con:
        return con.execute(sql).fetchone()[0]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("pipeline")
    source = root / "source"
    lb = generate_leaderboard(n_families=12, models_per_family=8, benchmarks={"arc": 60, "gsm8k": 50}, seed=2)
    write_leaderboard(lb, source / "leaderboard")  # the source folder holds units; users drop more beside it
    resources = _resources(root, source)
    instance = dg.DagsterInstance.ephemeral()
    first = _refresh(resources, instance)
    return {"root": root, "source": source, "lb": lb, "resources": resources, "instance": instance,
            "first": first, "db": root / "sparseeval.duckdb"}


def test_first_refresh_publishes_a_champion_per_benchmark(pipeline: dict) -> None:
    first = pipeline["first"]
    assert sorted(first["meta"]["benchmarks"]) == ["arc", "gsm8k"]  # discovered, not configured
    assert sorted(pipeline["instance"].get_dynamic_partitions(BENCHMARK_PARTITIONS)) == ["arc", "gsm8k"]
    for result in first["runs"].values():
        assert result.success
        assert _checks(result) == {"scores_within_unit_interval": True, **PUBLISH}
        assert "published #" in _meta(result, "champion")["decision"]
        assert _meta(result, "champion")["models_scored"] == 0  # every model has a reported score
    db = pipeline["db"]
    assert _count(db, "SELECT count(*) FROM ingests WHERE status = 'ok'") == 1  # ingested once, not per partition
    assert _count(db, "SELECT count(*) FROM anchor_sets WHERE role = 'champion'") == 2
    assert _count(db, "SELECT count(*) FROM anchor_sets") == 2  # each anchor set written once
    assert _count(db, "SELECT count(*) FROM latest_anchors") == 2 * K
    assert _count(db, "SELECT count(*) FROM latest_anchors WHERE benchmark = 'arc'") == K
    assert _count(db, "SELECT count(*) FROM evaluations WHERE benchmark = 'arc'") == 2 * 2  # 2 methods x 2 K
    for bench in ("arc", "gsm8k"):  # DuckDB champion = registry alias = published folder
        assert _audit(pipeline["resources"], pipeline["root"], bench) == []
    # every role change went through the state table and is in the append-only history
    assert _rows(db, "SELECT old_role, new_role FROM role_history WHERE benchmark = 'arc' ORDER BY changed_at") == [
        (None, "candidate"), ("candidate", "proposed"), ("proposed", "champion")]


def test_matrix_between_steps_is_a_stored_version_not_a_pickle(pipeline: dict) -> None:
    pointer = json.loads((pipeline["root"] / "io" / "response_matrix" / "arc.json").read_text())
    folder = Path(pointer["folder"])  # the matrix store beside the DuckDB file, one folder per data version
    assert folder.parent == pipeline["root"] / "sparseeval.matrices" / "arc"
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "observed.npy", "scores.npy", "values.npy"]
    matrix = MatrixStore.load(folder)  # plain .npy, allow_pickle=False, memory-mapped
    assert matrix.benchmark == "arc" and matrix.shape[1] > 0 and matrix.data_version == pointer["data_version"]
    assert not list((pipeline["root"]).rglob("storage/*"))  # Dagster's pickling IO manager stored nothing


def test_mlflow_registry_and_published_folder(pipeline: dict) -> None:
    cfg = pipeline["resources"]["tracking"].config()
    client = MlflowClient(cfg.resolved_tracking_uri)
    version = client.get_model_version_by_alias("sparseeval-arc", "champion")
    run = client.get_run(version.run_id)
    assert run.data.tags["role"] == "champion" and "test_mae" in run.data.metrics
    # the candidate fit records its thread count: with the seed, what reproduces its anchors
    candidates = client.search_runs([run.info.experiment_id], "tags.`sparseeval.step` = 'candidate'")
    assert candidates and all(c.data.params["threads"] == str(cpu_threads()) for c in candidates)
    folder = pipeline["root"] / "predictors" / "arc"
    meta = json.loads((folder / "predictor.json").read_text())
    # the published path is a link into the versions, which live outside it
    assert meta["k"] == K and folder.is_symlink() and not (folder / "versions").exists()
    assert folder.resolve().parent == (pipeline["root"] / "predictors" / ".versions" / "arc").resolve()
    assert version.tags["content_hash"] == meta["content_hash"]
    assert not (Path.cwd() / "mlruns").exists()


def test_unchanged_refresh_recomputes_and_publishes_nothing(pipeline: dict) -> None:
    db = pipeline["db"]
    client = MlflowClient(pipeline["resources"]["tracking"].config().resolved_tracking_uri)
    before = (_count(db, "SELECT count(*) FROM anchor_sets"), _count(db, "SELECT count(*) FROM evaluations"),
              len(client.search_model_versions("name = 'sparseeval-arc'")))
    again = _refresh(pipeline["resources"], pipeline["instance"])
    assert again["meta"]["changed_benchmarks"] == []
    for result in again["runs"].values():
        assert result.success
        # nothing refit: the fit step does not materialize, its checks and the publish step are skipped
        assert _materialized(result) == {"response_matrix", "predictions"}
        assert {"candidate_beats_random_linear", "candidate_anchors_valid", "champion"} <= _skipped_steps(result)
        assert set(_checks(result)) == {"scores_within_unit_interval"}  # no publishing check reported as passed
        assert "already decided" in _logs(result, pipeline["instance"])
        assert "comparison skipped" in _logs(result, pipeline["instance"])
    after = (_count(db, "SELECT count(*) FROM anchor_sets"), _count(db, "SELECT count(*) FROM evaluations"),
             len(client.search_model_versions("name = 'sparseeval-arc'")))
    assert after == before


def test_sensors_request_only_what_changed(pipeline: dict, tmp_path: Path) -> None:
    resources = {"source": pipeline["resources"]["source"], "store": pipeline["resources"]["store"]}
    ctx = dg.build_sensor_context(resources=resources, instance=pipeline["instance"])
    first_tick = new_results_sensor(ctx)
    assert isinstance(first_tick, dg.SkipReason)  # the store already holds every unit: no run after make run
    cursor = ctx.cursor
    extra = generate_leaderboard(n_families=2, models_per_family=3, benchmarks={"arc": 60, "mmlu": 30}, seed=9)
    write_leaderboard(_renamed(extra, "-new"), tmp_path / "new")
    shutil.copytree(tmp_path / "new", pipeline["source"] / "new_models")
    try:
        ctx2 = dg.build_sensor_context(cursor=cursor, resources=resources, instance=pipeline["instance"])
        request = new_results_sensor(ctx2)
        assert isinstance(request, dg.RunRequest) and request.partition_key is None  # one ingest, not per benchmark
    finally:
        shutil.rmtree(pipeline["source"] / "new_models")


def test_stale_sensor_follows_the_store_whoever_writes_it(tmp_path: Path) -> None:
    """The refresh sensor asks the store: a first ingest requests every benchmark and adds partitions;
    after the refreshes nothing; a CLI ingest into the same store (no Dagster run) requests exactly the
    benchmarks it changed; a changed setting requests what it changes."""
    source = tmp_path / "src"
    write_leaderboard(generate_leaderboard(n_families=6, models_per_family=8, benchmarks={"arc": 30, "gsm8k": 30},
                                           seed=3), source / "first")
    resources = _resources(tmp_path, source)
    with dg.instance_for_test() as instance:
        assert dg.materialize([raw_results], resources=resources, instance=instance).success
        tick = _tick(instance, resources)
        assert sorted(r.partition_key for r in tick.run_requests) == ["arc", "gsm8k"]
        assert [list(r.partition_keys) for r in tick.dynamic_partitions_requests] == [["arc", "gsm8k"]]
        instance.add_dynamic_partitions(BENCHMARK_PARTITIONS, ["arc", "gsm8k"])
        _refresh(resources, instance)
        assert not _tick(instance, resources).run_requests  # everything decided: nothing to do
        # new arc models and a new benchmark, through the command line, straight into the store
        extra = generate_leaderboard(n_families=2, models_per_family=3, benchmarks={"arc": 30, "mmlu": 15}, seed=9)
        write_leaderboard(_renamed(extra, "-new"), tmp_path / "cli")
        assert cli_main(["-q", "ingest", str(tmp_path / "cli"), "--db", str(tmp_path / "sparseeval.duckdb")]) == 0
        tick2 = _tick(instance, resources)
        assert sorted(r.partition_key for r in tick2.run_requests) == ["arc", "mmlu"]
        assert [list(r.partition_keys) for r in tick2.dynamic_partitions_requests] == [["mmlu"]]
        assert _tick(instance, resources).run_requests[0].run_key == tick2.run_requests[0].run_key  # same state
        # a changed setting that changes the fit: every benchmark is stale
        changed = {**resources, "settings": SettingsResource(**{**resources["settings"].model_dump(), "alpha": 0.2})}
        assert sorted(r.partition_key for r in _tick(instance, changed).run_requests) == ["arc", "gsm8k", "mmlu"]


def test_comparison_runs_after_the_refresh_or_waits_for_its_schedule(tmp_path: Path) -> None:
    """The comparison is its own job after the refresh published: requested at once for a benchmark never
    compared, deferred to the weekly schedule when few models are new (the refresh still publishes)."""
    source = tmp_path / "src"
    write_leaderboard(generate_leaderboard(n_families=6, models_per_family=8, benchmarks={"arc": 30}, seed=3),
                      source / "first")
    resources = _resources(tmp_path, source)
    refresh_only = [response_matrix, candidate, champion, challenger, predictions]
    db = tmp_path / "sparseeval.duckdb"

    def refresh() -> None:
        assert dg.materialize([raw_results], resources=resources, instance=instance).success
        assert dg.materialize([*refresh_only, *publishing_checks], partition_key="arc", resources=resources,
                              instance=instance, selection=refresh_only).success

    def tick() -> list[dg.RunRequest] | dg.SkipReason:
        return comparison_sensor(dg.build_sensor_context(
            instance=instance, resources={"store": resources["store"], "settings": resources["settings"]}))

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(BENCHMARK_PARTITIONS, ["arc"])
    refresh()
    assert _count(db, "SELECT count(*) FROM anchor_sets WHERE role = 'champion'") == 1  # published first
    assert _count(db, "SELECT count(*) FROM evaluations") == 0
    requests = tick()
    assert [r.partition_key for r in requests] == ["arc"] and "never compared" in requests[0].tags["sparseeval/why"]
    assert dg.materialize([response_matrix, evaluation], partition_key="arc", resources=resources,
                          instance=instance, selection=[evaluation]).success
    assert _count(db, "SELECT count(*) FROM evaluations") == 4 and isinstance(tick(), dg.SkipReason)
    # two new models (4 % of the benchmark): refit and published, the comparison waits for its schedule
    extra = generate_leaderboard(n_families=1, models_per_family=2, benchmarks={"arc": 30}, seed=9)
    write_leaderboard(_renamed(extra, "-new"), source / "second")
    before = _count(db, "SELECT count(*) FROM anchor_sets WHERE role = 'retired'")
    refresh()
    assert _count(db, "SELECT count(*) FROM anchor_sets WHERE role = 'retired'") > before  # a new champion
    assert isinstance(tick(), dg.SkipReason)
    scheduled = weekly_comparison(dg.build_schedule_context(
        instance=instance, resources={"store": resources["store"], "settings": resources["settings"]},
        scheduled_execution_time=__import__("datetime").datetime(2026, 1, 4, 4)))
    assert [r.partition_key for r in scheduled] == ["arc"] and "scheduled" in scheduled[0].tags["sparseeval/why"]


def test_new_models_keep_champion_anchors_and_refit(pipeline: dict, tmp_path: Path) -> None:
    """New models for a benchmark: the champion's anchors are kept, its predictor refit and
    recalibrated on the larger training set; the challenger (re-selection) does not replace it
    unless it is clearly better and the champion old enough."""
    root = tmp_path / "store"
    source = tmp_path / "src"
    lb = generate_leaderboard(n_families=12, models_per_family=8, benchmarks={"arc": 60}, seed=4)
    write_leaderboard(lb, source / "first")
    resources = _resources(root, source, challenger_min_days=30.0)
    instance = dg.DagsterInstance.ephemeral()
    _refresh(resources, instance)
    db = root / "sparseeval.duckdb"
    first_items = _items(db)
    first_cal = json.loads((root / "predictors" / "arc" / "predictor.json").read_text())["calibration"]
    more = generate_leaderboard(n_families=4, models_per_family=8, benchmarks={"arc": 60}, seed=5)
    write_leaderboard(_renamed(more, "-second"), source / "second")
    result = _refresh(resources, instance)["runs"]["arc"]
    decision = _meta(result, "candidate")["decision"]
    assert _items(db) == first_items, decision  # the anchors users already ran stay valid
    roles = dict(_rows(db, "SELECT origin, role FROM anchor_sets WHERE data_version = "
                           "(SELECT max(data_version) FROM anchor_sets WHERE origin = 'refit')"))
    assert roles["refit"] == "champion" and roles["selected"] in ("challenger", "champion")
    cal = json.loads((root / "predictors" / "arc" / "predictor.json").read_text())["calibration"]
    assert cal != first_cal  # recalibrated on the new split
    assert _count(db, "SELECT count(*) FROM anchor_sets WHERE role = 'retired'") == 1
    client = MlflowClient(resources["tracking"].config().resolved_tracking_uri)
    assert str(client.get_model_version_by_alias("sparseeval-arc", "champion").version) == "2"
    if roles["selected"] == "challenger":
        assert str(client.get_model_version_by_alias("sparseeval-arc", "challenger").version) == "3"
    # the same data under another alpha: the champion's anchors are refit again, with the same origin
    # and data version; that is a new anchor set (a published predictor never changes in place), and
    # DuckDB, the registry alias and the published folder still agree
    before = _count(db, "SELECT count(*) FROM anchor_sets")
    _refresh(_resources(root, source, challenger_min_days=30.0, alpha=0.2), instance)
    assert _count(db, "SELECT count(*) FROM anchor_sets") > before
    assert audit(Store(db), resources["tracking"].config(), root / "predictors", "arc") == []
    # a challenger that wins by any margin and no waiting time replaces the champion
    even_more = generate_leaderboard(n_families=2, models_per_family=8, benchmarks={"arc": 60}, seed=6)
    write_leaderboard(_renamed(even_more, "-third"), source / "third")
    eager = _resources(root, source, challenger_min_days=0.0, challenger_margin=-10.0)
    result = _refresh(eager, instance)["runs"]["arc"]
    assert "refit on the new data" in _meta(result, "candidate")["decision"]  # published first, then challenged
    assert "beats the champion's refit" in _meta(result, "challenger")["decision"]
    assert _count(db, "SELECT count(*) FROM anchor_sets WHERE role = 'champion' AND origin = 'selected'") == 1


def test_a_failing_check_leaves_the_champion_in_place(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    """A corrected re-run that turns a benchmark into pure noise (answers unrelated to the scores) fails
    the publishing checks under the default settings: the new sets are rejected, and the champion stays
    in DuckDB, under the registry alias and in the published folder; the UI says why."""
    root, source = tmp_path / "store", tmp_path / "src"
    lb = generate_leaderboard(n_families=12, models_per_family=8, benchmarks={"arc": 60}, seed=7)
    write_leaderboard(lb, source / "lb")
    resources = _resources(root, source)
    instance = dg.DagsterInstance.ephemeral()
    _refresh(resources, instance)
    db = root / "sparseeval.duckdb"
    champion_before = _count(db, "SELECT anchor_set_id FROM anchor_sets WHERE role = 'champion'")
    client = MlflowClient(resources["tracking"].config().resolved_tracking_uri)
    alias_before = client.get_model_version_by_alias("sparseeval-arc", "champion").version
    served_before = json.loads((root / "predictors" / "arc" / "predictor.json").read_text())["content_hash"]
    write_leaderboard(scrambled(lb, seed=0), source / "lb")  # a corrected re-run of the same file: pure noise
    assert dg.materialize([raw_results], resources=resources, instance=instance).success
    capfd.readouterr()
    # the refresh job as make run launches it (its console logger configured: the definitions' own)
    result = build_definitions(resources).resolve_job_def("refresh").execute_in_process(
        partition_key="arc", instance=instance, raise_on_error=False, run_config=INFO_LOGS)
    log = capfd.readouterr().err
    # the refusal is one line in the log, no stack trace (it is an outcome, not a crash)
    assert "(a publishing check refused it: 1 blocking asset check failed" in log, log
    assert "Stack Trace" not in log and "DagsterAssetCheckFailedError" not in log, log
    checks = _checks(result)
    assert checks["beats_mean_score"] is False, checks
    assert "NOT published" in _meta(result, "candidate")["decision"]
    assert "champion" not in _materialized(result)  # blocked downstream
    # make run reports a refusal as one (the champion stays, the reason shown) and is not an error
    assert not result.success and succeeded(result)
    line = summary_line("arc", result, 1.0)
    assert "REJECTED by its publishing checks (" in line and "beats_mean_score" in line, line
    assert "NOT published" in line, line
    assert _count(db, "SELECT anchor_set_id FROM anchor_sets WHERE role = 'champion'") == champion_before
    assert _count(db, "SELECT count(*) FROM anchor_sets WHERE role = 'rejected'") >= 1
    assert client.get_model_version_by_alias("sparseeval-arc", "champion").version == alias_before
    assert json.loads((root / "predictors" / "arc" / "predictor.json").read_text())["content_hash"] == served_before
    assert _audit(resources, root, "arc") == []
    assert len(client.search_model_versions("name = 'sparseeval-arc'")) == 1  # nothing registered
    assert _count(db, "SELECT count(*) FROM publications WHERE step NOT IN ('done', 'abandoned')") == 0
    assert _count(db, "SELECT count(*) FROM fit_decisions WHERE outcome = 'rejected'") == 1


def test_refused_files_fail_the_check_and_are_named(tmp_path: Path) -> None:
    """A bad file beside good data: the good data is stored, the run is marked (check fails), the UI
    metadata names the file and the reason."""
    source = tmp_path / "src"
    write_leaderboard(generate_leaderboard(n_families=3, models_per_family=3, benchmarks={"arc": 20}, seed=5),
                      source / "good")
    (source / "broken.csv").write_text("model,benchmark,item_id,score\nm,arc,1,1.7\n")
    result = dg.materialize([raw_results], resources=_resources(tmp_path, source),
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert result.success  # what was good is stored and downstream can run
    assert _checks(result) == {"every_file_accepted": False}
    meta = _meta(result, "raw_results")
    assert meta["files_refused"] == 1 and meta["files_stored"] == 1
    assert "broken.csv" in meta["refused"] and "score outside [0, 1]" in meta["refused"]


def test_two_partitions_launched_together_both_succeed(pipeline: dict, tmp_path: Path) -> None:
    """Two refresh runs in two processes at once against one store and one MLflow store (each fits and
    publishes): no lock errors, both champions published."""
    script = tmp_path / "run_one.py"
    script.write_text(
        "import sys, dagster as dg\n"
        "from tests.test_pipeline import PARTITIONED, REFRESH, _resources\n"
        "from pathlib import Path\n"
        "root, source, key = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]\n"
        "instance = dg.DagsterInstance.ephemeral()\n"
        "instance.add_dynamic_partitions('benchmark', [key])\n"
        "res = dg.materialize(REFRESH, partition_key=key, resources=_resources(root, source),\n"
        "                     instance=instance, selection=PARTITIONED)\n"
        "sys.exit(0 if res.success else 1)\n")
    root = tmp_path / "store"
    assert dg.materialize([raw_results], resources=_resources(root, pipeline["source"]),
                          instance=dg.DagsterInstance.ephemeral()).success
    repo = Path(__file__).parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    procs = [subprocess.Popen([sys.executable, str(script), str(root), str(pipeline["source"]), key],
                              cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for key in ("arc", "gsm8k")]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    assert _count(root / "sparseeval.duckdb", "SELECT count(*) FROM anchor_sets WHERE role = 'champion'") == 2
    resources = _resources(root, pipeline["source"])
    assert _audit(resources, root, "arc") == _audit(resources, root, "gsm8k") == []


def test_predictions_asset_scores_models_with_only_anchor_answers(pipeline: dict) -> None:
    """A newcomer that ran only the published anchors lands in `predictions`, with an interval; one that
    ran two of them is not scored (and does not stop the other from being scored): the assets say why."""
    root = pipeline["root"]
    meta = json.loads((root / "predictors" / "arc" / "predictor.json").read_text())
    items = [a["item_id"] for a in meta["anchors"]]
    second_third = [items[i] for i in meta["extra"]["adaptive"]["order"][1:3]]  # not a prefix of the order
    newcomer = pl.DataFrame({"model": ["newcomer/just-anchors"] * len(items) + ["newcomer/two-anchors"] * 2,
                             "benchmark": "arc", "item_id": items + second_third,
                             "correct": [i % 2 for i in range(len(items))] + [1, 1]})
    newcomer.write_csv(pipeline["source"] / "newcomer.csv")
    try:
        runs = _refresh(pipeline["resources"], pipeline["instance"], keys=["arc"])
    finally:
        (pipeline["source"] / "newcomer.csv").unlink()
    assert runs["runs"]["arc"].success
    not_scored = _meta(runs["runs"]["arc"], "predictions")["models_not_scored"]
    assert list(not_scored) == ["newcomer/two-anchors"] and not_scored["newcomer/two-anchors"].startswith(
        f"answered 2 of {K} anchors of 'arc'")
    with duckdb.connect(str(pipeline["db"].with_name("sparseeval.snapshot.duckdb")), read_only=True) as con:
        rows = con.execute("SELECT model, predicted, lower, upper, n_anchors FROM predictions").fetchall()
        assert con.execute("SELECT count(*) FROM predictions_vs_truth").fetchone()[0] == 0  # no true score
    assert {r[0] for r in rows} == {"newcomer/just-anchors"}
    current = _count(pipeline["db"], "SELECT anchor_set_id FROM anchor_sets WHERE benchmark = 'arc' "
                                     "AND role = 'champion'")
    rows = _rows(pipeline["db"], f"SELECT model, predicted, lower, upper, n_anchors FROM predictions "
                                 f"WHERE anchor_set_id = {current}")  # scored by the champion now published
    assert len(rows) == 1
    _, predicted, lower, upper, n_anchors = rows[0]
    assert 0 <= lower <= predicted <= upper <= 1 and n_anchors == K


def test_definitions_schedule_and_jobs() -> None:
    assert {j.name for j in defs.resolve_all_job_defs()} >= {"ingest", "refresh", "compare"}
    # the comparison is its own job: a refresh run publishes without waiting for it
    assert "evaluation" not in {n.name for n in defs.resolve_job_def("refresh").nodes}
    assert [n.name for n in defs.resolve_job_def("compare").nodes] == ["evaluation"]
    assert defs.resolve_schedule_def("weekly_comparison").cron_schedule == "0 4 * * 0"
    ctx = dg.build_schedule_context(scheduled_execution_time=__import__("datetime").datetime(2026, 1, 2, 3))
    request = daily_refresh(ctx)
    assert isinstance(request, dg.RunRequest) and request.run_key == "daily-2026-01-02"
    assert defs.resolve_schedule_def("daily_refresh").default_status == dg.DefaultScheduleStatus.RUNNING
    for asset in (raw_results, *PARTITIONED):
        spec = next(iter(asset.specs))
        assert spec.owners and spec.description and spec.tags


def _tick(instance: dg.DagsterInstance, resources: dict):
    """One evaluation of the refresh sensor, as the daemon runs it (with the instance's partitions)."""
    return stale_benchmarks_sensor.evaluate_tick(
        dg.build_sensor_context(instance=instance, instance_ref=instance.get_ref(), definitions=defs,
                                resources={"store": resources["store"], "settings": resources["settings"]}))


def _renamed(lb, suffix: str):
    """The same synthetic leaderboard under other model names (generated names repeat across seeds)."""
    from dataclasses import replace

    rename = pl.col("model") + suffix
    return replace(lb, responses=lb.responses.with_columns(rename), scores=lb.scores.with_columns(rename),
                   models=lb.models.with_columns(rename, base_model=pl.col("base_model") + suffix))


def _items(db: Path) -> list[str]:
    return [r[0] for r in _rows(db, "SELECT item_id FROM latest_anchors WHERE benchmark = 'arc' ORDER BY position")]


def _rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db.with_name("sparseeval.snapshot.duckdb")), read_only=True) as con:
        return con.execute(sql).fetchall()
