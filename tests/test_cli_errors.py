"""User input never ends in a traceback (issue 21, item 4: started; the full table is not done yet).

A ``--db`` that DuckDB opens but that is not a sparseeval store is refused in one line, before any
read or write, and the file is left byte-for-byte as it was.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import duckdb

from tests.support import make_long_frames


def test_ingest_into_a_foreign_duckdb_file_is_refused_in_one_line(tmp_path: Path) -> None:
    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as con:
        con.execute("CREATE TABLE runs (a INT)")
        con.execute("CREATE TABLE t AS SELECT 1 AS x")
    before = hashlib.sha256(other.read_bytes()).hexdigest()
    responses, _ = make_long_frames()
    responses.write_csv(tmp_path / "answers.csv")
    done = subprocess.run([sys.executable, "-m", "sparseeval.cli", "-q", "ingest", "--db", str(other),
                           str(tmp_path / "answers.csv")], capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(lines) == 1 and str(other) in lines[0] and "not a sparseeval store" in lines[0]
    assert hashlib.sha256(other.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.csv", "other.duckdb"]  # nothing written beside it
