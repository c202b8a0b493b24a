"""What ``sparseeval doctor`` checks, and what ``--repair`` fixes.

The checks: the database opens and every table reads to the end (an order-independent fingerprint of
every value), its layout version, the tables ``schema.sql`` defines, a few consistency rules between
tables (:data:`INVARIANTS`), whether the read-only snapshot is fresh and holds the same data (or is
stale, damaged, missing, held read-write by someone), and temp files left by a killed publish. The
repair republishes the snapshot from the database and removes those temp files; a database that does
not open is never touched (the result says how to restore the last published snapshot).

It lives with the store because it reads the files below the store's API: it opens the database and
the snapshot itself (a damaged file must be reported, not raise), runs SQL of its own and uses the
store's connection, lock and temp-file helpers. The command (:mod:`sparseeval.interfaces.commands.doctor`)
only parses its arguments, prints the :class:`Check` results and sets the exit code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb

from sparseeval.data.store.connection import (
    SQL_DIR,
    Connections,
    StoreDamagedError,
    StoreError,
    StoreLockedError,
    _first_line,
    _is_lock_error,
    _lock_holder,
    _run,
)

__all__ = ["INVARIANTS", "NOTE", "OK", "PROBLEM", "SKIPPED", "Check", "check_store", "repair_store"]

#: consistency rules: (what must hold, SQL counting the rows that break it); skipped when a table lacks
INVARIANTS = (
    ("superseded runs point to runs",
     "SELECT count(*) FROM runs WHERE superseded_by IS NOT NULL AND superseded_by NOT IN (SELECT run_id FROM runs)"),
    ("runs belong to ingests",
     "SELECT count(*) FROM runs WHERE ingest_id NOT IN (SELECT ingest_id FROM ingests)"),
    ("response rows belong to runs",
     "SELECT count(*) FROM response_rows WHERE run_id NOT IN (SELECT run_id FROM runs)"),
    ("stored ingests have runs",
     "SELECT count(*) FROM ingests i WHERE status IN ('ok', 'partial') "
     "AND coalesce(n_responses, 0) + coalesce(n_scores, 0) > 0 "
     "AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.ingest_id = i.ingest_id)"),
    ("anchors belong to anchor sets",
     "SELECT count(*) FROM anchors WHERE anchor_set_id NOT IN (SELECT anchor_set_id FROM anchor_sets)"),
)

OK, PROBLEM, NOTE, SKIPPED = "ok", "PROBLEM", "note", "skipped"


@dataclass
class Check:
    """One line of the doctor's report: what was checked, its status (:data:`OK`, :data:`PROBLEM`,
    :data:`NOTE`, :data:`SKIPPED`) and what was found."""

    name: str
    status: str
    detail: str = ""


def _schema_expectations() -> tuple[str | None, list[str]]:
    text = (SQL_DIR / "schema.sql").read_text(encoding="utf-8")
    version = re.search(r"'schema_version'\s*,\s*'([^']+)'", text)
    tables = re.findall(r"CREATE TABLE IF NOT EXISTS\s+(\w+)", text, flags=re.IGNORECASE)
    return (version.group(1) if version else None), tables


def _fingerprints(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[int, int]]:
    """(rows, order-independent hash of every value) per table: reads every block of every column."""
    tables = [r[0] for r in _run(con, "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
                                      "ORDER BY table_name")]
    return {t: tuple(_run(con, f'SELECT count(*), coalesce(bit_xor(hash(x)), 0) FROM "{t}" x')[0]) for t in tables}


def _storage(con: duckdb.DuckDBPyConnection) -> str:
    rows = _run(con, "SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = current_database()")
    return str(rows[0][0]) if rows and rows[0][0] else "unknown"


def _check_database(conns: Connections, wait: float, checks: list[Check]) -> dict[str, tuple[int, int]] | None:
    """Database checks; returns the tables' fingerprints when the database read completely."""
    db = conns.path
    if not db.exists():
        checks.append(Check("database", PROBLEM, f"{db} does not exist"))
        return None
    try:
        con = conns._connect(db, read_only=True, timeout=wait)
    except StoreLockedError as exc:
        checks.append(Check("database", PROBLEM, str(exc)))
        return None
    except StoreDamagedError as exc:
        checks.append(Check("database", PROBLEM, f"{exc}".replace(f" (check it with `sparseeval doctor --db {db}`)",
                                                                   "")))
        return None
    try:
        size = db.stat().st_size / 1e6
        checks.append(Check("database", OK, f"{db} opens ({size:.1f} MB, DuckDB storage {_storage(con)})"))
        version, expected_tables = _schema_expectations()
        try:
            found = _run(con, "SELECT value FROM store_meta WHERE key = 'schema_version'")
        except duckdb.Error:
            found = []
        if not found:
            checks.append(Check("schema version", PROBLEM, "store_meta has no schema_version: not a sparseeval "
                                                           "store, or never written"))
        elif version is not None and found[0][0] != version:
            checks.append(Check("schema version", PROBLEM, f"layout {found[0][0]}; this sparseeval writes {version}"))
        else:
            checks.append(Check("schema version", OK, f"layout {found[0][0]}"))
        present = {r[0] for r in _run(con, "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'")}
        missing = [t for t in expected_tables if t not in present]
        checks.append(Check("tables", PROBLEM if missing else OK,
                            f"missing: {', '.join(missing)}" if missing else f"{len(expected_tables)} tables present"))
        try:
            prints = _fingerprints(con)
        except duckdb.Error as exc:
            checks.append(Check("data", PROBLEM, f"a table does not read to the end: {_first_line(exc)}"))
            return None
        checks.append(Check("data", OK, f"{sum(n for n, _ in prints.values())} rows in {len(prints)} tables "
                                        "read completely"))
        for name, sql in INVARIANTS:
            try:
                bad = int(_run(con, sql)[0][0])
            except (duckdb.CatalogException, duckdb.BinderException) as exc:
                checks.append(Check(name, SKIPPED, _first_line(exc)))
                continue
            checks.append(Check(name, PROBLEM if bad else OK, f"{bad} rows break it" if bad else ""))
        return prints
    finally:
        con.close()


def _check_snapshot(conns: Connections, db_prints: dict[str, tuple[int, int]] | None,
                    checks: list[Check]) -> None:
    snap = conns.snapshot_path
    state, detail = conns.snapshot_state()
    if state == "missing":
        checks.append(Check("snapshot", PROBLEM, f"{snap} is missing (readers recreate it on their next read)"))
        return
    try:
        con = duckdb.connect(str(snap), read_only=True)
    except duckdb.Error as exc:
        if _is_lock_error(exc):
            holder = _lock_holder(exc)
            who = f"{holder[0]} (PID {holder[1]})" if holder else "another process"
            checks.append(Check("snapshot", PROBLEM, f"{snap} is held read-write by {who}; readers cannot open "
                                                     "it until it is republished"))
        else:
            checks.append(Check("snapshot", PROBLEM, f"{snap} is damaged: {_first_line(exc)}"))
        return
    try:
        try:
            prints = _fingerprints(con)
            storage = _storage(con)
        except duckdb.Error as exc:
            checks.append(Check("snapshot", PROBLEM, f"{snap} is damaged: {_first_line(exc)}"))
            return
    finally:
        con.close()
    if state == "stale":
        checks.append(Check("snapshot", PROBLEM, f"older than the database: {detail}"))
    elif state == "writing":
        checks.append(Check("snapshot", NOTE, f"{detail}; the snapshot shows the state before it"))
    elif db_prints is not None and prints != db_prints:
        differ = sorted(t for t in set(prints) | set(db_prints) if prints.get(t) != db_prints.get(t))
        checks.append(Check("snapshot", PROBLEM, f"differs from the database in: {', '.join(differ)}"))
    else:
        checks.append(Check("snapshot", OK, "matches the database" if db_prints is not None else "reads completely"))
    readable = "DuckDB 1.4+ and 2.x clients read it" if storage.startswith("v1.") else \
        "only DuckDB 2.x clients read it (the database was created by an older sparseeval)"
    checks.append(Check("snapshot format", NOTE, f"storage {storage}: {readable}"))


def check_store(conns: Connections, *, wait: float = 10.0) -> list[Check]:
    """Every check, in order; the store is not changed."""
    checks: list[Check] = []
    prints = _check_database(conns, wait, checks)
    _check_snapshot(conns, prints, checks)
    temps = conns.temp_files(dead_only=True)
    checks.append(Check("temp files", PROBLEM if temps else OK,
                        "left by a killed publish: " + ", ".join(p.name for p in temps) if temps else "none"))
    return checks


def repair_store(conns: Connections, checks: list[Check], *, wait: float = 10.0) -> list[str]:
    """Fix what is fixable: republish the snapshot, remove temp files. Returns what was done."""
    done: list[str] = []
    problems = {c.name for c in checks if c.status == PROBLEM}
    db_ok = not problems & {"database", "data"}
    if "snapshot" in problems and db_ok:
        try:
            if conns.refresh_snapshot(timeout=wait):
                done.append(f"republished the snapshot {conns.snapshot_path}")
            else:
                done.append("could not republish the snapshot: the database stayed locked or the copy failed")
        except StoreError as exc:
            done.append(f"could not republish the snapshot: {exc}")
    if "temp files" in problems:
        removed = conns._remove_temp_files(dead_only=True)
        if removed:
            done.append(f"removed {len(removed)} temp file(s)")
    if not db_ok:
        snap_ok = not any(c.name == "snapshot" and c.status == PROBLEM and "damaged" in c.detail for c in checks) \
            and conns.snapshot_path.exists()
        hint = (f"the snapshot {conns.snapshot_path} holds the state of the last publish: to go back to it, "
                f"move {conns.path} aside and copy the snapshot to {conns.path}" if snap_ok else
                "restore it from a backup, or move it aside and ingest the sources again")
        done.append(f"the database cannot be repaired here: {hint}")
    return done
