"""One write transaction on a DuckDB connection, and Ctrl-C inside it.

A transaction commits whole or rolls back whole, and Ctrl-C must always come out as KeyboardInterrupt after
a rollback: DuckDB reports an interrupted statement in several forms (its own interrupt error, a
``RuntimeError('Query interrupted')``, a KeyboardInterrupt wrapped by a Python callback) and notices SIGINT
only now and then, so this module recognises every form and bridges SIGINT to ``con.interrupt()``.
:mod:`.connection` uses it for every write; the store's writers use :func:`_transaction` and :func:`_run`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import duckdb


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

