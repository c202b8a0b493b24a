"""Connections to the DuckDB store: one short write transaction at a time, readers on a snapshot.

Concurrency design (why it looks like this): a DuckDB file can be open for writing by only one
process, and while it is, every other process is locked out of it entirely, readers included.
So:

* writers hold the connection only for one short transaction, and when the file is locked by
  another process they retry with exponential backoff (``lock_timeout`` seconds in all);
* after each successful write, still holding the lock, the writer checkpoints and publishes a
  read-only copy ``<db>.snapshot.duckdb`` atomically (write to a temp file, fsync, ``os.replace``).
  Readers (:meth:`Connections.open_readonly` and every read helper) open the snapshot, which is
  never written in place, so any number of processes read while the pipeline writes, and a reader
  sees either the state before or after a whole transaction, never a partial one. A writer killed
  mid-way leaves the old snapshot (and, by DuckDB's WAL, an unchanged database) behind.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

import sparseeval

SQL_DIR = Path(sparseeval.__file__).resolve().parents[1] / "sql"


def default_db_path() -> Path:
    """``$SPARSEEVAL_DB`` or ``data/sparseeval.duckdb`` under the current directory."""
    return Path(os.environ.get("SPARSEEVAL_DB") or Path.cwd() / "data" / "sparseeval.duckdb")




class StoreLockedError(RuntimeError):
    """Another process held the database for longer than ``lock_timeout``."""



def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


@contextlib.contextmanager
def _transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """BEGIN ... COMMIT, or ROLLBACK on any exception (KeyboardInterrupt included)."""
    con.begin()
    try:
        yield
        con.commit()
    except BaseException:
        con.rollback()
        raise


def _run(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
    """Execute and fetch everything: DuckDB 2 refuses new work while a result is unfinished."""
    con.execute(sql, params)
    return con.fetchall()


class StoreLayoutError(RuntimeError):
    """The database file was written by another layout of the store."""


class Connections:
    """Opening the store for one write transaction, or read-only on the published snapshot."""

    def __init__(self, path: str | Path | None = None, *, lock_timeout: float = 120.0,
                 snapshot: bool = True) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.lock_timeout = lock_timeout
        self.snapshot = snapshot
        self._schema_applied = False

    @property
    def snapshot_path(self) -> Path:
        return self.path.with_name(self.path.name.removesuffix(".duckdb") + ".snapshot.duckdb")

    # --- connections ---------------------------------------------------------------------------

    def _connect_rw(self) -> duckdb.DuckDBPyConnection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.02
        while True:
            try:
                con = duckdb.connect(str(self.path))
                _run(con, "SET enable_progress_bar = false")
                return con
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    if "lock" in str(exc).lower():
                        raise StoreLockedError(f"{self.path}: locked by another process for more than "
                                               f"{self.lock_timeout:.0f} s") from exc
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    @contextlib.contextmanager
    def _write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Write connection for one transaction; publishes the snapshot after a clean exit."""
        con = self._connect_rw()
        try:
            if not self._schema_applied:
                self._execute_script(con)
                self._schema_applied = True
            yield con
            if self.snapshot:
                _run(con, "CHECKPOINT")
                self._publish(con)
        finally:
            con.close()

    def _execute_script(self, con: duckdb.DuckDBPyConnection) -> None:
        old = _run(con, "SELECT 1 FROM duckdb_tables() WHERE table_name = 'responses' AND schema_name = 'main'")
        if old:
            raise StoreLayoutError(
                f"{self.path}: written by an older sparseeval (layout 1, no run history); "
                "move it aside and ingest the sources again into a new store")
        with _transaction(con):
            for name in ("schema.sql", "views.sql"):
                _run(con, (SQL_DIR / name).read_text(encoding="utf-8"))

    def _publish(self, con: duckdb.DuckDBPyConnection) -> None:
        """Copy the checkpointed file to the snapshot atomically (we still hold the write lock)."""
        tmp = self.snapshot_path.with_name(f".{self.snapshot_path.name}.{os.getpid()}.tmp")
        try:
            with self.path.open("rb") as src, tmp.open("wb") as dst:
                while block := src.read(1 << 22):
                    dst.write(block)
                dst.flush()
                os.fsync(dst.fileno())
            os.replace(tmp, self.snapshot_path)
        finally:
            tmp.unlink(missing_ok=True)

    def apply_schema(self) -> None:
        """Create tables, sequences and views if missing (idempotent) and publish the snapshot."""
        self._schema_applied = False
        with self._write():
            pass

    def open_readonly(self) -> duckdb.DuckDBPyConnection:
        """A read-only connection to the latest published state; the caller closes it."""
        if not self.snapshot:
            return self._connect_ro(self.path)
        if not self.snapshot_path.exists() or not self.path.exists():  # a snapshot without its db is stale
            self.apply_schema()  # creates the database if needed and publishes the first snapshot
        return self._connect_ro(self.snapshot_path)

    def _connect_ro(self, path: Path) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.02
        while True:
            try:
                con = duckdb.connect(str(path), read_only=True)
                _run(con, "SET enable_progress_bar = false")
                return con
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> pl.DataFrame:
        """Run a read-only query on the latest published state."""
        con = self.open_readonly()
        try:
            return con.sql(sql, params=params).pl()
        finally:
            con.close()

