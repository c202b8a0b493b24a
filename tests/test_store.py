"""The DuckDB store on real files: ingest counts, idempotence, views, and pipeline results round trips."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest

from sparseeval.data.lifecycle import IllegalTransitionError
from sparseeval.data.matrix import build_matrix
from sparseeval.data.readers.long import read_long
from sparseeval.data.store import TABLES, Store
from tests.support import SMALL_BENCHMARKS, SMALL_ITEMS, SMALL_MODELS, make_long_frames

N_SMALL = SMALL_MODELS * len(SMALL_BENCHMARKS) * SMALL_ITEMS


def test_ingest_small_folder_counts_and_reingest_is_skipped(small_long_dir: Path, tmp_db: Path,
                                                            db_fingerprint) -> None:
    store = Store(tmp_db)
    report = store.ingest(small_long_dir)
    assert [f.status for f in report.files] == ["ok"]
    assert report.files[0].n_responses == N_SMALL
    counts = store.table_counts()
    assert counts["responses"] == N_SMALL
    assert counts["scores"] == SMALL_MODELS * len(SMALL_BENCHMARKS)
    assert counts["models"] == SMALL_MODELS
    assert counts["items"] == SMALL_ITEMS * len(SMALL_BENCHMARKS)
    assert counts["ingests"] == 1
    assert store.snapshot_path.exists()
    before = db_fingerprint(tmp_db)

    again = store.ingest(small_long_dir)
    assert [f.status for f in again.files] == ["skipped"]
    assert "already ingested" in again.files[0].reason
    assert store.table_counts() == counts  # not even an ingests row
    assert db_fingerprint(tmp_db) == before


def test_same_rows_in_another_file_change_nothing(tmp_path: Path, tmp_db: Path, db_fingerprint) -> None:
    responses, _ = make_long_frames(seed=1)
    first = tmp_path / "a.parquet"
    responses.write_parquet(first)
    second = tmp_path / "b.csv"  # other format, other order, other spelling of the benchmark
    responses.reverse().with_columns(pl.col("benchmark").replace({"arc": "arc_challenge"})).write_csv(second)
    store = Store(tmp_db)
    assert store.ingest(first).files[0].n_responses == N_SMALL
    before = db_fingerprint(tmp_db)
    report = store.ingest(second)
    assert report.files[0].status == "ok"
    assert report.files[0].n_responses == 0
    assert db_fingerprint(tmp_db) == before
    assert store.benchmarks() == sorted(SMALL_BENCHMARKS)


def test_stored_values_and_metadata_match_the_source(small_long_dir: Path, tmp_db: Path) -> None:
    store = Store(tmp_db)
    store.ingest(small_long_dir)
    responses, scores = store.load_long("arc")
    source = pl.read_parquet(small_long_dir / "responses.parquet").filter(pl.col("benchmark") == "arc")
    joined = responses.join(source, on=["model", "benchmark", "item_id"], how="full", coalesce=True)
    assert joined.height == source.height == responses.height
    assert (joined.get_column("score") == joined.get_column("correct").cast(pl.Float64)).all()
    assert scores.height == SMALL_MODELS
    meta = store.model_metadata()
    assert meta.height == SMALL_MODELS
    assert set(meta.get_column("family")) == {"org0", "org1", "org2"}
    assert meta.get_column("submitted_at").null_count() == 0
    assert meta.filter(pl.col("model") == "org0/model-0").get_column("submitted_at").dt.day().item() == 1
    matrix = build_matrix(responses, scores, "arc")
    assert matrix.shape == (SMALL_MODELS, SMALL_ITEMS)
    assert matrix.density == 1.0


def test_real_openllm_sample(openllm_dir: Path, tmp_path: Path, tmp_db: Path) -> None:
    """A 300-model sample of the real data: counts and the coverage view agree with Polars."""
    sample = tmp_path / "openllm_sample"
    sample.mkdir()
    responses = pl.read_parquet(openllm_dir / "responses.parquet")
    models = responses.get_column("model").unique().sort().sample(300, seed=7)
    responses = responses.filter(pl.col("model").is_in(models.implode()))
    scores = pl.read_parquet(openllm_dir / "scores.parquet").filter(pl.col("model").is_in(models.implode()))
    responses.write_parquet(sample / "responses.parquet")
    scores.write_parquet(sample / "scores.parquet")

    store = Store(tmp_db)
    report = store.ingest(sample)
    assert report.ok and report.files[0].n_responses == responses.height
    counts = store.table_counts()
    assert counts["responses"] == responses.height
    assert counts["scores"] == scores.height
    assert counts["models"] == 300
    coverage = store.query("SELECT * FROM benchmark_coverage ORDER BY benchmark")
    expected = (responses.group_by("benchmark")
                .agg(models=pl.col("model").n_unique(), items=pl.col("item_id").n_unique(),
                     responses=pl.len()).sort("benchmark"))
    assert coverage.get_column("benchmark").to_list() == expected.get_column("benchmark").to_list()
    assert coverage.get_column("responses").to_list() == expected.get_column("responses").to_list()
    assert coverage.get_column("items").to_list() == expected.get_column("items").to_list()
    assert (coverage.get_column("density") == 1.0).all()  # the source is dense
    resp, sc = store.load_long("mmlu")
    matrix = build_matrix(resp, sc, "mmlu")
    assert matrix.shape[1] == 102
    assert matrix.score_source == ["reported"] * matrix.shape[0]

    store.ingest(sample)  # skipped by hash
    assert store.table_counts() == counts


@pytest.mark.slow
def test_full_openllm_ingest(openllm_dir: Path, tmp_path: Path, tmp_db: Path) -> None:
    folder = tmp_path / "openllm"
    shutil.copytree(openllm_dir, folder)
    store = Store(tmp_db)
    report = store.ingest(folder)
    assert report.ok, report
    counts = store.table_counts()
    assert counts["responses"] == 2_943_505
    assert counts["scores"] == 22_049
    assert counts["models"] == 6_063
    assert store.benchmarks() == ["arc", "gsm8k", "hellaswag", "mmlu", "truthfulqa"]
    # the key the schema documents but leaves to the store: no (model, benchmark, item) twice
    dupes = store.query("SELECT count(*) FROM (SELECT model, benchmark, item_id FROM responses "
                        "GROUP BY ALL HAVING count(*) > 1)").item()
    assert dupes == 0
    assert tmp_db.stat().st_size < 60e6  # no index blow-up


def test_folder_reader_matches_duckdb(small_long_dir: Path) -> None:
    parsed = read_long(small_long_dir)
    assert parsed.responses.height == N_SMALL
    assert parsed.responses.schema["score"] == pl.Float64
    assert parsed.models.height == SMALL_MODELS
    assert sorted(p.name for p in parsed.sources) == ["models.csv", "responses.parquet", "scores.parquet"]


def test_csv_and_jsonl_long_tables(tmp_path: Path, tmp_db: Path) -> None:
    csv = tmp_path / "r.csv"
    csv.write_text("Model , benchmark,item_id,correct\n a/b ,harness|arc:challenge|25,1,true\n"
                   "a/b,arc,2,FALSE\nc/d,my task,x,0.25\n", encoding="utf-8")
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text('{"model": "e/f", "benchmark": "gsm8k", "item_id": 3, "score": 1}\n'
                     '{"model": "e/f", "benchmark": "gsm8k", "item_id": 4, "score": 0.5}\n', encoding="utf-8")
    store = Store(tmp_db)
    assert store.ingest([csv, jsonl]).ok
    rows = store.query("SELECT model, benchmark, item_id, score FROM responses ORDER BY ALL").rows()
    assert rows == [("a/b", "arc", "1", 1.0), ("a/b", "arc", "2", 0.0), ("c/d", "my task", "x", 0.25),
                    ("e/f", "gsm8k", "3", 1.0), ("e/f", "gsm8k", "4", 0.5)]
    formats = store.query("SELECT format FROM ingests ORDER BY ingest_id").get_column("format").to_list()
    assert len(formats) == 2 and all(f.startswith("long") for f in formats)


def test_schema_is_idempotent_and_complete(tmp_db: Path) -> None:
    store = Store(tmp_db)
    store.apply_schema()
    store.apply_schema()
    Store(tmp_db).apply_schema()
    con = store.open_readonly()
    try:
        tables = {r[0] for r in con.sql("SELECT table_name FROM information_schema.tables "
                                        "WHERE table_type = 'BASE TABLE'").fetchall()}
        views = {r[0] for r in con.sql("SELECT table_name FROM information_schema.tables "
                                       "WHERE table_type = 'VIEW'").fetchall()}
        for view in views:
            con.sql(f"SELECT * FROM {view}").fetchall()
    finally:
        con.close()
    assert set(TABLES) <= tables | views
    assert {"response_rows", "runs", "ingest_notes", "store_meta"} <= tables
    assert {"benchmark_coverage", "latest_anchors", "evaluation_summary", "method_ranking",
            "predictions_vs_truth"} <= views
    # the CHECK is a last line of defence behind validation
    con = duckdb.connect(str(tmp_db))
    try:
        with pytest.raises(duckdb.ConstraintException):
            con.execute("INSERT INTO response_rows VALUES ('m', 'b', 'i', 1.5, 1)").fetchall()
    finally:
        con.close()


def test_anchor_sets_round_trip(tmp_db: Path) -> None:
    store = Store(tmp_db)
    first = store.save_anchor_set(benchmark="arc", method="sparseeval", k=3, seed=0, items=["7", "2", "9"],
                                  weights=[0.5, 0.25, 0.25], n_train_models=100, params={"lr": 0.01})
    assert store.save_anchor_set(benchmark="arc", method="sparseeval", k=3, seed=0, items=["7", "2", "9"],
                                 weights=[0.5, 0.25, 0.25], mlflow_run_id="run-1") == first
    second = store.save_anchor_set(benchmark="arc", method="random", k=2, seed=1, items=["4", "1"])
    other = store.save_anchor_set(benchmark="gsm8k", method="random", k=2, seed=1, items=["a", "b"])
    assert len({first, second, other}) == 3
    assert store.query("SELECT count(*) FROM latest_anchors").item() == 0  # nothing published yet
    with pytest.raises(IllegalTransitionError, match="candidate -> champion is not allowed"):
        store.publish_champion("arc", first)  # only a proposal (it passed the checks) may be published
    store.propose(first, "checks passed")
    assert store.publish_champion("arc", first) is None
    store.propose(second, "checks passed")
    assert store.publish_champion("arc", second) == first  # the earlier champion is retired
    with pytest.raises(IllegalTransitionError, match="retired -> champion"):
        store.update_anchor_set(first, role="champion")  # retired is terminal
    history = store.query("SELECT anchor_set_id, old_role, new_role FROM role_history WHERE benchmark = 'arc' "
                          "ORDER BY changed_at, anchor_set_id").rows()
    assert history == [(first, None, "candidate"), (second, None, "candidate"), (first, "candidate", "proposed"),
                       (first, "proposed", "champion"), (second, "candidate", "proposed"),
                       (first, "champion", "retired"), (second, "proposed", "champion")]
    latest = store.query("SELECT benchmark, anchor_set_id, position, item_id, weight FROM latest_anchors")
    arc = latest.filter(pl.col("benchmark") == "arc")
    assert arc.get_column("anchor_set_id").unique().to_list() == [second]
    assert arc.get_column("item_id").to_list() == ["4", "1"]
    roles = store.query("SELECT anchor_set_id, role FROM anchor_set_history WHERE benchmark = 'arc'").rows()
    assert roles == [(first, "retired"), (second, "champion")]
    with pytest.raises(ValueError, match="unknown anchor set field"):
        store.update_anchor_set(first, colour="red")
    stored = store.query("SELECT item_id, weight FROM anchors WHERE anchor_set_id = $i ORDER BY position",
                         {"i": first})
    assert stored.rows() == [("7", 0.5), ("2", 0.25), ("9", 0.25)]
    meta = store.query("SELECT mlflow_run_id, params, n_train_models FROM anchor_sets "
                       "WHERE anchor_set_id = $i", {"i": first}).row(0)
    assert meta == ("run-1", '{"lr": 0.01}', 100)
    with pytest.raises(ValueError, match="weights"):
        store.save_anchor_set(benchmark="arc", method="x", k=2, items=["1", "2"], weights=[1.0])


def test_evaluations_replace_reruns_and_summaries(tmp_db: Path) -> None:
    store = Store(tmp_db)
    rows = [{"benchmark": "arc", "method": m, "k": 10, "seed": s, "split_policy": "random",
             "mae": mae, "tau": 0.8, "rho": 0.9, "max_error": 0.1, "seconds": 1.0,
             "n_train": 80, "n_val": 10, "n_test": 10}
            for m, maes in (("sparseeval", (0.02, 0.04)), ("random", (0.05, 0.07)))
            for s, mae in enumerate(maes)]
    assert store.save_evaluations(rows) == 4
    store.save_evaluations(rows[:1])  # a rerun of one (benchmark, method, k, seed, policy) replaces it
    assert store.table_counts()["evaluations"] == 4
    summary = store.query("SELECT method, n_seeds, mae_mean, mae_sd FROM evaluation_summary ORDER BY method")
    assert summary.get_column("n_seeds").to_list() == [2, 2]
    np.testing.assert_allclose(summary.get_column("mae_mean").to_list(), [0.06, 0.03])
    np.testing.assert_allclose(summary.get_column("mae_sd").to_list(), [np.std([0.05, 0.07], ddof=1),
                                                                        np.std([0.02, 0.04], ddof=1)])
    ranking = store.query("SELECT method, rank FROM method_ranking ORDER BY rank")
    assert ranking.rows() == [("sparseeval", 1), ("random", 2)]
    with pytest.raises(ValueError, match="unknown evaluation column"):
        store.save_evaluations([{"benchmark": "arc", "method": "x", "k": 1, "oops": 1}])


def test_predictions_round_trip_against_truth(small_long_dir: Path, tmp_db: Path) -> None:
    store = Store(tmp_db)
    store.ingest(small_long_dir)
    _, scores = store.load_long("arc")
    truth = dict(scores.select("model", "score").iter_rows())
    anchor_set = store.save_anchor_set(benchmark="arc", method="sparseeval", k=2, items=["0", "1"])
    models = sorted(truth)[:3]
    preds = [{"model": m, "benchmark": "arc", "anchor_set_id": anchor_set,
              "predicted": min(1.0, truth[m] + 0.1), "lower": truth[m] - 0.05 + 0.1 * (i == 0),
              "upper": truth[m] + 0.2, "n_anchors": 2, "ood": i == 2}
             for i, m in enumerate(models)]
    assert store.save_predictions(preds) == 3
    assert store.save_predictions(pl.DataFrame(preds)) == 3  # upsert: same keys
    assert store.table_counts()["predictions"] == 3
    view = store.query("SELECT model, error, inside_interval, ood FROM predictions_vs_truth ORDER BY model")
    assert view.get_column("model").to_list() == models
    np.testing.assert_allclose(view.get_column("error").to_numpy(),
                               [min(1.0, truth[m] + 0.1) - truth[m] for m in models])
    assert view.get_column("inside_interval").to_list() == [False, True, True]
    assert view.get_column("ood").to_list() == [False, False, True]
    with pytest.raises(ValueError, match="outside"):
        store.save_predictions([{**preds[0], "predicted": 1.3}])


def test_an_ingest_publishes_the_snapshot_once_and_reads_its_own_writes(tmp_path: Path, tmp_db: Path) -> None:
    """Several units in one ingest: one snapshot copy at the end, not one per unit (the reads an ingest
    makes between its writes, such as "was this file ingested before?", read the database itself);
    a second copy of a unit within the same ingest is still recognised."""
    folder = tmp_path / "units"
    folder.mkdir()
    for seed in range(3):
        responses, _ = make_long_frames(seed=seed, prefix=f"lab{seed}-")
        responses.write_parquet(folder / f"unit{seed}.parquet")
    shutil.copy(folder / "unit0.parquet", folder / "unit0_again.parquet")
    store = Store(tmp_db)
    store.apply_schema()
    before = store.publish_count
    report = store.ingest(folder)
    assert sorted(f.status for f in report.files) == ["ok", "ok", "ok", "skipped"]
    assert store.publish_count - before == 1
    with duckdb.connect(str(store.snapshot_path), read_only=True) as con:  # the one publish has everything
        assert con.execute("SELECT count(*) FROM ingests WHERE status = 'ok'").fetchone()[0] == 3
    responses, _ = make_long_frames(seed=3, prefix="lab3-")
    responses.write_parquet(tmp_path / "unit3.parquet")
    with store.publishing_once():  # a batch's reads see its writes before they are published
        store.ingest(tmp_path / "unit3.parquet")
        assert store.query("SELECT count(*) AS n FROM ingests WHERE status = 'ok'").item() == 4
        with duckdb.connect(str(store.snapshot_path), read_only=True) as con:
            assert con.execute("SELECT count(*) FROM ingests").fetchone()[0] == 3
    with duckdb.connect(str(store.snapshot_path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM ingests").fetchone()[0] == 4
