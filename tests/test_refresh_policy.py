"""The refresh policy as one library operation, called without Dagster: ``sparseeval refresh`` on a real
DuckDB store and MLflow store, and :func:`refresh_benchmark` directly.

What a refresh decides is the pipeline's contract (tests/test_pipeline.py covers it through Dagster);
here: the CLI path publishes what passes (DuckDB, registry alias and published folder agree), skips a
decided fit key, appends new models to the stored matrix and refits the champion's anchors, defers the
comparison when few models are new; a changed check setting on unchanged data reuses the stored fits
(only calibration and decision are redone) and gives the same predictor.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from mlflow import MlflowClient

from sparseeval.core.settings import RefreshSettings
from sparseeval.data.access.matrix_store import MatrixStore
from sparseeval.data.store import Store
from sparseeval.data.synthetic import generate_leaderboard, write_leaderboard
from sparseeval.estimate.artifact import load_predictor
from sparseeval.estimate.evaluation import ProtocolConfig, split_for_seed
from sparseeval.estimate.splits import frontier_cut
from sparseeval.interfaces.cli import main as cli_main
from sparseeval.publish.publishing import audit, published_path
from sparseeval.publish.refresh_policy import refresh_benchmark
from sparseeval.publish.tracking import TrackingConfig, ensure_experiment
from sparseeval.publish.tracking_registry import registered_versions

pytestmark = pytest.mark.slow


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    for name, value in {"SPARSEEVAL_DATA_DIR": str(tmp_path), "SPARSEEVAL_METHOD": "sparseeval-linear",
                        "SPARSEEVAL_K": "6", "SPARSEEVAL_COMPARE_METHODS": "random-linear,sparseeval-linear",
                        "SPARSEEVAL_COMPARE_KS": "6", "SPARSEEVAL_COMPARE_SEEDS": "1",
                        "SPARSEEVAL_JOINT_BENCHMARKS": "none"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SPARSEEVAL_DB", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    lb = generate_leaderboard(n_families=12, models_per_family=8, benchmarks={"arc": 120}, seed=4)
    write_leaderboard(lb, tmp_path / "src" / "first")
    db = tmp_path / "sparseeval.duckdb"
    assert cli_main(["-q", "ingest", str(tmp_path / "src" / "first"), "--db", str(db)]) == 0
    return {"root": tmp_path, "db": db, "tracking": TrackingConfig(data_dir=tmp_path)}


def test_cli_refresh_publishes_skips_appends_and_defers_the_comparison(world: dict, capsys) -> None:
    root, db, tracking = world["root"], world["db"], world["tracking"]
    assert cli_main(["refresh", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "arc: matrix rebuilt (no stored matrix)" in out and "published #1 as champion" in out
    assert "never compared" not in out and "arc: comparison: best method" in out  # first comparison runs
    store = Store(db)
    assert audit(store, tracking, root / "predictors", "arc") == []
    # again on unchanged data: nothing refit, nothing registered, the comparison up to date
    assert cli_main(["refresh", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "matrix unchanged" in out and "already decided" in out and "up to date: compared already" in out
    assert len(registered_versions(tracking, benchmark="arc")) == 1
    # a few new models (4 % of the benchmark): appended, champion anchors refit and published, comparison deferred
    extra = generate_leaderboard(n_families=1, models_per_family=4, benchmarks={"arc": 120}, seed=5)
    write_leaderboard(_renamed(extra, "-new"), root / "src" / "second")
    assert cli_main(["-q", "ingest", str(root / "src" / "second"), "--db", str(db)]) == 0
    first_items = store.champion("arc")["items"]
    assert cli_main(["refresh", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "matrix appended (4 new models onto 96)" in out, out
    assert "deferred to the weekly comparison schedule: 4 new models" in out
    assert store.champion("arc")["items"] == first_items  # the anchors users already ran stay valid
    assert store.champion("arc")["origin"] == "refit"
    assert audit(store, tracking, root / "predictors", "arc") == []
    assert MatrixStore.beside(store).latest("arc")[1]["how"] == "appended"


def test_a_changed_check_setting_reuses_the_stored_fits(world: dict) -> None:
    root, db, tracking = world["root"], world["db"], world["tracking"]
    store = Store(db)
    matrix = MatrixStore.beside(store).update(store, "arc").matrix
    settings = RefreshSettings(k=6, method="sparseeval-linear")
    first = refresh_benchmark(matrix, store, tracking, root / "predictors", settings, publish=True)
    assert first.status == "decided" and first.report.reused_fits == () and first.published
    again = refresh_benchmark(matrix, store, tracking, root / "predictors", settings, publish=True)
    assert again.status == "skipped"
    looser = RefreshSettings(k=6, method="sparseeval-linear", coverage_tolerance=0.2)  # a new fit key, the same fits
    third = refresh_benchmark(matrix, store, tracking, root / "predictors", looser, publish=True)
    assert third.status == "decided" and third.fit_key != first.fit_key
    assert third.report.origin == "refit" and third.report.reused_fits == ()  # no refit stored yet
    rival = third.second  # selected after the refit's publication, on the same data: reused
    assert rival.status == "decided" and rival.report.reused_fits == ("selected",), rival
    assert third.report.anchors == first.report.anchors  # the champion's anchors kept
    # the same again under another tolerance: the refit is stored too, nothing is fitted, and it reproduces the
    # published champion exactly (the same predictor): nothing to publish, no new registry version
    versions = len(registered_versions(tracking, benchmark="arc"))
    fourth = refresh_benchmark(matrix, store, tracking, root / "predictors",
                               RefreshSettings(k=6, method="sparseeval-linear", coverage_tolerance=0.3), publish=True)
    assert fourth.report.reused_fits == ("refit",) and "reproduced champion" in fourth.decision
    assert not fourth.published and len(registered_versions(tracking, benchmark="arc")) == versions
    assert audit(store, tracking, root / "predictors", "arc") == []


def test_the_predictor_published_from_an_appended_matrix_is_the_full_rebuilds(tmp_path: Path, world: dict) -> None:
    """Two stores with the same history: one appends the day's new models to its stored matrix, the other
    rebuilds it from every row. The refit champion each publishes is the same predictor: the same anchors
    and the same content hash (the fit is deterministic at a given thread count)."""
    root, db = world["root"], world["db"]
    extra = generate_leaderboard(n_families=1, models_per_family=4, benchmarks={"arc": 120}, seed=5)
    write_leaderboard(_renamed(extra, "-new"), root / "src" / "second")
    settings = RefreshSettings(k=6, method="sparseeval-linear")
    published = {}
    for name, incremental in (("appended", True), ("rebuilt", False)):
        home = tmp_path / name
        store = Store(home / "sparseeval.duckdb")
        tracking = TrackingConfig(data_dir=home)
        matrices = MatrixStore.beside(store)
        for day in ("first", "second"):
            store.ingest(root / "src" / day)
            update = matrices.update(store, "arc", incremental=incremental)
            result = refresh_benchmark(update.matrix, store, tracking, home / "predictors", settings, publish=True,
                                       challenger=False)
            assert result.published, result.decision
        assert update.how == name, update.describe()
        champion = store.champion("arc")
        folder = load_predictor(published_path(home / "predictors", "arc"))  # what predict --benchmark reads
        published[name] = (champion["origin"], champion["items"], folder.content_hash)
    assert published["appended"] == published["rebuilt"] and published["appended"][0] == "refit"
    assert db.is_file()  # the fixture's own store is left alone


def _renamed(lb, suffix: str):
    """The same synthetic leaderboard under other model names (generated names repeat across seeds)."""
    from dataclasses import replace

    rename = pl.col("model") + suffix
    return replace(lb, responses=lb.responses.with_columns(rename), scores=lb.scores.with_columns(rename),
                   models=lb.models.with_columns(rename, base_model=pl.col("base_model") + suffix))


def test_a_refit_that_fails_its_checks_can_still_be_replaced_by_a_fresh_selection(world: dict) -> None:
    """The champion's anchors turn to noise in a corrected re-run: their refit fails the checks, so the
    fresh selection competes at once (not after a publication that never comes) and, clearly better and
    the champion old enough, replaces it; DuckDB, registry and folder agree."""
    root, db, tracking = world["root"], world["db"], world["tracking"]
    store = Store(db)
    matrices = MatrixStore.beside(store)
    settings = RefreshSettings(k=6, method="sparseeval-linear", challenger_min_days=0.0)
    refresh_benchmark(matrices.update(store, "arc").matrix, store, tracking, root / "predictors", settings,
                      publish=True)
    anchors = store.champion("arc")["items"]
    first = root / "src" / "first" / "responses.parquet"
    frame = pl.read_parquet(first)
    noise = (pl.col("model").hash(7) + pl.col("item_id").hash(11)) % 2
    frame.with_columns(correct=pl.when(pl.col("item_id").is_in(anchors)).then(noise).otherwise(pl.col("correct"))
                       .cast(frame.schema["correct"])).write_parquet(first)
    assert cli_main(["-q", "ingest", str(root / "src" / "first"), "--db", str(db)]) == 0
    update = matrices.update(store, "arc")
    assert update.how == "rebuilt" and "replaced" in update.reason
    result = refresh_benchmark(update.matrix, store, tracking, root / "predictors", settings, publish=True)
    assert "refit fails its checks" in result.decision and "beats the champion's refit" in result.decision
    champion = store.champion("arc")
    assert champion["origin"] == "selected" and not set(champion["items"]) & set(anchors)
    assert audit(store, tracking, root / "predictors", "arc") == []


def test_the_frontier_selfcheck_stands_until_the_models_grow_by_a_tenth(world: dict) -> None:
    """The frontier self-check costs a second selection: a refresh whose benchmark grew by less than a
    tenth since it was measured reuses it (and says so); more growth, or another setup, measures it anew."""
    root, store, tracking = world["root"], Store(world["db"]), world["tracking"]
    matrices = MatrixStore.beside(store)

    def refresh(settings: RefreshSettings) -> dict:
        update = matrices.update(store, "arc")
        result = refresh_benchmark(update.matrix, store, tracking, root / "predictors", settings, publish=True,
                                   challenger=False)
        assert result.status == "decided", result.decision
        params = store.query("SELECT params FROM anchor_sets WHERE anchor_set_id = $i", {"i": result.proposed}).item()
        return json.loads(params)["frontier"]

    def arrive(n: int, seed: int, suffix: str) -> None:
        extra = generate_leaderboard(n_families=1, models_per_family=n, benchmarks={"arc": 120}, seed=seed)
        write_leaderboard(_renamed(extra, suffix), root / "src" / suffix)
        store.ingest(root / "src" / suffix)

    settings = RefreshSettings(k=6, method="sparseeval-linear")
    first = refresh(settings)
    assert "reused" not in first and first["matrix_models"] == 96 and first["setup"]["method"] == "sparseeval-linear"
    # measured on the candidate's fitting models only: its held-out test models never reach the self-check
    matrix = matrices.update(store, "arc").matrix
    split = split_for_seed(matrix, settings.seed, ProtocolConfig.of(settings))
    fitting = np.concatenate([split.train, split.val])
    assert len(fitting) < len(matrix.models)
    assert first["n"] == int(frontier_cut(matrix.scores[fitting], 0.9)[1].sum())
    assert f"of {len(fitting)} fitting models" in first["note"]  # too few stronger ones here to measure
    arrive(4, 5, "-a")  # 4 % new: the measurement stands
    second = refresh(settings)
    assert "4.0 % new since" in second["reused"] and second["measured_on"] == first["measured_on"]
    arrive(8, 6, "-b")  # 12 of 108 new since it was measured: measured again on today's data
    third = refresh(settings)
    assert "reused" not in third and third["matrix_models"] == 108 and third["measured_on"] != first["measured_on"]
    other = refresh(RefreshSettings(k=5, method="sparseeval-linear"))  # another K: its own measurement
    assert "reused" not in other and other["setup"]["k"] == 5


def test_the_frontier_selfcheck_gates_publication_and_reaches_duckdb_mlflow_and_the_predictor(
        tmp_path: Path) -> None:
    """Issue 29 on the path the pipeline calls, the anchors alone (``probe_items=0``; the second stage's own
    gating: tests/test_probe_refresh.py): a board large enough for the self-check to measure (over
    20 of the candidate's fitting models above their 90th percentile). With a bar the candidate misses
    (no silent miss allowed) it is rejected, the check's message carrying the numbers, and nothing is
    published; at a bar it meets, the same fit (reused) is published, and its frontier figures are the
    same in the result the assets show, DuckDB's columns and analysts' view, MLflow and predictor.json."""
    lb = generate_leaderboard(n_families=30, models_per_family=10, benchmarks={"arc": 80}, seed=7)
    write_leaderboard(lb, tmp_path / "src")
    store = Store(tmp_path / "sparseeval.duckdb")
    store.ingest(tmp_path / "src")
    matrix = MatrixStore.beside(store).update(store, "arc").matrix
    tracking = TrackingConfig(data_dir=tmp_path)

    def refresh(silent_max: float):
        return refresh_benchmark(matrix, store, tracking, tmp_path / "predictors",
                                 RefreshSettings(k=8, method="sparseeval-linear", frontier_silent_max=silent_max,
                                             probe_items=0), publish=True, challenger=False)

    strict = refresh(0.0)
    check = {c.name: c for c in strict.checks}["frontier_misses_flagged"]
    figures = check.metadata["figures"]
    assert figures["measured"] and figures["n"] >= 20 and figures["silent_misses"] > 0, figures
    assert not check.passed and store.champion("arc") is None
    assert "NOT published: failed frontier_misses_flagged (no champion yet: nothing is served)" in strict.decision
    assert f"{100 * figures['silent_misses']:.1f} % of {figures['n']} stronger models missed silently (max 0 %)" \
        in check.metadata["message"]
    assert not strict.published and not (tmp_path / "predictors" / "arc").exists()

    lenient = refresh(0.5)
    assert lenient.passed and lenient.published and store.champion("arc")["anchor_set_id"] == lenient.proposed
    assert lenient.report.reused_fits == ("selected",)  # only the bar changed: the fit is not redone
    expected = {name: round(float(figures[name]), 4) for name in ("mae", "bias", "coverage", "flagged",
                                                                  "silent_misses")}
    assert {name: lenient.metadata()[f"frontier_{name}"] for name in expected} == expected  # the asset's metadata
    view = store.query("SELECT * FROM frontier_selfcheck WHERE anchor_set_id = $i", {"i": lenient.proposed})
    rows = view.to_dicts()
    assert len(rows) == 1, "the published anchor set's frontier_* columns are empty: the view holds no row"
    row = rows[0]
    assert row["frontier_check_passed"] is True and row["frontier_models"] == figures["n"]
    # (the check's figures are rounded to 4 places for its message)
    assert (row["frontier_silent"], row["frontier_mae"]) == pytest.approx((figures["silent_misses"], figures["mae"]),
                                                                          abs=1e-4)
    client = MlflowClient(tracking.resolved_tracking_uri)
    runs = client.search_runs([ensure_experiment(tracking, client)], "tags.`sparseeval.step` = 'candidate'")
    silent = [r.data.metrics.get("frontier/silent_misses") for r in runs]  # both candidate runs: rejected, published
    assert silent == pytest.approx([figures["silent_misses"]] * 2, abs=1e-4)
    published = load_predictor(published_path(tmp_path / "predictors", "arc"))
    assert "frontier" in published.extra, "the published predictor.json carries no frontier figures"
    assert published.extra["frontier"]["silent_misses"] == pytest.approx(figures["silent_misses"], abs=1e-4)
    assert published.extra["frontier"]["n"] == figures["n"]
    # SPARSEEVAL_FRONTIER_QUANTILE: a lower cut measures anew, on twice the stronger models
    farther = refresh_benchmark(matrix, store, tracking, tmp_path / "predictors",
                                RefreshSettings(k=8, method="sparseeval-linear", frontier_silent_max=0.5,
                                            frontier_quantile=0.8, probe_items=0), publish=True, challenger=False)
    wider = {c.name: c for c in farther.checks}["frontier_misses_flagged"].metadata["figures"]
    split = split_for_seed(matrix, 0, ProtocolConfig.of(RefreshSettings()))
    fitting = matrix.scores[np.concatenate([split.train, split.val])]
    assert figures["n"] == int(frontier_cut(fitting, 0.9)[1].sum())
    assert wider["quantile"] == 0.8 and wider["n"] == int(frontier_cut(fitting, 0.8)[1].sum()) > figures["n"]


def test_cli_refresh_refused_by_its_frontier_check_says_how_to_publish_knowingly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A candidate the frontier check refuses (its anchors alone: no probe): ``sparseeval refresh`` exits 1 and
    prints how to publish it knowingly (the check's ``to_publish_anyway``); doing what it says publishes it."""
    lb = generate_leaderboard(n_families=30, models_per_family=10, benchmarks={"arc": 80}, seed=7)
    write_leaderboard(lb, tmp_path / "src")
    db = tmp_path / "sparseeval.duckdb"
    for name, value in {"DATA_DIR": str(tmp_path), "K": "8", "METHOD": "sparseeval-linear",
                        "JOINT_BENCHMARKS": "none", "FRONTIER_SILENT_MAX": "0", "PROBE_ITEMS": "0"}.items():
        monkeypatch.setenv(f"SPARSEEVAL_{name}", value)
    monkeypatch.delenv("SPARSEEVAL_DB", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert cli_main(["-q", "ingest", str(tmp_path / "src"), "--db", str(db)]) == 0
    capsys.readouterr()
    assert cli_main(["refresh", "--db", str(db), "--compare", "never"]) == 1
    out = capsys.readouterr().out
    assert "NOT published: failed frontier_misses_flagged" in out, out
    assert "arc: to publish it knowingly, raise SPARSEEVAL_FRONTIER_SILENT_MAX above its silent share" in out
    monkeypatch.setenv("SPARSEEVAL_FRONTIER_SILENT_MAX", "1")
    assert cli_main(["refresh", "--db", str(db), "--compare", "never"]) == 0
    out = capsys.readouterr().out
    assert "published #" in out and "to publish it knowingly" not in out, out
