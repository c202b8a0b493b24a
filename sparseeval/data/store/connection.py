"""Connections to the DuckDB store: one short write transaction at a time, readers on a snapshot.

Concurrency design (why it looks like this): a DuckDB file can be open for writing by only one
process, and while it is, every other process is locked out of it entirely, readers included.
So:

* writers hold the connection only for one short transaction, and when the file is locked by
  another sparseeval writer they retry with exponential backoff (``lock_timeout`` seconds in all).
  A lock held by anything else (an analyst's ``duckdb`` shell or notebook) fails within
  :attr:`Connections.foreign_lock_grace` seconds, naming the program and PID that hold it;
* after each committed write, still holding the lock, the writer checkpoints and publishes a
  read-only copy ``<db>.snapshot.duckdb`` atomically (copy to a temp file, fsync, ``os.replace``).
  Readers (:meth:`Connections.open_readonly` and every read helper) open the snapshot, which is
  never written in place, so any number of processes read while the pipeline writes, and a reader
  sees either the state before or after a whole transaction, never a partial one. Someone holding
  the snapshot open read-write keeps the old file; readers get the new one.

Faults (see docs/reliability.md, one section per promise, each with the test that proves it):

* a write marker ``.<db>.writer`` (JSON: pid, state) is written when a writer takes the lock and
  removed once the snapshot matches the database. It names our own writers to processes waiting
  for the lock, and it tells readers the snapshot is *stale*: a publish that failed after commit
  (disk full, read-only folder: state ``stale``) or a writer killed before it published (state
  ``writing`` with a dead PID). A stale snapshot is republished by the next write, by a reader
  that gets the lock at once, or by ``sparseeval doctor --repair``; a reader that cannot
  republish logs that the snapshot is older than the database;
* a failure after commit never raises from :meth:`Connections._write`: it sets
  :attr:`Connections.last_publish_error` ("stored; snapshot not refreshed"); Ctrl-C during the
  publish raises :class:`PublishInterrupted` (a KeyboardInterrupt: the data *is* stored);
* Ctrl-C during the transaction rolls it back and raises KeyboardInterrupt (DuckDB reports an
  interrupted query as ``RuntimeError('Query interrupted')``; it is turned back into Ctrl-C);
* temp files of a killed publish (``.<snapshot>.<pid>.tmp``) are removed by the next publisher;
* a damaged snapshot is republished from the database (it is only a copy); a database that cannot
  be opened raises :class:`StoreDamagedError`, one line naming the file and ``sparseeval doctor``;
* new databases are created in DuckDB's v1.4.0 storage format, so the snapshot (a byte copy) opens
  in DuckDB 1.4+ clients as well as 2.x.

The parts, one module each: :mod:`.errors` (what the user reads), :mod:`.transactions` (one transaction,
Ctrl-C inside it), :mod:`.locking` (who holds the lock), :mod:`.snapshot` (the write marker, publishing the
snapshot) and :mod:`.schema` (the layout applied once); this module opens connections, runs a write from
start to publish, and opens readers on the snapshot.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from sparseeval.core import settings
from sparseeval.data.interchange import to_polars
from sparseeval.data.store.errors import (
    PublishInterrupted,
    StoreDamagedError,
    StoreError,
    StoreLayoutError,
    StoreLockedError,
    StorePathError,
    _first_line,
)
from sparseeval.data.store.locking import _is_lock_error, _lock_holder, _looks_like_python, pid_alive
from sparseeval.data.store.schema import SQL_DIR, SchemaLayout
from sparseeval.data.store.snapshot import _BUSY, SNAPSHOT_SUFFIX, SnapshotPublishing
from sparseeval.data.store.transactions import (
    _interrupt_bridge,
    _is_interrupt,
    _now,
    _rollback_quietly,
    _run,
    _transaction,
)

#: what the rest of the library and the tests import from here (their homes are the modules above)
__all__ = ["SNAPSHOT_SUFFIX", "SQL_DIR", "Connections", "PublishInterrupted", "StoreDamagedError", "StoreError",
           "StoreLayoutError", "StoreLockedError", "StorePathError", "_first_line", "_is_interrupt", "_is_lock_error",
           "_lock_holder", "_now", "_run", "_transaction", "check_store_path", "default_db_path", "pid_alive"]

log = logging.getLogger(__name__)

#: storage format of new database files (and so of their snapshot): readable by DuckDB >= 1.4
STORAGE_VERSION = "v1.4.0"


def default_db_path() -> Path:
    """``$SPARSEEVAL_DB``, else ``<$SPARSEEVAL_DATA_DIR or data>/sparseeval.duckdb``
    (:mod:`sparseeval.core.settings`)."""
    from sparseeval.core import settings

    return settings.db_path()


def check_store_path(path: Path) -> None:
    """Refuse a directory or a snapshot (or one of its temp files) passed as the database."""
    if path.is_dir():
        raise StorePathError(f"{path} is a directory, not a DuckDB file: pass the database file itself "
                             f"(e.g. --db {path / 'sparseeval.duckdb'})")
    name = path.name
    if name.endswith(SNAPSHOT_SUFFIX) or (name.startswith(".") and SNAPSHOT_SUFFIX in name):
        db = path.with_name(name.lstrip(".").split(SNAPSHOT_SUFFIX)[0] + ".duckdb")
        raise StorePathError(f"{path} is the read-only snapshot of {db}, republished after every write: "
                             f"pass the database (--db {db}); to read, open the snapshot read-only")


class Connections(SnapshotPublishing, SchemaLayout):
    """Opening the store for one write transaction, or read-only on the published snapshot."""

    #: a lock held this long by a process that is not one of our writers fails (seconds)
    foreign_lock_grace: float = 5.0
    #: how long a reader waits for the write lock to republish a stale snapshot itself (seconds)
    reader_refresh_wait: float = 0.5

    def __init__(self, path: str | Path | None = None, *, lock_timeout: float = 120.0,
                 snapshot: bool = True) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        check_store_path(self.path)
        self.lock_timeout = lock_timeout
        self.snapshot = snapshot
        self._schema_applied = False
        #: set by each :meth:`_write`: None when the snapshot was published, else why it was not
        self.last_publish_error: str | None = None
        self._warned: set[str] = set()
        self._deferring = False
        self._deferred = False
        #: the one read connection of a :meth:`pinned` block (every read in it sees the same state)
        self._pinned: duckdb.DuckDBPyConnection | None = None
        #: snapshots this object published and the seconds they took (what a batch saves: bench/ingest.py)
        self.publish_count = 0
        self.publish_seconds = 0.0

    # --- connections ---------------------------------------------------------------------------

    def _connect(self, path: Path, *, read_only: bool, timeout: float | None = None,
                 config: Mapping[str, str] | None = None) -> duckdb.DuckDBPyConnection:
        """Connect, retrying while our own writers hold the lock; fail fast on a foreign holder."""
        timeout = self.lock_timeout if timeout is None else timeout
        start = time.monotonic()
        deadline = start + timeout
        delay = 0.02
        foreign_since: dict[int, float] = {}
        while True:
            try:
                con = duckdb.connect(str(path), read_only=read_only,
                                     config={**settings.duckdb_config(), **dict(config or {})})
            except duckdb.Error as exc:
                if not _is_lock_error(exc):
                    if isinstance(exc, duckdb.ConnectionException):
                        raise
                    raise StoreDamagedError(
                        f"{path}: cannot open the database: {_first_line(exc)} "
                        f"(check it with `sparseeval doctor --db {self.path}`)") from exc
                now = time.monotonic()
                holder = _lock_holder(exc)
                if holder is not None and not self._is_own_writer(holder[1]):
                    since = foreign_since.setdefault(holder[1], now)
                    if not _looks_like_python(holder[0]) or now - since >= min(self.foreign_lock_grace, timeout):
                        raise StoreLockedError(self._foreign_lock_message(path, holder), holder=holder,
                                               foreign=True) from exc
                if now >= deadline:
                    who = f" (PID {holder[1]})" if holder else ""
                    raise StoreLockedError(f"{path}: locked by another sparseeval writer{who} for more than "
                                           f"{timeout:.1f} s", holder=holder) from exc
                time.sleep(max(0.0, min(delay, deadline - now)))
                delay = min(delay * 2, 1.0)
                continue
            try:
                _run(con, "SET enable_progress_bar = false")
            except BaseException:
                con.close()
                raise
            return con

    def _foreign_lock_message(self, path: Path, holder: tuple[str, int]) -> str:
        program, pid = holder
        if path == self.snapshot_path:
            return f"{path} is held read-write by {program} (PID {pid})"
        return (f"{path} is locked by {program} (PID {pid}): close that session (an analyst's duckdb shell?) "
                f"or open the snapshot {self.snapshot_path} read-only instead")

    def _connect_rw(self, timeout: float | None = None) -> duckdb.DuckDBPyConnection:
        check_store_path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # a new file is created in the v1.4 storage format (an existing file keeps its own)
        return self._connect(self.path, read_only=False, timeout=timeout,
                             config={"storage_compatibility_version": STORAGE_VERSION})

    # --- writing -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Write connection for one transaction; publishes the snapshot after a clean exit.

        Never raises for what fails after the caller's commit (checkpoint, copy, replace): that sets
        :attr:`last_publish_error` instead. Ctrl-C inside the block rolls back and raises
        KeyboardInterrupt; Ctrl-C while publishing raises :class:`PublishInterrupted`.
        """
        self.last_publish_error = None
        con = self._connect_rw()
        try:
            with _interrupt_bridge(con):
                yield from self._write_steps(con)
        finally:
            con.close()

    def _write_steps(self, con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
        """The body of :meth:`_write`: marker, schema, the caller's block, publish."""
        before = self.read_marker()  # a stale snapshot stays stale if this write rolls back
        self._set_marker({"state": "writing", "pid": os.getpid(), "since": time.time()})
        try:
            if not self._schema_applied:
                self._execute_script(con)
                self._schema_applied = True
            yield con
        except BaseException as exc:
            _rollback_quietly(con)
            self._set_marker(before)
            if _is_interrupt(exc) and not isinstance(exc, KeyboardInterrupt):
                raise KeyboardInterrupt("interrupted; the transaction was rolled back") from exc
            raise
        if self.snapshot and self._deferring:  # published once when the batch ends (publishing_once)
            self._deferred = True
            self._set_marker({"state": "stale", "pid": os.getpid(), "since": time.time(),
                              "reason": "a batch of writes is in progress; its snapshot is published at its end"})
        elif self.snapshot:
            self._publish_after_commit(con)
        else:
            self.last_publish_error = "written with snapshot=False: the snapshot was not refreshed"
            self._set_marker({"state": "stale", "pid": os.getpid(), "reason": self.last_publish_error}
                             if self.snapshot_path.exists() else None)

    # --- reading -----------------------------------------------------------------------------------

    def open_readonly(self) -> duckdb.DuckDBPyConnection:
        """A connection to read the latest published state; the caller closes it (and only reads).

        Inside this store's own :meth:`publishing_once` batch it is the database itself (the batch's
        writes are not published yet, and republishing for every read would undo the batching).

        A stale snapshot (a publish failed, or a writer died before publishing) is republished here
        when the write lock is free at once; otherwise the reader gets the older snapshot and a
        warning. A damaged snapshot, or one someone holds read-write, is republished too.
        """
        if self._pinned is not None:
            return self._pinned.cursor()  # closing a cursor leaves the pinned connection open
        if not self.snapshot:
            return self._connect_ro(self.path)
        if self._deferring and self.path.exists():
            # inside our own batch of writes (publishing_once) the snapshot is behind on purpose: read the
            # database itself, which has our writes, instead of republishing the snapshot for each read
            return self._connect_rw()
        if not self.snapshot_path.exists() or not self.path.exists():  # a snapshot without its db is stale
            self.apply_schema()  # creates the database if needed and publishes the first snapshot
        else:
            state, detail = self.snapshot_state()
            if state == "stale":
                try:
                    refreshed = self.refresh_snapshot()
                except (StoreDamagedError, StoreLockedError) as exc:
                    refreshed, detail = False, f"{detail}; {exc}"
                if not refreshed:
                    self._warn_once(f"{self.snapshot_path} is older than the database {self.path}: {detail}. "
                                    f"Readers see the state of the last publish; the next write republishes "
                                    f"it, or run `sparseeval doctor --db {self.path} --repair`")
        return self._open_snapshot()

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """Every read inside the block sees one state of the store: one read connection is opened
        and all reads (queries, lazy scans collected inside the block) go through it. A snapshot
        published meanwhile replaces the file by rename, so the open connection keeps reading the
        state it opened. This is how a matrix and its data version come from the same state."""
        if self._pinned is not None:
            yield
            return
        con = self.open_readonly()
        self._pinned = con
        try:
            yield
        finally:
            self._pinned = None
            con.close()

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)

    def _open_snapshot(self) -> duckdb.DuckDBPyConnection:
        """Open the snapshot read-only; republish it when it is damaged or held read-write by someone."""
        path = self.snapshot_path
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.02
        while True:
            try:
                con = duckdb.connect(str(path), read_only=True, config=settings.duckdb_config())
            except duckdb.Error as exc:
                problem: BaseException = exc
            else:
                try:
                    _run(con, "SET enable_progress_bar = false")
                    _run(con, "SELECT count(*) FROM duckdb_tables()")  # reads the catalog: a damaged file fails
                    return con
                except duckdb.Error as exc:
                    con.close()
                    problem = exc
                except BaseException:
                    con.close()
                    raise
            # Nothing of ours opens the snapshot read-write: a lock means someone else does, and os.replace
            # by a publish gives readers a new file. A damaged snapshot is only a copy: publish it again.
            locked = _is_lock_error(problem)
            holder = _lock_holder(problem) if locked else None
            what = (f"held read-write by {holder[0]} (PID {holder[1]})" if holder else "locked") if locked \
                else f"unreadable ({_first_line(problem)})"
            log.info("snapshot %s is %s; publishing it again from the database", path, what)
            try:
                failure = self._try_refresh()
                if failure is None:
                    continue
                if failure is not _BUSY:
                    raise StoreError(f"the snapshot {path} is {what}, and republishing it failed: {failure}") \
                        from problem
            except StoreDamagedError as exc:
                raise StoreDamagedError(f"the snapshot {path} is {what} and {exc}") from problem
            except StoreLockedError as exc:
                raise StoreLockedError(f"the snapshot {path} is {what}, and it cannot be republished: {exc}",
                                       holder=exc.holder, foreign=True) from problem
            if time.monotonic() >= deadline:
                raise StoreLockedError(f"the snapshot {path} is {what}, and the database {self.path} stayed "
                                       f"locked for {self.lock_timeout:.0f} s, so it could not be republished") \
                    from problem
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _connect_ro(self, path: Path) -> duckdb.DuckDBPyConnection:
        return self._connect(path, read_only=True)

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> pl.DataFrame:
        """Run a read-only query on the latest published state."""
        con = self.open_readonly()
        try:
            return to_polars(con.sql(sql, params=params))
        finally:
            con.close()
