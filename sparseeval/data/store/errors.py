"""The store's own errors: what a user reads when the database itself (not an input file) is the problem.

Each is one line naming the file and what to do (``sparseeval doctor``, another ``--db``), so the commands
print them as they are; they live apart from the code that raises them because the commands, the pipeline
and the doctor catch them without opening a connection.
"""

from __future__ import annotations

from sparseeval.core.errors import UserError


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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
