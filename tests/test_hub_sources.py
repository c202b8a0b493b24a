"""Hub dataset repos as sources, through the real huggingface_hub client against bench/support/hub_server.py.

The repos hold the lm-eval 0.4.13 files in tests/fixtures/real_formats (as ``push_results_to_hub``
lays them out: ``<org>__<model>/results_*.json`` + ``samples_*.jsonl``) and the v1 / v2 leaderboard
details layouts written by bench/support/formats.py. Real DuckDB store; no patched client functions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.support.formats import write_v1_details, write_v2_details
from bench.support.hub_server import HubServer, Repo, files_from
from sparseeval.data.access.hub_sources import HubFetcher, HubSource, parse_source, parse_sources
from sparseeval.data.store import Store

LM_EVAL = Path(__file__).parent / "fixtures" / "real_formats" / "lm_eval_0.4.13" / "dummy"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    server = HubServer()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    evals = Repo()
    evals.push(files_from(LM_EVAL, "org__dummy/"))
    server.repos["team/evals"] = evals
    v2 = Repo()
    v2.push(files_from(write_v2_details(tmp_path / "v2"), "org__model-v2/"))
    server.repos["team/model-v2-details"] = v2
    v1 = Repo()
    v1.push(files_from(write_v1_details(tmp_path / "v1")))
    server.repos["team/model-7b-details"] = v1
    store = Store(tmp_path / "s.duckdb")
    store.apply_schema()
    yield server, store, HubFetcher(store, tmp_path / "cache")
    server.close()


def test_source_forms() -> None:
    assert parse_source("data/source") == Path("data/source")
    assert parse_source("hf://datasets/org/repo@v1.0") == HubSource("org", "repo", "v1.0")
    assert parse_source("hf://datasets/org/*-details").is_glob
    assert len(parse_sources("a, hf://datasets/o/r")) == 2
    with pytest.raises(ValueError, match="hf://models/x/y: only dataset repos"):
        parse_source("hf://models/x/y")
    with pytest.raises(ValueError, match="expected hf://datasets/ORG/REPO"):
        parse_source("hf://datasets/justone")


@pytest.mark.slow  # the Hub stand-in server: make test runs it, make test-fast leaves it out
def test_incremental_refresh_fetches_only_new_files_and_unchanged_costs_one_call(hub, tmp_path: Path) -> None:
    server, store, fetcher = hub
    sources = parse_sources("hf://datasets/team/evals,hf://datasets/team/*-details")
    first = {f.repo: f for f in fetcher.refresh(sources)}
    assert {r: f.status for r, f in first.items()} == dict.fromkeys(
        ["team/evals", "team/model-7b-details", "team/model-v2-details"], "fetched")
    assert {"toy_group@3shot", "bbh", "ifeval", "arc"} <= set(store.benchmarks())
    assert not any(p.endswith("README.md") for p in server.calls if "resolve" in p)  # only result files
    assert store.hub_sha("team/evals", "main") == server.repos["team/evals"].commits[-1][0]

    # unchanged: one metadata call per repo (plus one listing for the glob), nothing downloaded
    server.calls.clear()
    assert [f.status for f in fetcher.refresh(parse_sources("hf://datasets/team/evals"))] == []
    assert server.calls == ["GET /api/datasets/team/evals/revision/main"]

    # a new model pushed: only its files are downloaded (HEAD + GET each)
    new = write_v2_details(tmp_path / "v2b", model="org/newer-v2")
    server.repos["team/evals"].push(files_from(new, "org__newer-v2/"))
    server.calls.clear()
    (fetched,) = fetcher.refresh(parse_sources("hf://datasets/team/evals"))
    got = [c for c in server.calls if c.startswith("GET /datasets/")]
    assert fetched.status == "fetched" and len(fetched.files) == len(got) == 5
    assert all("org__newer-v2/" in c for c in got)
    assert "org/newer-v2" in store.query("SELECT model FROM models")["model"].to_list()


def test_offline_serves_the_clients_cache_and_says_when_nothing_is_cached(hub, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    server, _store, fetcher = hub
    fetcher.refresh(parse_sources("hf://datasets/team/evals"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    server.calls.clear()
    other = Store(tmp_path / "other.duckdb")
    other.apply_schema()
    out = {f.repo: f for f in HubFetcher(other, tmp_path / "cache").refresh(
        parse_sources("hf://datasets/team/evals,hf://datasets/team/model-7b-details"))}
    assert server.calls == []
    assert out["team/evals"].status == "fetched" and "toy_group@3shot" in other.benchmarks()
    assert out["team/model-7b-details"].status == "failed"
    assert "nothing of this repo in the client's cache" in out["team/model-7b-details"].error


def test_faults_are_reported_per_repo_and_the_rest_goes_on(hub, monkeypatch: pytest.MonkeyPatch) -> None:
    server, store, fetcher = hub
    server.repos["team/gated"] = Repo(gated=True)
    server.repos["team/gated"].push({"a/results_x.json": b"{}"})
    server.repos["team/evals"].rate_limit = 2  # 429 Retry-After: 0, twice, then served
    lfs = server.repos["team/model-7b-details"]
    lfs.missing = {p for p in lfs.commits[-1][1] if p.endswith(".parquet")}
    server.repos["team/model-v2-details"].moved_to = "f" * 40
    out = {f.repo: f for f in fetcher.refresh(parse_sources(
        "hf://datasets/team/gated,hf://datasets/team/evals,hf://datasets/team/*-details,hf://datasets/nobody/x"))}
    assert out["team/evals"].status == "fetched"  # retried after the wait the 429 named
    assert "gated repo" in out["team/gated"].error and "HF_TOKEN" in out["team/gated"].error
    assert "did not resolve (Git-LFS object missing" in out["team/model-7b-details"].error
    assert "revision changed during the download" in out["team/model-v2-details"].error
    assert "repo not found, or private" in out["nobody/x"].error
    for failed in ("team/gated", "team/model-7b-details", "team/model-v2-details"):
        assert store.hub_sha(failed, "main") is None  # nothing recorded: the next refresh tries again
    assert "mmlu_pro" not in store.benchmarks()  # the moved repo ingested nothing


def test_no_network_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    store = Store(tmp_path / "s.duckdb")
    store.apply_schema()
    (f,) = HubFetcher(store, tmp_path / "cache").refresh(parse_sources("hf://datasets/team/evals"))
    assert f.status == "failed" and "cannot reach the Hub" in f.error


@pytest.mark.slow  # real Dagster runs: make test runs it, make test-fast leaves it out
def test_sensor_requests_one_ingest_of_new_revisions_and_the_run_shows_what_was_fetched(
        hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg

    from pipelines.assets import raw_results
    from pipelines.automation import hub_sources_sensor
    from pipelines.resources import SourceResource, StoreResource

    server, _store, _fetcher = hub
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    resources = {"store": StoreResource(path=str(tmp_path / "dg.duckdb")),
                 "source": SourceResource(path="hf://datasets/team/evals,hf://datasets/team/*-details,"
                                           "hf://datasets/nobody/gone")}
    instance = dg.DagsterInstance.ephemeral()
    tick = hub_sources_sensor(dg.build_sensor_context(resources=resources, instance=instance))
    assert isinstance(tick, dg.RunRequest) and "team/evals@" in tick.tags["sparseeval/new_revisions"]
    result = dg.materialize([raw_results], resources=resources, instance=instance)
    meta = result.asset_materializations_for_node("raw_results")[0].metadata
    assert meta["hub_files"].value > 0 and meta["hub_failed"].value == 1
    rows = {r["repo"]: r for r in meta["hub_fetched"].data}
    assert set(rows) == {"team/evals", "team/model-7b-details", "team/model-v2-details", "nobody/gone"}
    assert rows["nobody/gone"]["status"] == "failed" and "repo not found" in rows["nobody/gone"]["error"]
    assert rows["team/evals"]["sha"] == server.repos["team/evals"].commits[-1][0]
    server.calls.clear()
    again = hub_sources_sensor(dg.build_sensor_context(resources=resources, instance=instance))
    assert isinstance(again, dg.SkipReason)
    assert len([c for c in server.calls if "/revision/" in c]) == 4 and not any("resolve" in c for c in server.calls)
    pushed = files_from(write_v2_details(tmp_path / "n", model="org/n2"), "org__n2/")
    server.repos["team/evals"].push(pushed)
    new = hub_sources_sensor(dg.build_sensor_context(resources=resources, instance=instance))
    assert isinstance(new, dg.RunRequest) and "model-7b" not in new.tags["sparseeval/new_revisions"]
    server.calls.clear()
    result = dg.materialize([raw_results], resources=resources, instance=instance)
    meta = result.asset_materializations_for_node("raw_results")[0].metadata
    assert [(r["repo"], r["files"]) for r in meta["hub_fetched"].data if r["status"] == "fetched"] == [
        ("team/evals", 5)]
    assert meta["hub_bytes"].value == sum(len(b) for b in pushed.values()) and meta["hub_seconds"].value > 0
    assert all("org__n2/" in c for c in server.calls if c.startswith("GET /datasets/"))
    # another task list on the same commits: the repos are listed again, under a run key of its own (the
    # earlier key would be a duplicate Dagster drops without a run)
    narrowed = {**resources, "source": SourceResource(path=resources["source"].path, hub_tasks="arc")}
    relist = hub_sources_sensor(dg.build_sensor_context(resources=narrowed, instance=instance))
    assert isinstance(relist, dg.RunRequest) and relist.run_key != new.run_key
    assert all(f"{repo}@" in relist.tags["sparseeval/new_revisions"]
               for repo in ("team/evals", "team/model-7b-details", "team/model-v2-details"))


@pytest.mark.slow  # the Hub stand-in server: make test runs it, make test-fast leaves it out
def test_cli_ingests_repos_and_folders_reports_unchanged_and_one_line_per_failed_repo(
        hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from sparseeval.interfaces.cli import main

    server, _store, _fetcher = hub
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cli-cache"))
    local = write_v1_details(tmp_path / "local", model="org/local-7b")
    db = str(tmp_path / "cli.duckdb")
    argv = ["ingest", "hf://datasets/team/evals", str(local), "hf://datasets/nobody/missing", "--db", db]
    assert main(argv) == 1  # a repo failed; the others are still ingested
    out, err = capsys.readouterr()
    assert [line for line in err.splitlines() if "nobody/missing" in line] == [
        "FAILED   nobody/missing: repo not found, or private (no HF_TOKEN is set): check the name, or set HF_TOKEN "
        "to a token with access"]
    assert any(line.startswith("fetched ") and "team/evals" in line for line in out.splitlines())
    sha = server.repos["team/evals"].commits[-1][0]
    assert f"team/evals@{sha[:8]}: 4 new file(s), " in err  # progress: the total, then one line per file
    assert f"team/evals@{sha[:8]}: 1/4 org__dummy/results_" in err and " bytes (100 %) in " in err
    cli_store = Store(tmp_path / "cli.duckdb")
    assert {"toy_group@3shot", "arc"} <= set(cli_store.benchmarks())
    assert {"org/local-7b"} <= set(cli_store.query("SELECT model FROM models")["model"].to_list())
    assert cli_store.hub_sha("team/evals", "main") == server.repos["team/evals"].commits[-1][0]

    server.calls.clear()
    assert main(["ingest", "hf://datasets/team/evals", "--db", db]) == 0
    out, _err = capsys.readouterr()
    assert server.calls == ["GET /api/datasets/team/evals/revision/main"]  # no download
    assert any(line.startswith("unchanged ") and "team/evals" in line for line in out.splitlines())
    assert "Hub repos: 0 fetched, 1 unchanged, 0 failed" in out


def test_several_local_folders_are_all_watched_and_ingested(tmp_path: Path) -> None:
    import dagster as dg

    from pipelines.assets import raw_results
    from pipelines.automation import new_results_sensor
    from pipelines.resources import SourceResource, StoreResource

    a = write_v1_details(tmp_path / "a", model="org/a-7b")
    b = write_v2_details(tmp_path / "b", model="org/b-v2")
    resources = {"store": StoreResource(path=str(tmp_path / "dg.duckdb")),
                 "source": SourceResource(path=f"{tmp_path / 'a'}, {tmp_path / 'b'}")}
    instance = dg.DagsterInstance.ephemeral()
    tick = new_results_sensor(dg.build_sensor_context(resources=resources, instance=instance))
    assert isinstance(tick, dg.RunRequest)
    assert set(tick.tags["sparseeval/new_units"].split(", ")) == {a.name, b.name}
    dg.materialize([raw_results], resources=resources, instance=instance)
    models = set(Store(tmp_path / "dg.duckdb").query("SELECT model FROM models")["model"].to_list())
    assert {"org/a-7b", "org/b-v2"} <= models


def test_rate_limit_past_the_retries_is_reported_and_nothing_recorded(hub) -> None:
    from sparseeval.data.access.hub_sources import RETRIES

    server, store, fetcher = hub
    server.repos["team/evals"].rate_limit = RETRIES + 1  # every attempt answered 429
    (f,) = fetcher.refresh(parse_sources("hf://datasets/team/evals"))
    assert f.status == "failed" and f.error.startswith("the Hub answered 429") and f.calls == RETRIES + 1
    assert server.calls.count("GET /api/datasets/team/evals/revision/main") == RETRIES + 1
    assert store.hub_sha("team/evals", "main") is None


def test_hub_sensor_runs_by_default_on_the_sensor_interval_and_requests_the_ingest_job() -> None:
    import dagster as dg

    from pipelines.automation import SENSOR_INTERVAL
    from pipelines.definitions import defs

    sensor = defs.resolve_sensor_def("hub_sources_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert sensor.minimum_interval_seconds == SENSOR_INTERVAL and sensor.job_name == "ingest"


def _resolved(server: HubServer) -> set[str]:
    """The repo paths the client downloaded (GET .../resolve/<commit>/<path>)."""
    return {c.split("/resolve/", 1)[1].split("/", 1)[1] for c in server.calls
            if c.startswith("GET ") and "/resolve/" in c}


@pytest.mark.slow  # the Hub stand-in server: make test runs it, make test-fast leaves it out
def test_wanted_tasks_download_only_their_files_and_a_widened_list_fetches_the_rest(hub, tmp_path: Path) -> None:
    """SPARSEEVAL_HUB_TASKS: a v1 details repo holds every task of a run; only the wanted tasks' parquet
    files and the aggregate results come. A wanted task the repo lacks is said, not passed over. Widening
    the list on an unchanged commit fetches just the newly wanted files; the same list again costs one call."""
    server, store, _ = hub
    cache = tmp_path / "cache"
    source = parse_sources("hf://datasets/team/model-7b-details")
    (f,) = HubFetcher(store, cache, tasks=["arc", "mmlu", "winogrande"]).refresh(source)
    assert f.status == "fetched" and f.notes == ["no file of wanted task 'winogrande' at this commit"]
    got = _resolved(server)
    assert {p.rsplit("/", 1)[-1].split("_2023")[0] for p in got} == {
        "results", "details_harness|arc:challenge|25", "details_harness|hendrycksTest-anatomy|5",
        "details_harness|hendrycksTest-virology|5"}
    responses = set(store.query("SELECT DISTINCT benchmark FROM responses")["benchmark"].to_list())
    assert {"arc", "mmlu"} <= responses and not responses & {"gsm8k", "truthfulqa"}

    server.calls.clear()
    (wider,) = HubFetcher(store, cache, tasks=["arc", "gsm8k", "mmlu", "winogrande"]).refresh(source)
    assert wider.status == "fetched" and [Path(p).name.split("_2023")[0] for p in _resolved(server)] == [
        "details_harness|gsm8k|5"]
    assert "gsm8k" in set(store.query("SELECT DISTINCT benchmark FROM responses")["benchmark"].to_list())
    server.calls.clear()
    assert HubFetcher(store, cache, tasks=["gsm8k", "arc", "mmlu", "winogrande"]).refresh(source) == []
    assert server.calls == ["GET /api/datasets/team/model-7b-details/revision/main"]  # order does not matter

    server.calls.clear()  # v2 layout: a benchmark name stands for its exact lm-eval tasks
    (v2,) = HubFetcher(store, cache, tasks=["bbh"]).refresh(parse_sources("hf://datasets/team/model-v2-details"))
    assert v2.status == "fetched" and not v2.notes
    assert sorted(Path(p).name.split("_2024")[0] for p in _resolved(server)) == [
        "results", "samples_leaderboard_bbh_boolean_expressions", "samples_leaderboard_bbh_navigate"]


def test_hf_token_is_the_only_credential_and_a_private_repo_says_which_token_it_lacks(
        hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    server, store, fetcher = hub
    secret = "hf_private_team_token"
    private = Repo(token=secret)
    private.push(files_from(LM_EVAL, "org__dummy/"))
    server.repos["team/private"] = private
    source = parse_sources("hf://datasets/team/private")
    # a token a login left on the machine is not used: HF_TOKEN is the only credential
    token_file = tmp_path / "login-token"
    token_file.write_text(secret)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(token_file))
    (f,) = fetcher.refresh(source)
    assert f.status == "failed" and f.error.startswith("repo not found, or private (no HF_TOKEN is set)")
    assert not any(server.auth)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    (f,) = HubFetcher(store, tmp_path / "cache").refresh(source)
    assert f.status == "failed" and "the token in HF_TOKEN has no access to it" in f.error
    monkeypatch.setenv("HF_TOKEN", secret)
    logged: list[str] = []
    (f,) = HubFetcher(store, tmp_path / "cache", log=logged.append).refresh(source)
    assert f.status == "fetched" and len(f.files) == 4
    assert "toy_group@3shot" in store.benchmarks()
    # the token is sent, never kept: not in the store, the client's cache, nor the log
    kept = [p for p in tmp_path.rglob("*") if p.is_file() and p != token_file and secret.encode() in p.read_bytes()]
    assert kept == [] and not any(secret in line for line in logged)


@pytest.mark.slow  # real Dagster runs: make test runs it, make test-fast leaves it out
def test_the_daily_schedule_runs_the_ingest_job_that_fetches_only_a_new_revisions_files(
        hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The schedule's tick, then the job it names, run by Dagster on an instance (not the asset alone)."""
    import datetime

    import dagster as dg

    from pipelines.assets import raw_results
    from pipelines.automation import daily_refresh, ingest_job
    from pipelines.resources import SourceResource, StoreResource

    server, _store, _ = hub
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    defs = dg.Definitions(assets=[raw_results], jobs=[ingest_job], schedules=[daily_refresh], resources={
        "store": StoreResource(path=str(tmp_path / "sched.duckdb")),
        "source": SourceResource(path="hf://datasets/team/evals")})
    job = defs.resolve_job_def(daily_refresh.job_name)
    with dg.instance_for_test() as instance:
        def tick(day: int) -> dict:
            context = dg.build_schedule_context(
                instance=instance, scheduled_execution_time=datetime.datetime(2026, 12, day, 3, tzinfo=datetime.UTC))
            (request,) = daily_refresh.evaluate_tick(context).run_requests
            result = job.execute_in_process(instance=instance, tags={**request.tags, "dagster/schedule_name":
                                                                     daily_refresh.name})
            assert result.success
            (mat,) = result.asset_materializations_for_node("raw_results")
            return {r["repo"]: r for r in mat.metadata["hub_fetched"].data}

        assert tick(1)["team/evals"]["files"] == 4
        server.calls.clear()
        assert tick(2) == {}  # unchanged: one metadata call, nothing fetched
        assert server.calls == ["GET /api/datasets/team/evals/revision/main"]
        pushed = files_from(write_v2_details(tmp_path / "n", model="org/n3"), "org__n3/")
        sha = server.repos["team/evals"].push(pushed)
        server.calls.clear()
        row = tick(3)["team/evals"]
        assert row["sha"] == sha and row["files"] == len(pushed) and row["bytes"] == sum(map(len, pushed.values()))
        assert _resolved(server) == set(pushed)
        assert len(instance.get_run_records(dg.RunsFilter(job_name="ingest"))) == 3


def test_a_real_leaderboard_v2_results_file_through_the_hub_with_wanted_tasks(hub, tmp_path: Path) -> None:
    """The Open LLM Leaderboard's own v2 results of pythia-1b (tests/fixtures/real_formats/README.md), in its
    details repo's layout (``open-llm-leaderboard/EleutherAI__pythia-1b-details``: ``<org>__<model>/results_*``),
    fetched for two wanted tasks: the aggregate results always come, so every v2 benchmark's score is stored
    as the leaderboard wrote it, and the repo's row says that neither task has a samples file here."""
    import json

    server, store, _ = hub
    real = Path(__file__).parent / "fixtures" / "real_formats" / "open_llm_leaderboard_v2_pythia1b"
    repo = Repo()
    repo.push(files_from(real / "EleutherAI__pythia-1b", "EleutherAI__pythia-1b/")
              | {"README.md": b"---\npretty_name: Evaluation run of EleutherAI/pythia-1b\n---\n"})
    server.repos["open-llm-leaderboard/EleutherAI__pythia-1b-details"] = repo
    (f,) = HubFetcher(store, tmp_path / "cache", tasks=["bbh", "mmlu_pro"]).refresh(
        parse_sources("hf://datasets/open-llm-leaderboard/*-details"))
    assert f.status == "fetched" and [Path(p).name for p in f.files] == [
        "results_2025-01-27T10-10-36.877664.json"]
    assert f.notes == [f"no file of wanted task {t!r} at this commit" for t in ("bbh", "mmlu_pro")]
    raw = json.loads(next((real / "EleutherAI__pythia-1b").glob("results_*.json")).read_text())["results"]
    stored = dict(store.query("SELECT benchmark, score FROM scores WHERE model = 'EleutherAI/pythia-1b'").rows())
    assert stored["mmlu_pro"] == raw["leaderboard_mmlu_pro"]["acc,none"]
    assert stored["bbh"] == raw["leaderboard_bbh"]["acc_norm,none"] and "leaderboard" not in stored
