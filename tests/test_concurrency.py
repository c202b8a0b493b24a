"""Several processes on one store: readers during writes, writers waiting on a lock, a writer killed -9.

These run real subprocesses on a real DuckDB file, because DuckDB's file lock is per process and
nothing in-process would exercise it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import polars as pl
import pytest

from sparseeval.data.store import Store, StoreLockedError

READER = r"""
import json, sys, time
from pathlib import Path
from sparseeval.data.store import Store
db, stop, out, ready = sys.argv[1:5]
store = Store(db)
states, errors = [], []
while not Path(stop).exists():
    try:
        con = store.open_readonly()
        try:
            n = con.sql("SELECT count(*) FROM responses").fetchall()[0][0]
            ok, total = con.sql("SELECT count(*), coalesce(sum(n_responses), 0) FROM ingests "
                                "WHERE status = 'ok'").fetchall()[0]
        finally:
            con.close()
        states.append([int(n), int(ok), int(total)])
        Path(ready).touch()
    except Exception as exc:  # the test asserts there are none
        errors.append(repr(exc))
        time.sleep(0.01)
Path(out).write_text(json.dumps({"states": states, "errors": errors}))
"""

WRITER = r"""
import logging, sys
from sparseeval.data.store import Store
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
report = Store(sys.argv[1]).ingest(sys.argv[2:])
sys.exit(0 if report.ok else 1)
"""

HOLDER = r"""
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("INSERT INTO evaluations (benchmark, method, k) VALUES ('held', 'lock', 1)").fetchall()
print("holding", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def _long_file(path: Path, prefix: str, n_models: int, n_items: int) -> int:
    frame = (pl.DataFrame({"model": [f"{prefix}/m{m}" for m in range(n_models)]})
             .join(pl.DataFrame({"item_id": [str(i) for i in range(n_items)]}), how="cross")
             .with_columns(benchmark=pl.lit("arc"),
                           correct=(pl.int_range(pl.len()) * 7919 % 13 < 6).cast(pl.Int8)))
    frame.write_parquet(path)
    return frame.height


def _python(code: str, *args: object, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], text=True, **kw)


@pytest.mark.slow
def test_reader_never_sees_a_partial_ingest(tmp_path: Path, tmp_db: Path) -> None:
    rows = 400 * 250
    files = [tmp_path / f"part{i}.parquet" for i in range(6)]
    for i, f in enumerate(files):
        assert _long_file(f, f"org{i}", 400, 250) == rows
    Store(tmp_db).apply_schema()
    stop, out, ready = tmp_path / "stop", tmp_path / "reader.json", tmp_path / "ready"
    reader = _python(READER, tmp_db, stop, out, ready)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert reader.poll() is None and time.monotonic() < deadline, "reader did not start"
            time.sleep(0.05)
        writer = _python(WRITER, tmp_db, *files, stderr=subprocess.PIPE)
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
        time.sleep(0.3)
    finally:
        stop.touch()
        reader.wait(timeout=60)
    result = json.loads(out.read_text())
    assert result["errors"] == []
    states = result["states"]
    for n, ok, total in states:
        assert n == total == ok * rows, (n, ok, total)  # whole files only, and bookkeeping agrees
    seen = sorted({ok for _, ok, _ in states})
    assert len(seen) >= 3, f"reader saw too few states to prove overlap: {seen}"
    assert states[-1][1] == len(files)


@pytest.mark.slow
def test_writer_waits_for_the_lock_and_readers_are_not_blocked(tmp_path: Path, tmp_db: Path) -> None:
    store = Store(tmp_db)
    store.apply_schema()
    small = tmp_path / "small.parquet"
    n = _long_file(small, "wait", 20, 10)
    holder = _python(HOLDER, tmp_db, 2.5, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "holding"
        started = time.monotonic()
        assert store.table_counts()["responses"] == 0  # the snapshot is readable while the file is locked
        assert time.monotonic() - started < 1.0
        with pytest.raises(StoreLockedError, match="locked"):
            Store(tmp_db, lock_timeout=0.3).ingest(small)
        report = store.ingest(small)  # retries with backoff until the holder lets go
        waited = time.monotonic() - started
    finally:
        holder.wait(timeout=30)
    assert report.ok and report.files[0].n_responses == n
    assert waited > 1.5
    counts = store.table_counts()
    assert counts["responses"] == n and counts["evaluations"] == 1  # the holder's commit survived


@pytest.mark.slow
def test_ingest_killed_mid_transaction_leaves_a_consistent_store(tmp_path: Path, tmp_db: Path) -> None:
    good = tmp_path / "good.parquet"
    n_good = _long_file(good, "good", 50, 20)
    big = tmp_path / "big.parquet"
    n_big = _long_file(big, "big", 3000, 1000)
    store = Store(tmp_db)
    assert store.ingest(good).ok
    size_before = tmp_db.stat().st_size

    writer = _python(WRITER, tmp_db, big, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while "ingesting" not in (line := writer.stderr.readline()):
            assert line and time.monotonic() < deadline, "writer ended before its transaction"
        # wait until the uncommitted insert is writing row groups into the file (DuckDB writes big
        # inserts optimistically, before commit): the worst moment to die
        grow_deadline = time.monotonic() + 60
        while (tmp_db.stat().st_size <= size_before and time.monotonic() < grow_deadline
               and writer.poll() is None):
            time.sleep(0.005)
        assert writer.poll() is None, "the ingest finished before it could be killed; use a bigger file"
        assert tmp_db.stat().st_size > size_before
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == -signal.SIGKILL

    con = duckdb.connect(str(tmp_db), read_only=True)  # the database itself opens and is consistent
    try:
        assert con.sql("SELECT count(*) FROM responses").fetchall()[0][0] == n_good
        assert con.sql("SELECT count(*) FROM responses WHERE model LIKE 'big/%'").fetchall()[0][0] == 0
        assert con.sql("SELECT count(*) FROM models WHERE model LIKE 'big/%'").fetchall()[0][0] == 0
        assert con.sql("SELECT count(*) FROM ingests WHERE file = ? AND status = 'ok'",
                       params=[str(big)]).fetchall()[0][0] == 0
    finally:
        con.close()
    assert store.table_counts()["responses"] == n_good  # and so is the published snapshot

    report = store.ingest(big)  # a rerun completes it
    assert report.ok and report.files[0].n_responses == n_big
    counts = store.table_counts()
    assert counts["responses"] == n_good + n_big
    assert store.query("SELECT count(*) FROM ingests WHERE status = 'ok'").item() == 2
