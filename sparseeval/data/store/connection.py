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
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from sparseeval.core import settings
from sparseeval.core.errors import UserError
from sparseeval.data.interchange import to_polars

log = logging.getLogger(__name__)

def _sql_dir() -> Path:
    """The DDL and views: inside the installed package (a wheel ships ``sql/`` as ``sparseeval/sql``),
    else the source checkout's top-level ``sql/`` (editable installs and the repository itself)."""
    package = Path(__file__).resolve().parents[2]  # sparseeval/ (this file: sparseeval/data/store/connection.py)
    installed = package / "sql"
    return installed if (installed / "schema.sql").is_file() else package.parent / "sql"


SQL_DIR = _sql_dir()

#: storage format of new database files (and so of their snapshot): readable by DuckDB >= 1.4
STORAGE_VERSION = "v1.4.0"

SNAPSHOT_SUFFIX = ".snapshot.duckdb"

_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (?P<program>.*?) \(PID (?P<pid>\d+)\)")
_TEMP_PID = re.compile(r"\.(\d+)\.tmp$")
_BUSY = "busy: one of our writers holds the database"


def default_db_path() -> Path:
    """``$SPARSEEVAL_DB``, else ``<$SPARSEEVAL_DATA_DIR or data>/sparseeval.duckdb`` (:mod:`sparseeval.core.settings`)."""
    from sparseeval.core import settings

    return settings.db_path()


class StoreError(UserError, RuntimeError):
    """A problem with the store itself (not with an input file); its message is one line for the user."""


class StoreLockedError(StoreError):
    """Another process holds the database: a foreign program, or our own writer past ``lock_timeout``.

    ``holder`` is (program, PID) when DuckDB named it; ``foreign`` is True when it is not one of our writers.
    """

    def __init__(self, message: str, *, holder: tuple[str, int] | None = None, foreign: bool = False) -> None:
        super().__init__(message)
        self.holder = holder
        self.foreign = foreign


class StoreLayoutError(StoreError):
    """The database file was written by another layout of the store."""


class StoreDamagedError(StoreError):
    """The database file cannot be opened (damaged, truncated, unreadable, or from a newer DuckDB)."""


class StorePathError(StoreError, ValueError):
    """The store was pointed at something that is not a database: a directory, or the snapshot."""


class PublishInterrupted(KeyboardInterrupt):
    """Ctrl-C arrived after the transaction committed, while the snapshot was being published.

    The data is stored; only the snapshot is stale (the next write or reader republishes it).
    """


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _is_interrupt(exc: BaseException | None) -> bool:
    """Ctrl-C, in each form it reaches us: Python's KeyboardInterrupt; DuckDB's interrupt (a statement
    stopped by ``con.interrupt()``, or a read that noticed SIGINT itself and says "Query interrupted");
    or a DuckDB error wrapping the KeyboardInterrupt raised inside a Python callback (an Arrow scan of
    a registered frame). Missing one of them turns Ctrl-C into "this file is bad" and the ingest goes
    on with the next file, which is what a user pressing Ctrl-C least expects."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, KeyboardInterrupt | duckdb.InterruptException):
            return True
        message = str(exc).strip()
        if isinstance(exc, RuntimeError) and message.lower() == "query interrupted":
            return True
        if isinstance(exc, duckdb.Error) and (message.endswith("KeyboardInterrupt:")
                                              or "failed: KeyboardInterrupt" in message):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _rollback_quietly(con: duckdb.DuckDBPyConnection) -> None:
    with contextlib.suppress(duckdb.Error, RuntimeError):
        con.rollback()  # "no transaction is active" when the caller already rolled back


def _ctrl_c_handler(signum: int, frame: object) -> None:
    """SIGINT during a write: raise KeyboardInterrupt, unless DuckDB's statement is already failing with
    our interrupt (then that exception carries the Ctrl-C: a second one would break the cleanup)."""
    if _is_interrupt(sys.exc_info()[1]) and not isinstance(sys.exc_info()[1], KeyboardInterrupt):
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def _interrupt_bridge(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Make Ctrl-C stop a running DuckDB statement of ``con``.

    DuckDB's Python client notices SIGINT only now and then: a long INSERT often runs on to its end
    (measured: 6 of 8 SIGINTs lost). Python's C-level signal handler writes to a wakeup fd from any
    thread, so a watcher thread blocked on that fd calls ``con.interrupt()``; the statement fails with
    DuckDB's interrupt error, which :func:`_transaction` and ``_write`` turn into KeyboardInterrupt.
    Main thread only (where signals are handled); a previous wakeup fd (asyncio's) still gets every
    byte, and a SIGINT handler of the application's own is left in place.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(r)
        os.close(w)
        yield
        return
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.default_int_handler:
        signal.signal(signal.SIGINT, _ctrl_c_handler)

    def watch() -> None:
        while data := os.read(r, 512):
            if previous != -1:
                with contextlib.suppress(OSError):
                    os.write(previous, data)
            if signal.SIGINT in data:
                with contextlib.suppress(Exception):
                    con.interrupt()

    watcher = threading.Thread(target=watch, name="sparseeval-ctrl-c", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        if handler is signal.default_int_handler:
            signal.signal(signal.SIGINT, handler)
        signal.set_wakeup_fd(previous)
        os.close(w)  # the watcher reads EOF and ends
        watcher.join(timeout=1.0)
        os.close(r)


@contextlib.contextmanager
def _transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """BEGIN ... COMMIT, or ROLLBACK on any exception; Ctrl-C comes out as KeyboardInterrupt."""
    con.begin()
    try:
        yield
        con.commit()
    except BaseException as exc:
        _rollback_quietly(con)
        if _is_interrupt(exc) and not isinstance(exc, KeyboardInterrupt):
            raise KeyboardInterrupt("interrupted; the transaction was rolled back") from exc
        raise


def _run(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
    """Execute and fetch everything: DuckDB 2 refuses new work while a result is unfinished."""
    con.execute(sql, params)
    return con.fetchall()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _reason(exc: BaseException) -> str:
    """One line saying why a publish failed (an OSError without the temp file's name)."""
    if isinstance(exc, OSError) and exc.strerror:
        target = f": {exc.filename2}" if exc.filename2 else ""
        return f"{type(exc).__name__}: {exc.strerror}{target}"
    return f"{type(exc).__name__}: {_first_line(exc)}"


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, duckdb.IOException) and ("Could not set lock" in text or "Conflicting lock" in text)


def _lock_holder(exc: BaseException) -> tuple[str, int] | None:
    """(program, PID) of the process holding the lock, from DuckDB's message."""
    m = _LOCK_HOLDER.search(str(exc))
    return (m["program"], int(m["pid"])) if m else None


def pid_alive(pid: int) -> bool:
    """Whether a process with this PID exists on this machine (a zombie counts as dead)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _looks_like_python(program: str) -> bool:
    """Our writers are Python processes; a ``duckdb`` shell, DBeaver (java), ... never are."""
    name = Path(program).name.lower()
    return any(key in name for key in ("python", "pypy", "sparseeval", "dagster", "pytest"))


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


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


class Connections:
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

    @property
    def snapshot_path(self) -> Path:
        return self.path.with_name(self.path.name.removesuffix(".duckdb") + SNAPSHOT_SUFFIX)

    @property
    def marker_path(self) -> Path:
        """The write marker: who holds the write lock, and whether the snapshot is stale."""
        return self.path.with_name(f".{self.path.name}.writer")

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

    def check_is_store(self) -> None:
        """Refuse (one line) a database file that DuckDB opens but that is not a sparseeval store: it
        has tables and no ``store_meta``. A missing or empty-of-tables file is a new store."""
        if not self.path.is_file():
            return
        con = self._connect(self.path, read_only=True)
        try:
            tables = [r[0] for r in _run(con, "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
                                              "ORDER BY 1")]
        finally:
            con.close()
        if tables and "store_meta" not in tables:
            raise StoreLayoutError(
                f"{self.path}: a DuckDB database but not a sparseeval store (tables {', '.join(tables[:5])}, no "
                "store_meta); pass the store's file with --db, or a new path to create one")

    def _connect_rw(self, timeout: float | None = None) -> duckdb.DuckDBPyConnection:
        check_store_path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # a new file is created in the v1.4 storage format (an existing file keeps its own)
        return self._connect(self.path, read_only=False, timeout=timeout,
                             config={"storage_compatibility_version": STORAGE_VERSION})

    # --- the write marker ------------------------------------------------------------------------

    def read_marker(self) -> dict[str, Any] | None:
        """The write marker's content, None when there is none (the snapshot matches the database)."""
        try:
            text = self.marker_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            return {"state": "unknown", "reason": _first_line(exc)}
        try:
            marker = json.loads(text)
            return marker if isinstance(marker, dict) else {"state": "unknown"}
        except ValueError:
            return {"state": "unknown", "reason": "unreadable write marker"}

    def _set_marker(self, marker: Mapping[str, Any] | None) -> None:
        """Replace the write marker atomically (None removes it). Best effort: callers hold the lock."""
        try:
            if marker is None:
                self.marker_path.unlink(missing_ok=True)
                return
            tmp = self.marker_path.with_name(f"{self.marker_path.name}.{os.getpid()}.tmp")
            try:
                with tmp.open("w", encoding="utf-8") as fh:
                    json.dump(dict(marker), fh)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.marker_path)
            finally:
                tmp.unlink(missing_ok=True)
        except OSError as exc:
            log.debug("could not update the write marker %s: %s", self.marker_path, exc)

    def _is_own_writer(self, pid: int) -> bool:
        marker = self.read_marker()
        return bool(marker) and marker.get("state") == "writing" and marker.get("pid") == pid

    def snapshot_state(self) -> tuple[str, str]:
        """``(state, detail)``: ``fresh``, ``writing`` (a write in progress), ``stale`` or ``missing``."""
        if not self.snapshot_path.exists():
            return "missing", f"{self.snapshot_path} does not exist"
        marker = self.read_marker()
        if marker is None:
            return "fresh", ""
        pid = marker.get("pid")
        if marker.get("state") == "writing" and isinstance(pid, int) and pid_alive(pid):
            return "writing", f"a write by PID {pid} is in progress"
        if marker.get("state") == "writing":
            return "stale", f"a writer (PID {pid}) stopped before it published the snapshot"
        return "stale", str(marker.get("reason") or "the last publish failed")

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

    def _publish_after_commit(self, con: duckdb.DuckDBPyConnection) -> None:
        try:
            _run(con, "CHECKPOINT")
            self._publish(con)
        except BaseException as exc:
            interrupted = _is_interrupt(exc)
            reason = "interrupted by Ctrl-C" if interrupted else _reason(exc)
            self.last_publish_error = reason
            self._set_marker({"state": "stale", "pid": os.getpid(), "reason": reason, "since": time.time()})
            if interrupted:
                raise PublishInterrupted(f"{self.path}: stored, but Ctrl-C stopped the snapshot refresh") from exc
            if not isinstance(exc, Exception):
                raise
            log.warning("%s: stored, but the read-only snapshot %s was not refreshed: %s (the next write "
                        "republishes it; or run `sparseeval doctor --db %s --repair`)",
                        self.path, self.snapshot_path, reason, self.path)
            log.debug("publish failure", exc_info=True)
        else:
            self._set_marker(None)

    def _schema_version_expected(self) -> str | None:
        m = re.search(r"'schema_version'\s*,\s*'([^']+)'", (SQL_DIR / "schema.sql").read_text(encoding="utf-8"))
        return m.group(1) if m else None

    def _execute_script(self, con: duckdb.DuckDBPyConnection) -> None:
        old = _run(con, "SELECT 1 FROM duckdb_tables() WHERE table_name = 'responses' AND schema_name = 'main'")
        if old:
            raise StoreLayoutError(
                f"{self.path}: written by an older sparseeval (layout 1, no run history); "
                "move it aside and ingest the sources again into a new store")
        tables = [r[0] for r in _run(con, "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
                                          "ORDER BY 1")]
        if tables and "store_meta" not in tables:  # someone else's DuckDB file: never write into it
            raise StoreLayoutError(
                f"{self.path}: a DuckDB database but not a sparseeval store (tables {', '.join(tables[:5])}, no "
                "store_meta); pass the store's file with --db, or a new path to create one")
        if "store_meta" in tables:
            found = _run(con, "SELECT value FROM store_meta WHERE key = 'schema_version'")
            expected = self._schema_version_expected()
            if found and expected and found[0][0] != expected:
                raise StoreLayoutError(
                    f"{self.path}: store layout {found[0][0]}, but this sparseeval writes layout {expected}; "
                    "use the matching sparseeval, or ingest the sources again into a new store")
        with _transaction(con):
            for name in ("schema.sql", "views.sql"):
                _run(con, (SQL_DIR / name).read_text(encoding="utf-8"))

    # --- publishing the snapshot -------------------------------------------------------------------

    def temp_files(self, *, dead_only: bool = True) -> list[Path]:
        """Temp files a publish or marker update left behind (by a dead process, unless ``dead_only=False``)."""
        found = []
        for pattern in (f".{self.snapshot_path.name}.*.tmp", f"{self.marker_path.name}.*.tmp"):
            for tmp in self.path.parent.glob(pattern):
                m = _TEMP_PID.search(tmp.name)
                if not dead_only or m is None or not pid_alive(int(m.group(1))):
                    found.append(tmp)
        return sorted(found)

    def _remove_temp_files(self, *, dead_only: bool) -> list[Path]:
        removed = []
        for tmp in self.temp_files(dead_only=dead_only):
            m = _TEMP_PID.search(tmp.name)
            if m and int(m.group(1)) == os.getpid():
                continue
            try:
                tmp.unlink()
                removed.append(tmp)
            except OSError as exc:
                log.debug("could not remove %s: %s", tmp, exc)
        if removed:
            log.info("removed %d temp file(s) left by an interrupted publish: %s", len(removed),
                     ", ".join(p.name for p in removed))
        return removed

    def _copy_snapshot(self, src: Path, dst: Path) -> None:
        """Byte copy with fsync (a method so fault tests can make it fail mid-copy)."""
        with src.open("rb") as fin, dst.open("wb") as fout:
            while block := fin.read(1 << 22):
                fout.write(block)
            fout.flush()
            os.fsync(fout.fileno())

    def _publish(self, con: duckdb.DuckDBPyConnection | None = None) -> None:
        """Copy the checkpointed file to the snapshot atomically (the caller holds the write lock).

        ``os.replace`` gives the path a new file: readers (and anyone who opened the old snapshot
        read-write by mistake) keep the file they have open, new readers get the new one. Temp files
        of earlier publishes that were killed are removed first (we hold the lock: nobody else publishes).
        """
        t0 = time.perf_counter()
        self._remove_temp_files(dead_only=False)
        tmp = self.snapshot_path.with_name(f".{self.snapshot_path.name}.{os.getpid()}.tmp")
        try:
            self._copy_snapshot(self.path, tmp)
            os.replace(tmp, self.snapshot_path)
            _fsync_dir(self.snapshot_path.parent)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            self.publish_count += 1
            self.publish_seconds += time.perf_counter() - t0

    def refresh_snapshot(self, timeout: float | None = None) -> bool:
        """Republish the snapshot from the database if the write lock is free within ``timeout``.

        Returns False when one of our writers kept the lock (it publishes itself) or the publish failed
        (logged); raises :class:`StoreLockedError` when a foreign process holds the database and
        :class:`StoreDamagedError` when it cannot be opened.
        """
        return self._try_refresh(timeout) is None

    def _try_refresh(self, timeout: float | None = None) -> str | None:
        """None when republished, ``_BUSY`` when our own writer kept the lock, else why the publish failed."""
        try:
            con = self._connect_rw(timeout=self.reader_refresh_wait if timeout is None else timeout)
        except StoreLockedError as exc:
            if exc.foreign:
                raise
            log.debug("snapshot not refreshed: %s", exc)
            return _BUSY
        try:
            before = self.read_marker()
            self._set_marker({"state": "writing", "pid": os.getpid(), "since": time.time()})
            try:
                _run(con, "CHECKPOINT")
                self._publish(con)
            except Exception as exc:
                reason = _reason(exc)
                self._set_marker(before or {"state": "stale", "pid": os.getpid(), "reason": reason})
                log.warning("could not republish the snapshot %s: %s", self.snapshot_path, reason)
                return reason
            except BaseException:
                self._set_marker(before)
                raise
            self._set_marker(None)
            log.info("republished the snapshot %s", self.snapshot_path)
            return None
        finally:
            con.close()

    @contextlib.contextmanager
    def publishing_once(self) -> Iterator[None]:
        """Writes inside the block publish the snapshot once, when it ends, instead of once each.

        A publish copies the whole database, so an ingest of many units (or a pipeline step with
        several writes) would cost O(database size) per write; batched, it costs one copy. Readers
        meanwhile see the snapshot of before the batch (whole transactions only, as always) or
        republish it themselves between two writes. The final publish never raises for a failure
        (it sets :attr:`last_publish_error`, like :meth:`_write`).
        """
        if self._deferring or not self.snapshot:
            yield
            return
        self._deferring, self._deferred = True, False
        try:
            yield
        finally:
            self._deferring = False
            if self._deferred:
                self._deferred = False
                reason = self._try_refresh(timeout=self.lock_timeout)
                self.last_publish_error = None if reason is None else (
                    "another writer holds the store; it publishes the snapshot" if reason == _BUSY else reason)

    def apply_schema(self) -> None:
        """Create tables, sequences and views if missing (idempotent) and publish the snapshot."""
        self._schema_applied = False
        with self._write():
            pass

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
