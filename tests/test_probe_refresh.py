"""The probe on the refresh's path (``$SPARSEEVAL_PROBE_ITEMS``, :mod:`sparseeval.refresh_probe`).

On real mmlu (the shared Open LLM Leaderboard data), through a real Dagster materialization: the
candidate carries a probe of the asked size beside its anchors, and its frontier self-check, and so
the blocking ``frontier_misses_flagged`` check, is measured with the probe's answers, the anchors-alone
figures beside them in the asset's metadata, DuckDB, MLflow and the predictor. On a board too small
for a probe nothing is guessed: the predictor is published without one, gated on exactly the
anchors-alone self-check, and every surface says why.
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
from sparseeval.artifact import load_predictor
from sparseeval.cli import main as cli_main
from sparseeval.matrix_store import MatrixStore
from sparseeval.model_card import model_card
from sparseeval.probe import PROBE_REASON
from sparseeval.publishing import published_path, score_anchor_only_models
from sparseeval.refresh import FRONTIER_OVERRIDE
from sparseeval.refresh_policy import FitSettings, refresh_benchmark
from sparseeval.refresh_probe import PROBE_KEYS, anchors_alone
from sparseeval.scoring import predict
from sparseeval.splits import frontier_cut
from sparseeval.store import Store
from sparseeval.synthetic import generate_leaderboard, write_leaderboard
from sparseeval.tracking import TrackingConfig, ensure_experiment
from tests.support import OPENLLM_DIR, needs_real_data

pytestmark = pytest.mark.slow

PROBE_N = 40


@needs_real_data
def test_the_pipeline_fits_mmlu_a_probe_and_gates_its_frontier_check_on_the_probes_answers(tmp_path: Path) -> None:
    from pipelines.assets import raw_results

    resources = {
        "store": StoreResource(path=str(tmp_path / "sparseeval.duckdb")),
        "tracking": TrackingResource(data_dir=str(tmp_path)),
        "source": SourceResource(path=str(OPENLLM_DIR)),
        "settings": SettingsResource(probe_items=PROBE_N, predictor_dir=str(tmp_path / "predictors"), device="cpu"),
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
    alone = figures["anchors_alone"]
    # measured with the probe's answers, the anchors alone beside them (the same inner fit)
    assert figures["probe_items"] == PROBE_N and figures["measured"] and figures["n"] >= 20
    assert figures["probe_flagged"] > 0 and figures["silent_misses"] < alone["silent_misses"], figures
    message = check.metadata["message"].value
    assert f"with the answers to the probe's {PROBE_N} items (from the anchors alone " \
           f"{100 * alone['silent_misses']:.1f} % missed silently" in message
    assert check.passed == (figures["silent_misses"] <= FitSettings().frontier_silent_max)
    assert meta["probe_items"] == PROBE_N
    assert meta["frontier_silent_misses"] == pytest.approx(figures["silent_misses"], abs=1e-4)
    assert meta["frontier_anchors_alone_silent_misses"] == pytest.approx(alone["silent_misses"], abs=1e-4)
    assert f"probe: {PROBE_N} items; the frontier self-check is measured with their answers: " \
           f"{100 * figures['silent_misses']:.1f} % of the stronger models missed silently (from the anchors alone " \
           f"{100 * alone['silent_misses']:.1f} %)" in summary_line("mmlu", run, 1.0)  # make run's
    # a refused candidate says how to publish it knowingly, in the check and in make run's summary
    assert ("to_publish_anyway" in check.metadata) == (FRONTIER_OVERRIDE in summary_line("mmlu", run, 1.0)) \
        == (not check.passed)
    # the candidate as saved (published or not, its version is kept): its probe, and the figures it gated on
    store = Store(tmp_path / "sparseeval.duckdb")
    row = store.anchor_set(int(meta["evaluated"]))
    assert row["frontier_silent"] == pytest.approx(figures["silent_misses"], abs=1e-4)
    view = store.query("SELECT probe_items, frontier_silent, frontier_silent_anchors_alone FROM frontier_selfcheck "
                       "WHERE anchor_set_id = $i", {"i": row["anchor_set_id"]}).row(0)
    assert view == pytest.approx((PROBE_N, figures["silent_misses"], alone["silent_misses"]), abs=1e-4)
    art = load_predictor(row["artifact_uri"])
    probe = art.extra["probe"]
    assert len(probe["item_ids"]) == PROBE_N and not set(probe["item_ids"]) & set(art.anchor_item_ids)
    assert probe["level_quantile"] == SettingsResource().probe_from and probe["selfcheck"] == art.extra["frontier"]
    assert art.extra["frontier"]["anchors_alone"] == pytest.approx(alone, abs=1e-4)
    card = model_card(art)  # what the Hub page of this predictor says
    assert f"Measured with the answers to the probe's {PROBE_N} items" in card and "## Probe" in card
    assert f"silent_misses {alone['silent_misses']:.4g}" in card and "| anchors_alone |" not in card
    client = MlflowClient(TrackingConfig(data_dir=tmp_path).resolved_tracking_uri)
    [mlflow_run] = client.search_runs([ensure_experiment(TrackingConfig(data_dir=tmp_path), client)],
                                      "tags.`sparseeval.step` = 'candidate'")
    assert mlflow_run.data.metrics["frontier/anchors_alone/silent_misses"] == pytest.approx(alone["silent_misses"],
                                                                                           abs=1e-4)
    assert (store.champion("mmlu") is not None) == check.passed


def test_a_board_too_small_for_a_probe_is_published_without_one_gated_on_the_anchors_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """300 models: enough stronger fitting models for the self-check (>= 20), too few calibration models
    at the probe level for a threshold (< 30) in the self-check's fit and in the candidate's. Refreshed by
    ``sparseeval refresh`` with ``$SPARSEEVAL_PROBE_ITEMS`` set, then by the library without a probe."""
    lb = generate_leaderboard(n_families=30, models_per_family=10, benchmarks={"arc": 80}, seed=7)
    write_leaderboard(lb, tmp_path / "src")
    store = Store(tmp_path / "sparseeval.duckdb")
    store.ingest(tmp_path / "src")
    for name, value in {"DATA_DIR": str(tmp_path), "K": "8", "METHOD": "sparseeval-linear", "PROBE_ITEMS": "20",
                        "FRONTIER_SILENT_MAX": "0.5", "JOINT_BENCHMARKS": "none"}.items():
        monkeypatch.setenv(f"SPARSEEVAL_{name}", value)
    monkeypatch.delenv("SPARSEEVAL_DB", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    capsys.readouterr()
    assert cli_main(["-q", "refresh", "--compare", "never", "--json", "-"]) == 0
    [record] = json.loads(capsys.readouterr().out)
    note = record["probe"]
    assert note.startswith("fitted without a probe: ") and "calibration models at the probe level" in note, note
    assert "; its frontier self-check measured from the anchors alone: no probe could be fitted on the self-check's " \
           "fitting models" in note
    assert record["passed"] and record["published"]
    art = load_predictor(published_path(tmp_path / "predictors", "arc"))
    assert "probe" not in art.extra and art.extra["frontier"]["probe_note"] == note
    assert "anchors_alone" not in art.extra["frontier"]
    # exactly the self-check a refresh without the probe measures (its own fit key, its own measurement)
    plain = refresh_benchmark(MatrixStore.beside(store).update(store, "arc").matrix, store,
                              TrackingConfig(data_dir=tmp_path), tmp_path / "predictors",
                              FitSettings(k=8, method="sparseeval-linear", frontier_silent_max=0.5), challenger=False)
    assert plain.status == "decided" and "probe_note" not in plain.figures
    columns = "frontier_mae, frontier_bias, frontier_coverage, frontier_flagged, frontier_silent, frontier_models"
    rows = store.query(f"SELECT {columns} FROM anchor_sets WHERE benchmark = 'arc' ORDER BY anchor_set_id").rows()
    assert len(rows) == 2 and rows[0] == rows[1] and rows[0][0] is not None


@needs_real_data
def test_newcomers_in_the_store_are_checked_by_the_champions_probe(tmp_path: Path) -> None:
    """A champion with a probe, published by the refresh from mmlu's weakest 90 %, scores the newcomers the
    store holds (models without a full score) from their anchors *and* probe items: one of the strongest
    10 % that ran both is flagged by the probe, in DuckDB as ``predict`` flags it; the same model with
    only the anchors is told, in DuckDB's ``warnings``, to answer the probe; a model that ran the probe
    alone is not scored, and named with why."""
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
                               FitSettings(probe_items=PROBE_N, frontier_silent_max=1.0, device="cpu"),
                               publish=True, challenger=False)
    assert result.published and result.models_scored == 0
    art = load_predictor(published_path(tmp_path / "predictors", "mmlu"))
    anchors, probe = art.anchor_item_ids, art.extra["probe"]["item_ids"]
    sheets = responses.filter(pl.col("model").is_in(stronger.implode())).rename({"correct": "score"})
    flagged = [p.model for p in predict(art, sheets.filter(pl.col("item_id").is_in([*anchors, *probe])))
               if any(r.startswith(PROBE_REASON) for r in p.ood_reasons)]
    assert flagged, "the probe flags none of mmlu's strongest 10 %"
    model = flagged[0]
    mine = sheets.filter(pl.col("model") == model).rename({"score": "correct"})
    newcomers = pl.concat([
        mine.filter(pl.col("item_id").is_in([*anchors, *probe])).with_columns(model=pl.lit("new/with-probe")),
        mine.filter(pl.col("item_id").is_in(anchors)).with_columns(model=pl.lit("new/anchors-only")),
        mine.filter(pl.col("item_id").is_in(probe)).with_columns(model=pl.lit("new/probe-only"))])
    (tmp_path / "newcomers").mkdir()
    newcomers.select("model", "benchmark", "item_id", "correct").write_csv(tmp_path / "newcomers" / "new.csv")
    store.ingest(tmp_path / "newcomers")
    scored = score_anchor_only_models(store, "mmlu")
    assert scored.scored == 2 and list(scored.skipped) == ["new/probe-only"]
    assert scored.skipped["new/probe-only"].startswith("answered 0 of 20 anchors of 'mmlu'")
    rows = {r["model"]: r for r in store.query("SELECT * FROM predictions").to_dicts()}
    assert set(rows) == {"new/with-probe", "new/anchors-only"}
    expected = predict(art, newcomers.filter(pl.col("model") == "new/with-probe").rename({"correct": "score"}))[0]
    checked = rows["new/with-probe"]
    assert checked["ood"] and any(r.startswith(PROBE_REASON) for r in checked["ood_reason"].split(" | "))
    assert (checked["predicted"], checked["upper"]) == pytest.approx((expected.predicted, expected.upper))
    alone = rows["new/anchors-only"]
    assert f"answer the probe's {PROBE_N} items too" in alone["warnings"]
    assert PROBE_REASON not in (alone["ood_reason"] or "") and alone["predicted"] < checked["predicted"]


def test_a_self_check_with_the_probe_falls_back_to_its_anchors_alone_figures() -> None:
    """A candidate whose own probe cannot be fitted is gated on the anchors-alone figures of the very
    self-check, never on those of a probe it does not carry, and its figures are not reused as that setup's."""
    measured = {"measured": True, "mae": 3.0, "bias": -1.0, "coverage": 0.8, "halfwidth": 2.0, "flagged": 0.5,
                "silent_misses": 0.1, "n": 40, "cut_score": 0.7, "quantile": 0.9, "setup": {"probe_items": 40},
                "probe_items": 40, "probe_from": 0.8, "probe_flagged": 0.3,
                "anchors_alone": {"mae": 6.0, "bias": -6.0, "coverage": 0.4, "halfwidth": 2.0, "flagged": 0.1,
                                  "silent_misses": 0.5, "n": 40, "probe_flagged": 0.0}}
    fallen = anchors_alone(measured, "fitted without a probe: too few")
    assert fallen == {"measured": True, "mae": 6.0, "bias": -6.0, "coverage": 0.4, "halfwidth": 2.0, "flagged": 0.1,
                      "silent_misses": 0.5, "n": 40, "cut_score": 0.7, "quantile": 0.9,
                      "probe_note": "fitted without a probe: too few"}
    assert not set(fallen) & set(PROBE_KEYS) and "setup" not in fallen
    plain = {"measured": True, "silent_misses": 0.2}
    assert anchors_alone(plain, "why") is plain  # measured without a probe: as it is
