"""The store's layout: the DDL and views applied once per connection object, and refusing foreign files.

A store written by another layout of sparseeval, or a DuckDB file that is not a store at all, must be
refused before anything is written into it, in one line saying what to do. The SQL itself lives in the
top-level ``sql/`` folder (shipped as ``sparseeval/sql`` in a wheel); this mixin of
:class:`~sparseeval.data.store.connection.Connections` finds it, checks the layout and applies it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from sparseeval.data.store.errors import StoreLayoutError
from sparseeval.data.store.transactions import _run, _transaction


def _sql_dir() -> Path:
    """The DDL and views: inside the installed package (a wheel ships ``sql/`` as ``sparseeval/sql``),
    else the source checkout's top-level ``sql/`` (editable installs and the repository itself)."""
    package = Path(__file__).resolve().parents[2]  # sparseeval/ (this file: sparseeval/data/store/schema.py)
    installed = package / "sql"
    return installed if (installed / "schema.sql").is_file() else package.parent / "sql"


SQL_DIR = _sql_dir()


class SchemaLayout:
    """Applying and checking the store's layout (a mixin of :class:`~sparseeval.data.store.connection.Connections`,
    which provides the path, the connections and the write transaction)."""

    path: Path
    _schema_applied: bool
    _connect: Callable[..., duckdb.DuckDBPyConnection]
    _write: Callable[[], contextlib.AbstractContextManager[Any]]

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
    def apply_schema(self) -> None:
        """Create tables, sequences and views if missing (idempotent) and publish the snapshot."""
        self._schema_applied = False
        with self._write():
            pass
