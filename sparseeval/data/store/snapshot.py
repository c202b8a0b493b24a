"""The read-only snapshot ``<db>.snapshot.duckdb`` and the write marker that says whether it is current.

Readers never open the database (a DuckDB file open for writing locks out every other process), only its
snapshot, which a writer republishes after each commit while still holding the lock: an atomic copy
(temp file, fsync, ``os.replace``), so a reader sees whole transactions only. The write marker
``.<db>.writer`` names the writer holding the lock and marks the snapshot stale when a publish failed or
its writer died; :meth:`SnapshotPublishing.publishing_once` batches many writes into one publish. This is
a mixin of :class:`~sparseeval.data.store.connection.Connections` (see that module for the whole design).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import duckdb

from sparseeval.data.store.errors import PublishInterrupted, StoreLockedError, _first_line
from sparseeval.data.store.locking import pid_alive
from sparseeval.data.store.transactions import _is_interrupt, _run

#: one logger for the store's connections, named as before they were split into modules (what a logging
#: configuration, and the fault tests, filter on)
log = logging.getLogger("sparseeval.data.store.connection")

SNAPSHOT_SUFFIX = ".snapshot.duckdb"

_TEMP_PID = re.compile(r"\.(\d+)\.tmp$")
_BUSY = "busy: one of our writers holds the database"


def _reason(exc: BaseException) -> str:
    """One line saying why a publish failed (an OSError without the temp file's name)."""
    if isinstance(exc, OSError) and exc.strerror:
        target = f": {exc.filename2}" if exc.filename2 else ""
        return f"{type(exc).__name__}: {exc.strerror}{target}"
    return f"{type(exc).__name__}: {_first_line(exc)}"


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class SnapshotPublishing:
    """The write marker and publishing the snapshot (a mixin of :class:`~sparseeval.data.store.connection.Connections`,
    which provides the path, the settings below and the write connection)."""

    path: Path
    snapshot: bool
    lock_timeout: float
    reader_refresh_wait: float
    last_publish_error: str | None
    publish_count: int
    publish_seconds: float
    _deferring: bool
    _deferred: bool
    _connect_rw: Callable[..., duckdb.DuckDBPyConnection]

    @property
    def snapshot_path(self) -> Path:
        return self.path.with_name(self.path.name.removesuffix(".duckdb") + SNAPSHOT_SUFFIX)

    @property
    def marker_path(self) -> Path:
        """The write marker: who holds the write lock, and whether the snapshot is stale."""
        return self.path.with_name(f".{self.path.name}.writer")

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

