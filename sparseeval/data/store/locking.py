"""Who holds a DuckDB file's lock: one of our writers (wait for it) or a foreign program (fail fast, naming it).

DuckDB locks a file for writing against every other process, readers included, and says who holds the lock
only inside its error message. Reading that message, and telling a live sparseeval writer from an analyst's
``duckdb`` shell or a dead process, is what lets :mod:`.connection` retry for our writers and refuse within
seconds for anything else.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import duckdb

_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (?P<program>.*?) \(PID (?P<pid>\d+)\)")


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
