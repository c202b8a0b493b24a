"""``sparseeval sql`` on a real store's snapshot, and the snapshot read by the DuckDB 1.x CLI."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import polars as pl
import pytest

from sparseeval.data.store import Store
from sparseeval.data.store.connection import SQL_DIR
from sparseeval.interfaces.commands import sql as sql_cmd
from tests.support import SMALL_BENCHMARKS, SMALL_ITEMS, SMALL_MODELS, make_long_frames

#: the DuckDB 1.x command-line client of the test extras (package duckdb-cli), next to this Python
DUCKDB_CLI = Path(sys.executable).parent / "duckdb"

HOLD_WRITE = r"""
import sys, time
from pathlib import Path
from sparseeval.data.store import Store
store, release = Store(sys.argv[1]), Path(sys.argv[2])
with store._write() as con:
    con.execute("INSERT INTO store_meta VALUES ('probe', 'written')").fetchall()
    print("holding", flush=True)
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with 12 models x 2 benchmarks x 8 items ingested; returns the database path."""
    root = tmp_path_factory.mktemp("sqlstore")
    src = root / "src"
    src.mkdir()
    responses, scores = make_long_frames()
    responses.write_parquet(src / "responses.parquet")
    scores.write_parquet(src / "scores.parquet")
    db = root / "db" / "sparseeval.duckdb"
    assert Store(db).ingest([src]).ok
    return db


def _sql(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = sql_cmd.main([*argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _module(*argv: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparseeval.interfaces.commands.sql", *argv], input=stdin,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_one_shot_formats(store: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    query = "SELECT benchmark, models, items, responses FROM benchmark_coverage ORDER BY benchmark"
    expected = [(b, SMALL_MODELS, SMALL_ITEMS, SMALL_MODELS * SMALL_ITEMS) for b in SMALL_BENCHMARKS]

    rc, out, _ = _sql(capsys, "--db", str(store), "--csv", "-", query)
    assert rc == 0
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["benchmark", "models", "items", "responses"]
    assert [(b, int(m), int(i), int(r)) for b, m, i, r in rows[1:]] == expected

    rc, out, _ = _sql(capsys, "--db", str(store), "--json", "-", query)
    assert rc == 0
    assert [tuple(d.values()) for d in json.loads(out)] == expected

    rc, out, _ = _sql(capsys, "--db", str(store), "--json", "-", "SELECT 1 AS a WHERE false")
    assert rc == 0 and json.loads(out) == []

    rc, out, _ = _sql(capsys, "--db", str(store), query)  # the table view
    assert rc == 0 and "benchmark" in out and all(b in out for b in SMALL_BENCHMARKS)

    target = tmp_path / "out.parquet"
    rc, _, err = _sql(capsys, "--db", str(store), "--parquet", str(target),
                      "SET threads = 1; SELECT model, benchmark, score FROM scores ORDER BY ALL")
    assert rc == 0 and f"wrote {SMALL_MODELS * len(SMALL_BENCHMARKS)} rows" in err
    _, scores = make_long_frames()
    assert pl.read_parquet(target).sort("model", "benchmark")["score"].to_list() == pytest.approx(
        scores.sort("model", "benchmark")["score"].to_list())

    # the snapshot file itself may be named, and a query read from stdin
    done = _module("--db", str(store.with_name("sparseeval.snapshot.duckdb")), "--csv", "-",
                   stdin="SELECT count(*) AS n FROM responses;")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["n", str(SMALL_MODELS * SMALL_ITEMS * len(SMALL_BENCHMARKS))]


def test_writes_and_bad_sql_are_refused_one_line(store: Path, capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    before = store.with_name("sparseeval.snapshot.duckdb").stat().st_mtime_ns
    rc, _, err = _sql(capsys, "--db", str(store), "DELETE FROM runs")
    assert rc == 1 and "read-only" in err and "never writes" in err and len(err.strip().splitlines()) == 1
    rc, _, err = _sql(capsys, "--db", str(store), "SELECT nope FROM scores")
    assert rc == 1 and err.startswith("error: Binder Error")
    assert store.with_name("sparseeval.snapshot.duckdb").stat().st_mtime_ns == before
    assert Store(store).query("SELECT count(*) FROM runs").item() > 0
    rc, _, err = _sql(capsys, "--db", str(tmp_path / "none" / "sparseeval.duckdb"), "SELECT 1")
    assert rc == 2 and "no store at" in err and "make run" in err
    assert not (tmp_path / "none").exists()  # nothing created


def test_views_lists_every_view_with_its_description(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _sql(capsys, "--db", str(store), "--views", "--json", "-")
    assert rc == 0
    views = {v["view"]: v for v in json.loads(out)}
    defined = set(re.findall(r"CREATE OR REPLACE VIEW (\w+)", (SQL_DIR / "views.sql").read_text()))
    assert defined and defined <= set(views)
    assert {"responses", "scores", "current_runs"} <= set(views)
    assert views["latest_anchors"]["description"].startswith("The anchors users run")
    assert views["predictions_vs_truth"]["columns"][:2] == ["model", "benchmark"]
    rc, out, _ = _sql(capsys, "--db", str(store), "--views")
    assert rc == 0 and "latest_anchors\n" in out and "columns: benchmark, anchor_set_id" in out


def test_prompt(store: Path) -> None:
    script = ("SELECT 40 +\n  2 AS answer;\n.mode csv\nSELECT count(*) AS n FROM scores;\n.schema scores\n"
              "SELECT nope;\n.nothing\n.tables\n.quit\nSELECT 'never run';\n")
    done = _module("--db", str(store), "-i", stdin=script)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "42" in out and f"n\n{SMALL_MODELS * len(SMALL_BENCHMARKS)}\n" in out
    assert "column_name" in out and "error: Binder Error" in out and "unknown command '.nothing'" in out
    assert "response_rows" in out and "never run" not in out


def test_sql_reads_the_snapshot_while_a_writer_holds_the_database(store: Path, tmp_path: Path) -> None:
    query = "SELECT count(*) AS n FROM store_meta WHERE key = 'probe'"
    release = tmp_path / "release"
    writer = subprocess.Popen([sys.executable, "-c", HOLD_WRITE, str(store), str(release)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "holding"
        with pytest.raises(duckdb.IOException, match="lock"):  # the database itself is locked ...
            duckdb.connect(str(store), read_only=True).close()
        t0 = time.monotonic()
        done = _module("--db", str(store), "--csv", "-", query, timeout=30)
        seconds = time.monotonic() - t0
        assert writer.poll() is None, "the writer must still hold the lock while sql reads"
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["n", "0"]  # ... sql reads the last published state, not the open write
        assert seconds < 20  # not waiting for the writer (which would hold it for 60 s)
    finally:
        release.touch()
        _, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    done = _module("--db", str(store), "--csv", "-", query)
    assert done.stdout.split() == ["n", "1"]  # the committed write is published


def test_snapshot_opens_in_the_duckdb_1x_cli(store: Path) -> None:
    assert DUCKDB_CLI.is_file(), f"{DUCKDB_CLI} missing: install the test extras (pip install -e '.[test]')"
    version = subprocess.run([str(DUCKDB_CLI), "--version"], capture_output=True, text=True, check=True).stdout
    assert version.startswith("v1."), version
    snapshot = store.with_name("sparseeval.snapshot.duckdb")
    views = [v for (v,) in duckdb.connect(":memory:").execute(
        "SELECT unnest(regexp_extract_all($t, 'CREATE OR REPLACE VIEW (\\w+)', 1))",
        {"t": (SQL_DIR / "schema.sql").read_text() + (SQL_DIR / "views.sql").read_text()}).fetchall()]
    queries = ["SELECT count(*) FROM responses", *[f"SELECT count(*) FROM {v}" for v in views]]
    done = subprocess.run([str(DUCKDB_CLI), "-readonly", "-csv", "-noheader", str(snapshot),
                           "-c", "; ".join(queries) + ";"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    counts = [int(line) for line in done.stdout.split()]
    assert len(counts) == len(queries) and counts[0] == SMALL_MODELS * SMALL_ITEMS * len(SMALL_BENCHMARKS)
    expected = Store(store).query(" UNION ALL ".join(f"SELECT {i} AS i, ({q}) AS n" for i, q in enumerate(queries))
                                  + " ORDER BY i")["n"].to_list()
    assert counts == expected


def test_every_recipe_in_the_analyst_guide_runs(store: Path) -> None:
    """docs/analysts.md's SQL blocks run on a real snapshot, in sparseeval sql and in the DuckDB 1.x CLI."""
    recipes = re.findall(r"```sql\n(.*?)```", (Path(__file__).parents[1] / "docs" / "analysts.md").read_text(), re.S)
    assert len(recipes) >= 10
    con, _ = sql_cmd.open_snapshot(store)
    try:
        for recipe in recipes:
            sql_cmd.run_query(con, recipe, fmt="csv", out=io.StringIO())
    finally:
        con.close()
    snapshot = store.with_name("sparseeval.snapshot.duckdb")
    done = subprocess.run([str(DUCKDB_CLI), "-readonly", "-csv", str(snapshot), "-c", "\n".join(recipes)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
