"""``sparseeval sql [QUERY]``: SQL on the store's read-only snapshot, one-shot or at a prompt.

One-shot: ``sparseeval sql "SELECT * FROM method_ranking WHERE rank = 1"`` prints a table;
``--csv``, ``--json`` (an array of objects) or ``--parquet FILE`` write the result instead. A query
may hold several statements (``SET ...; SELECT ...``): the last one's result is shown. ``-`` as the
query, or a pipe on stdin, reads the SQL from stdin. Without a query at a terminal (or with ``-i``)
it opens a prompt: statements end with ``;``, ``.help`` lists the dot commands.

Read-only by construction: it opens the snapshot ``<db>.snapshot.duckdb`` that the pipeline
republishes after every write (see :mod:`sparseeval.data.store.connection`), never the database, so
it runs while the pipeline writes and never blocks it; a statement that would write is refused by
DuckDB. ``--views`` lists the analyst views with what they hold and their columns; recipes are in
``docs/analysts.md``. The snapshot is in DuckDB's v1.4 storage format, so any DuckDB 1.4+ client
(``duckdb -readonly data/sparseeval.snapshot.duckdb``) reads the same file.

Module-level imports are the standard library only: ``sparseeval --help`` must stay fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparseeval.interfaces.commands.arguments import positive_int, settings_epilog, writable_db

if TYPE_CHECKING:  # annotations only: duckdb is imported when a query runs
    from duckdb import DuckDBPyConnection

SNAPSHOT_SUFFIX = ".snapshot.duckdb"  # the same as sparseeval.data.store.connection.SNAPSHOT_SUFFIX

HELP = """\
.views            the analyst views, what they hold, their columns
.tables           the tables
.schema NAME      columns of a table or view
.mode MODE        output of the next statements: table (default), csv or json
.refresh          reopen the newest snapshot (the pipeline republishes it after every write)
.help             this list
.quit             leave (or Ctrl-D)
Statements end with ';' and may span lines; Ctrl-C drops the statement being typed."""


DESCRIPTION = """\
Query the store with SQL, read-only: one query, or an interactive prompt.

sparseeval sql "SELECT * FROM method_ranking WHERE rank = 1" prints a table; --csv FILE, --json FILE
(- for standard output) or --parquet FILE write the result instead. A query may hold several
statements (SET ...; SELECT ...): the last one's result is shown. '-' as the query, or a pipe on
standard input, reads the SQL from there. Without a query at a terminal (or with -i) it opens a
prompt: statements end with ';', .help lists the dot commands.

It reads the snapshot the pipeline republishes after every write, never the database itself, so it
runs while the pipeline writes and never blocks it; a statement that would write is refused.
--views lists the analyst views with what they hold and their columns (recipes: docs/analysts.md).
Any DuckDB 1.4+ client reads the same snapshot file (duckdb -readonly data/sparseeval.snapshot.duckdb).

examples:
  sparseeval sql --views
  sparseeval sql "SELECT * FROM predictions_vs_truth" --csv predictions.csv"""


class SqlError(RuntimeError):
    """A problem to report in one line (no store, unreadable snapshot); exit code 2."""


# --- opening the snapshot ---------------------------------------------------------------------------

def open_snapshot(db: Path | None) -> tuple[Any, Path]:
    """(read-only DuckDB connection, the file it reads) for the store ``db`` (default: the settings').

    ``db`` may also name a snapshot file itself (a copy handed to someone), opened as it is.
    """
    import duckdb

    if db is None:
        from sparseeval.core import settings

        db = settings.db_path()
    db = Path(db)
    if db.name.endswith(SNAPSHOT_SUFFIX):
        if not db.is_file():
            raise SqlError(f"{db}: no such snapshot")
        return _connect_file(duckdb, db), db
    # Fast path (no import of the store package, ~0.5 s): no write marker means the snapshot matches
    # the database (connection.py removes the marker once a publish is done). Anything else (a write
    # in progress, a stale or missing snapshot) goes through Connections, which republishes if needed.
    snapshot = db.with_name(db.name.removesuffix(".duckdb") + SNAPSHOT_SUFFIX)
    if db.is_file() and snapshot.is_file() and not db.with_name(f".{db.name}.writer").exists():
        with contextlib.suppress(SqlError):
            return _connect_file(duckdb, snapshot), snapshot
    from sparseeval.data.store.connection import Connections, StoreError

    try:
        conns = Connections(db, lock_timeout=10.0)
    except StoreError as exc:
        raise SqlError(str(exc)) from exc
    if not conns.path.exists() and not conns.snapshot_path.exists():
        raise SqlError(f"no store at {conns.path}: run `make run` (or `sparseeval ingest PATH`) first, "
                       f"or pass --db FILE")
    if not conns.path.exists():  # only the snapshot was copied here: read it as it is
        return _connect_file(duckdb, conns.snapshot_path), conns.snapshot_path
    try:
        return conns.open_readonly(), conns.snapshot_path
    except StoreError as exc:
        raise SqlError(str(exc)) from exc


def _connect_file(duckdb: Any, path: Path) -> DuckDBPyConnection:
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise SqlError(f"{path}: cannot open: {_first_line(exc)}") from exc
    try:
        con.execute("SET enable_progress_bar = false").fetchall()
        con.execute("SELECT count(*) FROM duckdb_tables()").fetchall()  # reads the catalog: a damaged file fails
    except duckdb.Error as exc:
        con.close()
        raise SqlError(f"{path}: cannot read: {_first_line(exc)}") from exc
    return con


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _error_text(exc: BaseException) -> str:
    text = _first_line(exc)
    if "read-only mode" in text or "read only mode" in text:
        text += " (sparseeval sql reads the published snapshot and never writes)"
    return text


# --- the analyst views ------------------------------------------------------------------------------

def view_descriptions() -> dict[str, str]:
    """The ``--`` comment right above each ``CREATE ... VIEW`` in ``sql/*.sql``, by view name."""
    import re

    from sparseeval.data.store.connection import SQL_DIR

    sql_dir = SQL_DIR
    out: dict[str, str] = {}
    pattern = re.compile(r"((?:^--[^\n]*\n)+)CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+(\w+)", re.MULTILINE | re.I)
    for name in ("schema.sql", "views.sql"):
        path = sql_dir / name
        if not path.is_file():
            continue
        for m in pattern.finditer(path.read_text(encoding="utf-8")):
            lines = [line.removeprefix("--").strip() for line in m.group(1).splitlines()]
            out[m.group(2)] = " ".join(line for line in lines if line)
    return out


def list_views(con: DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every view of the store: name, description (its DuckDB comment, else the SQL file's), columns."""
    rows = con.execute(
        "SELECT v.view_name, v.comment, list(c.column_name ORDER BY c.column_index) "
        "FROM duckdb_views() v JOIN duckdb_columns() c "
        "  ON c.table_name = v.view_name AND c.schema_name = v.schema_name AND c.database_name = v.database_name "
        "WHERE NOT v.internal AND v.schema_name = 'main' "
        "GROUP BY ALL ORDER BY v.view_name").fetchall()
    described = view_descriptions()
    return [{"view": name, "description": comment or described.get(name, ""), "columns": list(columns)}
            for name, comment, columns in rows]


def print_views(views: list[dict[str, Any]], *, as_json: bool = False) -> None:
    if as_json:
        import json

        print(json.dumps(views, indent=1))
        return
    import textwrap

    for v in views:
        print(v["view"])
        if v["description"]:
            print(textwrap.fill(v["description"], 100, initial_indent="    ", subsequent_indent="    "))
        print(textwrap.fill("columns: " + ", ".join(v["columns"]), 100, initial_indent="    ",
                            subsequent_indent="             "))


# --- running a query --------------------------------------------------------------------------------

def _jsonable(v: Any) -> Any:
    import datetime
    import decimal
    import math

    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, datetime.date | datetime.time):
        return v.isoformat()
    if isinstance(v, datetime.timedelta):
        return v.total_seconds()
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v).hex()
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    return str(v)


def run_query(con: DuckDBPyConnection, query: str, *, fmt: str = "table", out: Any = None, parquet: Path | None = None,
              max_rows: int = 100) -> int:
    """Run ``query`` (one or more statements) and write the last statement's result; the row count
    (-1 for the table view, which only renders what it shows)."""
    import csv
    import json

    out = out or sys.stdout
    statements = con.extract_statements(query)
    if not statements:
        raise SqlError("no SQL statement given")
    for st in statements[:-1]:
        con.execute(st.query).fetchall()
    last = statements[-1].query
    if parquet is not None:
        rel = con.sql(last)
        rel.write_parquet(str(parquet))
        n = int(con.execute("SELECT count(*) FROM read_parquet(?)", [str(parquet)]).fetchone()[0])
        print(f"wrote {n} rows to {parquet}", file=sys.stderr)
        return n
    if fmt == "table":
        rel = con.sql(last)
        if rel is not None and rel.columns != ["Success"]:
            if out is sys.stdout:
                rel.show(max_rows=max_rows)
            else:
                out.write(rel.preview(max_rows) + "\n")
        return -1
    cur = con.execute(last)
    columns = [d[0] for d in cur.description or []]
    n = 0
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        while batch := cur.fetchmany(10_000):
            writer.writerows(["" if v is None else v for v in row] for row in batch)
            n += len(batch)
        return n
    out.write("[")
    while batch := cur.fetchmany(10_000):
        for row in batch:
            out.write(("\n" if n == 0 else ",\n") + json.dumps(dict(zip(columns, map(_jsonable, row), strict=True))))
            n += 1
    out.write("\n]\n" if n else "]\n")
    return n


# --- the prompt -------------------------------------------------------------------------------------

class Prompt:
    """A small read-eval-print loop on one snapshot connection (temp views and SETs persist until
    ``.refresh``, which reopens the newest snapshot)."""

    def __init__(self, db: Path | None, *, fmt: str = "table", max_rows: int = 100) -> None:
        self.db, self.fmt, self.max_rows = db, fmt, max_rows
        self.con, self.path = open_snapshot(db)
        self.inode = self._inode()
        self.noted: int | None = None

    def _inode(self) -> int | None:
        try:
            return self.path.stat().st_ino
        except OSError:
            return None

    def refresh(self) -> None:
        self.con.close()
        self.con, self.path = open_snapshot(self.db)
        self.inode = self._inode()
        print(f"reading {self.path}")

    def note_newer(self) -> None:
        now = self._inode()
        if now is not None and now != self.inode and now != self.noted:
            self.noted = now
            print("note: the pipeline has published a newer snapshot; `.refresh` reads it "
                  "(temp views and settings of this session are then dropped)")

    def command(self, line: str) -> bool:
        """Run a dot command; False to leave."""
        word, _, rest = line.strip().partition(" ")
        rest = rest.strip().rstrip(";")
        if word in (".quit", ".exit", ".q"):
            return False
        if word == ".help":
            print(HELP)
        elif word == ".views":
            print_views(list_views(self.con))
        elif word == ".tables":
            names = self.con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
                                     "ORDER BY 1").fetchall()
            print(", ".join(n for (n,) in names))
        elif word == ".schema" and rest:
            self.statement(f'DESCRIBE "{rest}"', fmt="table")
        elif word == ".mode" and rest in ("table", "csv", "json"):
            self.fmt = rest
        elif word == ".refresh":
            self.refresh()
        else:
            print(f"unknown command {line.strip()!r}; .help lists them")
        return True

    def statement(self, sql: str, fmt: str | None = None) -> None:
        import duckdb

        self.note_newer()
        try:
            run_query(self.con, sql, fmt=fmt or self.fmt, max_rows=self.max_rows)
        except (duckdb.Error, SqlError) as exc:
            print(f"error: {_error_text(exc)}")

    def loop(self) -> int:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (line editing and history for input())
        interactive = sys.stdin.isatty()
        if interactive:
            print(f"sparseeval sql on {self.path} (read-only). End statements with ';'. "
                  f".views lists the views, .help the commands.")
        buffer: list[str] = []
        while True:
            try:
                line = input("   ...> " if buffer else "sql> ")
            except EOFError:
                if buffer:
                    self.statement("\n".join(buffer))
                if interactive:
                    print()
                return 0
            except KeyboardInterrupt:
                print("^C")
                buffer = []
                continue
            if not buffer and line.strip().startswith("."):
                if not self.command(line):
                    return 0
                continue
            if not buffer and not line.strip():
                continue
            buffer.append(line)
            if line.rstrip().endswith(";"):
                try:
                    self.statement("\n".join(buffer))
                except KeyboardInterrupt:
                    print("^C")
                buffer = []

    def close(self) -> None:
        self.con.close()


# --- command ------------------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> int:
    import duckdb

    fmt = "csv" if args.csv is not None else "json" if args.json is not None else "table"
    target = args.csv if args.csv is not None else args.json
    query = args.query
    if query == "-" or (query is None and not args.interactive and not args.views and not sys.stdin.isatty()):
        query = sys.stdin.read()
    try:
        if args.views:
            con, _ = open_snapshot(args.db)
            try:
                views = list_views(con)
            finally:
                con.close()
            if args.json not in (None, "-"):
                from sparseeval.core.atomic import atomic_write_text

                atomic_write_text(args.json, json.dumps(views, indent=1) + "\n")
            else:
                print_views(views, as_json=args.json == "-")
            return 0
        if query is None:
            if target not in (None, "-"):
                raise SqlError(f"--{fmt} FILE writes a query's result; the prompt prints (use .mode {fmt})")
            prompt = Prompt(args.db, fmt=fmt, max_rows=args.max_rows)
            try:
                return prompt.loop()
            finally:
                prompt.close()
        con, _ = open_snapshot(args.db)
        try:
            if target in (None, "-"):
                run_query(con, query, fmt=fmt, parquet=args.parquet, max_rows=args.max_rows)
            else:
                from sparseeval.core.atomic import atomic_write

                def write(path: Path) -> None:
                    with path.open("w", encoding="utf-8", newline="") as fh:
                        n = run_query(con, query, fmt=fmt, out=fh)
                    print(f"wrote {n} rows to {target}", file=sys.stderr)

                atomic_write(Path(target), write)
        finally:
            con.close()
    except SqlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except duckdb.Error as exc:
        print(f"error: {_error_text(exc)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `sparseeval sql ... | head`
        return 0
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from sparseeval.core import settings
    from sparseeval.interfaces.commands.arguments import output_file

    p = subparsers.add_parser("sql", help="SQL on the store's read-only snapshot (one-shot or a prompt)",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=settings_epilog("db", "data_dir"))
    p.add_argument("query", nargs="?", default=None,
                   help="SQL to run ('-': read it from stdin); none: an interactive prompt")
    p.add_argument("--db", type=writable_db, default=None, metavar="FILE",
                   help="the store's DuckDB file (its snapshot is read), or a snapshot file itself ("
                        + settings.overrides("db") + ", else <data dir>/sparseeval.duckdb)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--csv", type=output_file, metavar="FILE",
                     help="write the result as CSV to FILE ('-': to standard output)")
    out.add_argument("--json", type=output_file, metavar="FILE",
                     help="write the result as a JSON array of objects to FILE ('-': to standard output); with "
                          "--views, the views")
    out.add_argument("--parquet", type=Path, metavar="FILE", help="write the result to a Parquet file")
    p.add_argument("--views", action="store_true", help="list the analyst views and their columns, then exit")
    p.add_argument("-i", "--interactive", action="store_true",
                   help="the prompt even when stdin is not a terminal")
    p.add_argument("--max-rows", type=positive_int, default=100, metavar="N",
                   help="rows the table shows (default 100; --csv, --json and --parquet write every row)")
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """``python -m sparseeval.interfaces.commands.sql``: the same command without importing the others."""
    parser = argparse.ArgumentParser(prog="sparseeval sql")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sql", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
