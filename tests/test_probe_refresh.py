"""The second stage on the refresh's path (on by default: :func:`sparseeval.estimate.fitting.holding_for`).

On real mmlu (the shared Open LLM Leaderboard data), through a real Dagster materialization with the
defaults: the candidate carries a probe plan beside its anchors, and its frontier self-check, and so the
blocking ``frontier_misses_flagged`` check, measures the two stages together (each stronger model the
anchors place at the top answering its probe as ``next`` asks), the anchors-alone figures beside them in
the asset's metadata, DuckDB, MLflow, the predictor and its model card. On a board too small for a probe
nothing is guessed: the predictor is published without one, gated on exactly the anchors-alone self-check,
and every surface says why. Newcomers in the store are estimated by their own probe where they ran it.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from mlflow import MlflowClient

from pipelines.assets import candidate, champion, response_matrix
from pipelines.checks import publishing_checks
from pipelines.io_managers import MatrixIOManager
from pipelines.partitions import add_benchmarks
from pipelines.resources import SettingsResource, SourceResource, StoreResource, TrackingResource
from pipelines.run_all import summary_line
from sparseeval.core.settings import RefreshSettings
from sparseeval.data.access.matrix_store import MatrixStore
from sparseeval.data.store import Store
from sparseeval.data.synthetic import generate_leaderboard, write_leaderboard
from sparseeval.estimate.artifact import load_predictor
from sparseeval.estimate.predicting import predict
from sparseeval.estimate.probe import draw_order, plan_of
from sparseeval.estimate.selfcheck import SelfCheck
from sparseeval.estimate.splits import frontier_cut
from sparseeval.interfaces.cli import main as cli_main
from sparseeval.interfaces.model_card import model_card
from sparseeval.publish.publishing import published_path, score_anchor_only_models
from sparseeval.publish.refresh import FRONTIER_OVERRIDE
from sparseeval.publish.refresh_policy import refresh_benchmark
from sparseeval.publish.tracking import TrackingConfig, ensure_experiment
from tests.support import OPENLLM_DIR, needs_real_data

pytestmark = pytest.mark.slow

PROBE_N = RefreshSettings().probe_items


@needs_real_data
def test_the_pipeline_publishes_mmlu_gated_on_the_two_stages_with_the_defaults(tmp_path: Path) -> None:
    from pipelines.assets import raw_results

    resources = {
        "store": StoreResource(path=str(tmp_path / "sparseeval.duckdb")),
        "tracking": TrackingResource(data_dir=str(tmp_path)),
        "source": SourceResource(path=str(OPENLLM_DIR)),
        "settings": SettingsResource(predictor_dir=str(tmp_path / "predictors"), device="cpu"),
        "io_manager": MatrixIOManager(base_dir=str(tmp_path / "io")),
    }
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize([raw_results], resources=resources, instance=instance).success
    add_benchmarks(instance, ["mmlu"])
    run = dg.materialize([response_matrix, candidate, champion, *publishing_checks], partition_key="mmlu",
                         resources=resources, instance=instance, selection=[response_matrix, candidate, champion],
                         raise_on_error=False)
    meta = next({k: v.value for k, v in e.event_specific_data.materialization.metadata.items()}
                for e in run.get_asset_materialization_events()
                if e.event_specific_data.materialization.asset_key.to_user_string() == "candidate")
    check = next(e for e in run.get_asset_check_evaluations()
                 if e.asset_key.to_user_string() == "candidate" and e.check_name == "frontier_misses_flagged")
    figures = check.metadata["figures"].value
    assert "anchors_alone" in figures and "probed" in figures, figures  # measured with the second stage
    alone = figures["anchors_alone"]
    # the two stages together, the anchors alone beside them (the same inner fit)
    assert figures["probe_items"] == PROBE_N and figures["measured"] and figures["n"] >= 20
    assert figures["probed"] > 0.5 and figures["probe_items_mean"] >= PROBE_N, figures
    assert figures["mae"] < alone["mae"] or figures["silent_misses"] <= alone["silent_misses"], figures
    message = check.metadata["message"].value
    assert f"{100 * figures['probed']:.0f} % of them estimated by their probe" in message
    assert f"from the anchors alone {100 * alone['silent_misses']:.1f} % missed silently" in message
    assert check.passed == (figures["silent_misses"] <= RefreshSettings().frontier_silent_max)
    assert check.passed, message  # with the defaults, mmlu publishes on the shared data
    assert meta["probe_items"] == PROBE_N and meta["probed"] == pytest.approx(figures["probed"], abs=1e-4)
    assert meta["frontier_silent_misses"] == pytest.approx(figures["silent_misses"], abs=1e-4)
    assert meta["frontier_anchors_alone_silent_misses"] == pytest.approx(alone["silent_misses"], abs=1e-4)
    line = summary_line("mmlu", run, 1.0)  # make run's
    assert f"probe: {PROBE_N} items first; on the stronger fitting models {100 * figures['probed']:.0f} % were " \
           "estimated by their probe" in line
    assert f"{100 * figures['silent_misses']:.1f} % missed silently (from the anchors alone MAE " \
           f"{alone['mae']:.2f}, {100 * alone['silent_misses']:.1f} %)" in line
    assert ("to_publish_anyway" in check.metadata) == (FRONTIER_OVERRIDE in line) == (not check.passed)
    # the candidate as saved: its plan, and the figures it gated on, in DuckDB's view
    store = Store(tmp_path / "sparseeval.duckdb")
    row = store.anchor_set(int(meta["evaluated"]))
    assert row["frontier_silent"] == pytest.approx(figures["silent_misses"], abs=1e-4)
    view = store.query("SELECT probe_items, probed, frontier_silent, frontier_silent_anchors_alone "
                       "FROM frontier_selfcheck WHERE anchor_set_id = $i", {"i": row["anchor_set_id"]}).row(0)
    assert view == pytest.approx((PROBE_N, figures["probed"], figures["silent_misses"], alone["silent_misses"]),
                                 abs=1e-4)
    art = load_predictor(row["artifact_uri"])
    plan = plan_of(art.extra)
    assert plan is not None and plan.first == PROBE_N and not set(plan.items) & set(art.anchor_item_ids)
    assert plan.level_quantile == SettingsResource().probe_from and not plan.link.whole
    assert art.extra["frontier"]["anchors_alone"] == pytest.approx(alone, abs=1e-4)
    card = model_card(art)  # what the Hub page of this predictor says
    assert "Measured with the two stages" in card and "## Probe (the second stage)" in card
    assert f"silent_misses {alone['silent_misses']:.4g}" in card and "| anchors_alone |" not in card
    client = MlflowClient(TrackingConfig(data_dir=tmp_path).resolved_tracking_uri)
    [mlflow_run] = client.search_runs([ensure_experiment(TrackingConfig(data_dir=tmp_path), client)],
                                      "tags.`sparseeval.step` = 'candidate'")
    assert mlflow_run.data.metrics["frontier/anchors_alone/silent_misses"] == pytest.approx(alone["silent_misses"],
                                                                                           abs=1e-4)
    assert store.champion("mmlu") is not None


def test_a_board_too_small_for_a_probe_is_published_without_one_gated_on_the_anchors_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A subset pool (the score is over more items than those stored) where a fifth of every model's answers
    are missing: hardly any model answered 90 % of the items, too few to fit the line from the probe's items
    to the score, in the self-check's fit and in the candidate's. Refreshed by ``sparseeval refresh`` with
    the default probe, then by the library without one (``$SPARSEEVAL_PROBE_ITEMS=0``)."""
    lb = generate_leaderboard(n_families=30, models_per_family=10, benchmarks={"arc": 120}, seed=7, missing_frac=0.2)
    write_leaderboard(lb, tmp_path / "src")
    store = Store(tmp_path / "sparseeval.duckdb")
    store.ingest(tmp_path / "src")
    for name, value in {"DATA_DIR": str(tmp_path), "K": "8", "METHOD": "sparseeval-linear",
                        "FRONTIER_SILENT_MAX": "0.5", "JOINT_BENCHMARKS": "none"}.items():
        monkeypatch.setenv(f"SPARSEEVAL_{name}", value)
    monkeypatch.delenv("SPARSEEVAL_DB", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    capsys.readouterr()
    assert cli_main(["-q", "refresh", "--compare", "never", "--json", "-"]) == 0
    [record] = json.loads(capsys.readouterr().out)
    note = record["probe"]
    assert note.startswith("fitted without a probe: ") and note.endswith(
        "fitting models answered at least 90 % of the items; the line from a probe's items to the score needs at "
        "least 30"), note
    assert record["passed"] and record["published"]
    art = load_predictor(published_path(tmp_path / "predictors", "arc"))
    assert "probe" not in art.extra and art.extra["probe_note"] == note
    assert art.extra["frontier"]["probe_note"] == note and "anchors_alone" not in art.extra["frontier"]
    # exactly the self-check a refresh without the probe measures (its own fit key, its own measurement)
    plain = refresh_benchmark(MatrixStore.beside(store).update(store, "arc").matrix, store,
                              TrackingConfig(data_dir=tmp_path), tmp_path / "predictors",
                              RefreshSettings(k=8, method="sparseeval-linear", frontier_silent_max=0.5, probe_items=0),
                              challenger=False)
    assert plain.status == "decided" and plain.report.selfcheck.figures.probe_note is None
    columns = "frontier_mae, frontier_bias, frontier_coverage, frontier_flagged, frontier_silent, frontier_models"
    rows = store.query(f"SELECT {columns} FROM anchor_sets WHERE benchmark = 'arc' ORDER BY anchor_set_id").rows()
    assert len(rows) == 2 and rows[0] == rows[1] and rows[0][0] is not None


@needs_real_data
def test_newcomers_in_the_store_are_estimated_by_their_own_probe(tmp_path: Path) -> None:
    """A champion with a probe plan, published by the refresh from mmlu's weakest 90 %, scores the newcomers
    the store holds (models without a full score): one of the strongest 10 % that ran its anchors and the
    first batch of its own draw is estimated by the probe, in DuckDB as ``predict`` estimates it (stage
    ``probe``); the same model with only the anchors is told, in DuckDB's ``warnings``, to answer its probe;
    a model that ran probe items alone is not scored, and named with why."""
    scores = pl.read_parquet(OPENLLM_DIR / "scores.parquet").filter(pl.col("benchmark") == "mmlu")
    responses = pl.read_parquet(OPENLLM_DIR / "responses.parquet").filter(pl.col("benchmark") == "mmlu")
    _, beyond = frontier_cut(scores["score"].to_numpy(), 0.9)
    stronger = scores.filter(pl.Series(beyond))["model"]
    weakest = tmp_path / "weakest90"
    weakest.mkdir()
    keep = ~pl.col("model").is_in(stronger.implode())
    responses.filter(keep).write_parquet(weakest / "responses.parquet")
    scores.filter(keep).write_parquet(weakest / "scores.parquet")
    store = Store(tmp_path / "sparseeval.duckdb")
    store.ingest(weakest)
    result = refresh_benchmark(MatrixStore.beside(store).update(store, "mmlu").matrix, store,
                               TrackingConfig(data_dir=tmp_path), tmp_path / "predictors",
                               RefreshSettings(frontier_silent_max=1.0, device="cpu"), publish=True, challenger=False)
    assert result.published and result.models_scored == 0
    art = load_predictor(published_path(tmp_path / "predictors", "mmlu"))
    plan = plan_of(art.extra)
    assert plan is not None
    anchors = art.anchor_item_ids
    sheets = responses.filter(pl.col("model").is_in(stronger.implode())).rename({"correct": "score"})
    at_top = [p.model for p in predict(art, sheets.filter(pl.col("item_id").is_in(anchors))) if p.probe_next]
    model = at_top[0]
    mine = responses.filter(pl.col("model") == model)

    def first_batch(name: str) -> list[str]:  # the newcomer's own draw: its probe is drawn from its name
        return [plan.items[j] for j in draw_order(plan, name)[:plan.first_items]]

    newcomers = pl.concat([
        mine.filter(pl.col("item_id").is_in([*anchors, *first_batch("new/with-probe")]))
        .with_columns(model=pl.lit("new/with-probe")),
        mine.filter(pl.col("item_id").is_in(anchors)).with_columns(model=pl.lit("new/anchors-only")),
        mine.filter(pl.col("item_id").is_in(first_batch("new/probe-only"))).with_columns(model=pl.lit("new/probe-only"))])
    (tmp_path / "newcomers").mkdir()
    newcomers.select("model", "benchmark", "item_id", "correct").write_csv(tmp_path / "newcomers" / "new.csv")
    store.ingest(tmp_path / "newcomers")
    scored = score_anchor_only_models(store, "mmlu")
    assert scored.scored == 2 and list(scored.skipped) == ["new/probe-only"]
    assert scored.skipped["new/probe-only"].startswith("answered 0 of 20 anchors of 'mmlu'")
    rows = {r["model"]: r for r in store.query("SELECT * FROM predictions").to_dicts()}
    assert set(rows) == {"new/with-probe", "new/anchors-only"}
    expected = predict(art, newcomers.filter(pl.col("model") == "new/with-probe").rename({"correct": "score"}))[0]
    probed = rows["new/with-probe"]
    assert probed["stage"] == "probe" and probed["probe_items"] == plan.first_items and probed["probe_next"] >= 0
    assert (probed["predicted"], probed["lower"], probed["upper"]) == \
        pytest.approx((expected.predicted, expected.lower, expected.upper))
    assert probed["anchors_predicted"] == pytest.approx(expected.anchors_predicted)
    alone = rows["new/anchors-only"]
    assert alone["stage"] == "anchors" and alone["probe_next"] == plan.first_items
    assert alone["warnings"] and f"answer the first {plan.first_items} items of its probe" in alone["warnings"]
    assert abs(probed["predicted"] - float(scores.filter(pl.col("model") == model)["score"][0])) < \
        abs(alone["predicted"] - float(scores.filter(pl.col("model") == model)["score"][0])) + 0.05


def test_a_self_check_with_the_probe_falls_back_to_its_anchors_alone_figures() -> None:
    """A candidate whose own plan cannot be fitted is gated on the anchors-alone figures of the very
    self-check, never on those of a probe it does not carry, and its figures are not reused as that setup's."""
    measured = {"measured": True, "mae": 3.0, "bias": -1.0, "coverage": 0.8, "halfwidth": 2.0, "flagged": 0.5,
                "silent_misses": 0.1, "n": 40, "cut_score": 0.7, "quantile": 0.9, "setup": {"probe_items": 40},
                "probe_items": 40, "probe_target": 0.05, "probed": 0.9, "probe_items_mean": 52.0,
                "probe_items_max": 80,
                "anchors_alone": {"mae": 6.0, "bias": -6.0, "coverage": 0.4, "halfwidth": 2.0, "flagged": 0.1,
                                  "silent_misses": 0.5, "n": 40, "probed": 0.0, "probe_items_mean": 0.0,
                                  "probe_items_max": 0}}
    fallen = SelfCheck.from_json(measured, "arc").without_probe("fitted without a probe: too few").to_json()
    assert fallen == {"measured": True, "mae": 6.0, "bias": -6.0, "coverage": 0.4, "halfwidth": 2.0, "flagged": 0.1,
                      "silent_misses": 0.5, "n": 40, "cut_score": 0.7, "quantile": 0.9, "probed": 0.0,
                      "probe_items_mean": 0.0, "probe_items_max": 0, "probe_note": "fitted without a probe: too few"}
    assert "anchors_alone" not in fallen and "setup" not in fallen and "probe_items" not in fallen
    plain = {"measured": True, "n": 30, "silent_misses": 0.2, "setup": {"k": 8}}
    assert SelfCheck.from_json(plain, "arc").without_probe("why").to_json() == {**plain, "probe_note": "why"}
    # the one JSON form reads back what it wrote, a joint predictor's too
    assert SelfCheck.from_json(measured, "arc").to_json() == measured
    joint = {"outputs": {"arc": {"measured": False, "n": 6, "quantile": 0.9, "note": "too few", "cut_on": "mean"},
                         "mean": {**plain, "cut_on": "mean"}}, "own_cut": {"arc": {**plain, "cut_on": "arc"}},
             "setup": {"k": 8}, "measured_on": "v1", "matrix_models": 300}
    assert SelfCheck.from_json(joint, "sparseeval-joint").to_json() == joint
