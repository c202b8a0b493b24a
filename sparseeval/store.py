"""The DuckDB store: transactional, idempotent ingest and the read path for analysts and the pipeline.

Concurrency design (why it looks like this): a DuckDB file can be open for writing by only one
process, and while it is, every other process is locked out of it entirely, readers included.
So:

* writers hold the connection only for one short transaction, and when the file is locked by
  another process they retry with exponential backoff (``lock_timeout`` seconds in all);
* after each successful write, still holding the lock, the writer checkpoints and publishes a
  read-only copy ``<db>.snapshot.duckdb`` atomically (write to a temp file, fsync, ``os.replace``).
  Readers (:meth:`Store.open_readonly` and every ``load_*``/``table_counts``/``query`` helper)
  open the snapshot, which is never written in place, so any number of processes read while the
  pipeline writes, and a reader sees either the state before or after a whole transaction,
  never a partial one. A writer killed mid-way leaves the old snapshot (and, by DuckDB's WAL, an
  unchanged database) behind.

Ingest (:meth:`Store.ingest`): each source file is one unit: its sha256 is computed first and a
file already stored with the same hash is skipped without being read; otherwise it is read,
validated (:func:`sparseeval.validation.validate_results`) and stored in ONE transaction together
with its ``ingests`` row. Any error rolls that transaction back and records a ``refused`` row with
the reason in a separate short transaction, so a refusal changes nothing but the audit trail.
Rows already stored with the same value are left alone (re-ingesting changes nothing); the same key
with a different value is refused, naming the file that stored it first.

Large long-format parquet (the leaderboard's 200 M rows) never passes through Polars: with the
default reader, ``_bulk_long`` checks the file with SQL over ``read_parquet`` and the transaction
inserts straight from it (``INSERT ... SELECT``, anti-join only when stored rows could overlap).
Any file those checks are unsure of takes the reader + validator path, so the accepted data and
every refusal message are the same on both paths.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl

import sparseeval
from sparseeval.benchmarks import BenchmarkNameError, canonical_benchmark
from sparseeval.readers.base import RESPONSES_SCHEMA, SCORES_SCHEMA, InputError, ParsedResults
from sparseeval.readers.detect import detect_format, iter_sources, read_source
from sparseeval.readers.long import long_format, read_long_file
from sparseeval.validation import MAX_ID_LENGTH, validate_results

log = logging.getLogger(__name__)

SQL_DIR = Path(sparseeval.__file__).resolve().parents[1] / "sql"
TABLES = ("models", "items", "responses", "scores", "ingests", "anchor_sets", "anchors", "evaluations",
          "predictions")

Reader = Callable[[Path], ParsedResults]


def default_db_path() -> Path:
    """``$SPARSEEVAL_DB`` or ``data/sparseeval.duckdb`` under the current directory."""
    return Path(os.environ.get("SPARSEEVAL_DB") or Path.cwd() / "data" / "sparseeval.duckdb")


@dataclass
class FileReport:
    """What happened to one source: ``ok``, ``skipped`` (same sha256 already stored) or ``refused``."""

    file: str
    status: str
    sha256: str = ""
    reason: str | None = None
    n_responses: int = 0  #: rows newly stored (rows already present with the same value are not counted)
    n_scores: int = 0
    rows_read: int = 0
    ingest_id: int | None = None


@dataclass
class IngestReport:
    files: list[FileReport] = field(default_factory=list)

    def by_status(self, status: str) -> list[FileReport]:
        return [f for f in self.files if f.status == status]

    @property
    def refused(self) -> list[FileReport]:
        return self.by_status("refused")

    @property
    def ok(self) -> bool:
        return not self.refused


class StoreLockedError(RuntimeError):
    """Another process held the database for longer than ``lock_timeout``."""


def file_sha256(path: Path) -> str:
    """sha256 of a file, or of a folder's files (relative names and contents), streamed."""
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode() + b"\0")
        with file.open("rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


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


def default_reader(path: Path) -> ParsedResults:
    """Read one unit in whatever supported format it is (see :mod:`sparseeval.readers.detect`)."""
    return read_source(path)


def discover_sources(path: Path) -> list[Path]:
    """The ingest units under ``path`` (an lm-eval run folder or a long-table folder is one unit;
    documentation and hidden files are passed over): :func:`sparseeval.readers.detect.iter_sources`."""
    return iter_sources(path) if path.is_dir() else [path]


def _source_format(path: Path, parsed: ParsedResults | None) -> str:
    fmt = getattr(parsed, "format", None) if parsed is not None else None
    if fmt:
        return str(fmt)
    return f"long-{long_format(path)}" if long_format(path) else (path.suffix.lstrip(".") or "unknown")


# --- the bulk path for long parquet files ---------------------------------------------------------

#: names under which a unit's rows are visible to the ingest transaction
_STAGED = ("_new_responses", "_new_scores", "_new_models")
#: Unicode White_Space: exactly what Polars' ``str.strip_chars()`` (Rust ``char::is_whitespace``) strips
_WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(
    chr(c) for c in range(0x2000, 0x200B))
_NUMERIC_TYPES = ("BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER",
                  "UBIGINT", "FLOAT", "DOUBLE")


def _stage_frames(parsed: ParsedResults) -> Callable[[duckdb.DuckDBPyConnection], None]:
    def stage(con: duckdb.DuckDBPyConnection) -> None:
        con.register("_new_responses", parsed.responses)
        con.register("_new_scores", parsed.scores)
        con.register("_new_models", parsed.models)
    return stage


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _clean_id(value: object) -> bool:
    """True when validation would keep ``value`` unchanged: text, not blank, no edge whitespace, short."""
    return (isinstance(value, str) and value != "" and value.strip(_WHITESPACE) == value
            and len(value) <= MAX_ID_LENGTH)


def _has_duplicates(con: duckdb.DuckDBPyConnection, raw: str, items: list[str], n_pairs: int) -> bool:
    """Whether a (model, benchmark, item_id) key repeats in ``raw``.

    Exact and cheap: each item gets a small integer code, each (model, benchmark) a bitmap of the
    codes it answered; a key repeats iff some pair has more rows than bits set. That is ~10x faster
    than a distinct count over all keys (2.5 s instead of 25 s for 98 M rows), whose hash table
    outgrows the caches. With very many items x pairs the bitmaps would be big, and the distinct
    count of 64-bit key hashes is used instead (a collision only sends the file to the slow path).
    """
    if n_pairs * len(items) > 8 * 2**28:  # bitmaps over 256 MB
        found = _run(con, f"SELECT count(*) - count(DISTINCT hash(model, benchmark, item_id)) FROM ({raw})")
        return bool(found[0][0])
    codes = pl.DataFrame({"item_id": items, "code": np.arange(len(items), dtype=np.int64)})
    con.register("_item_codes", codes)
    try:
        found = _run(con, f"SELECT 1 FROM (SELECT count(*) AS n, "
                          f"bit_count(bitstring_agg(code, 0, {len(items) - 1})) AS d FROM ({raw}) "
                          f"JOIN _item_codes USING (item_id) GROUP BY model, benchmark) WHERE n <> d LIMIT 1")
    finally:
        con.unregister("_item_codes")
    return bool(found)


@dataclass
class _BulkLong:
    """A long-table unit whose responses DuckDB reads straight from parquet (see :func:`_bulk_long`)."""

    responses_sql: str  #: SELECT model, benchmark (canonical), item_id, score FROM read_parquet(...)
    n_rows: int
    scores: pl.DataFrame
    models: pl.DataFrame
    fmt: str

    def stage(self, con: duckdb.DuckDBPyConnection) -> None:
        _run(con, f"CREATE OR REPLACE TEMP VIEW _new_responses AS {self.responses_sql}")
        con.register("_new_scores", self.scores)
        con.register("_new_models", self.models)


def _bulk_long(path: Path) -> _BulkLong | None:
    """Check a long-table unit whose responses are parquet with SQL over the file, or return None.

    Reading 20 M rows into Polars and validating them there takes ~50 s and ~7 GB; DuckDB checks
    the same file in a few seconds with little memory. The checks here are a conservative
    *superset* of :func:`sparseeval.validation.validate_results` for clean data: anything the
    validator would refuse, trim or that this code does not recognise (other column types, ids
    with edge whitespace, a blank or long id, a null/NaN/out-of-range score, a duplicate key
    (by 64-bit hash, so a collision only costs the slow path), two spellings of one benchmark,
    a score without responses) returns None, and the caller takes the regular reader + validator
    path, which refuses with its precise message. So both paths accept and store exactly the same.
    """
    try:
        if detect_format(path) != "long":
            return None
    except InputError:
        return None
    others: dict[str, Path] = {}
    if path.is_dir():  # the same discovery rules as readers.long._read_folder
        for child in sorted(path.iterdir()):
            stem = child.name.split(".")[0].lower()
            if child.is_file() and stem in ("responses", "scores", "models") and long_format(child):
                if stem in others:
                    return None
                others[stem] = child
        responses_file = others.pop("responses", None)
        fmt = "long"
    else:
        responses_file = path
        fmt = "long"
    if responses_file is None or long_format(responses_file) != "parquet":
        return None
    con = duckdb.connect()
    try:
        _run(con, "SET enable_progress_bar = false")
        source = f"read_parquet({_sql_text(str(responses_file))})"
        try:
            described = _run(con, f"DESCRIBE SELECT * FROM {source}")
        except duckdb.Error:
            return None
        columns = {str(name).strip().lower(): (str(name), str(dtype)) for name, dtype, *_ in described}
        if len(columns) != len(described) or "_line" in columns:
            return None
        value = "score" if "score" in columns else "correct"
        if not {"model", "benchmark", "item_id", value} <= columns.keys():
            return None
        if any(columns[c][1] != "VARCHAR" for c in ("model", "benchmark", "item_id")):
            return None
        if not (columns[value][1] in _NUMERIC_TYPES or columns[value][1].startswith("DECIMAL")):
            return None
        raw = (f"SELECT {_sql_name(columns['model'][0])} AS model, {_sql_name(columns['benchmark'][0])} "
               f"AS benchmark, {_sql_name(columns['item_id'][0])} AS item_id, "
               f"CAST({_sql_name(columns[value][0])} AS DOUBLE) AS score FROM {source}")
        # one scan: per (model, benchmark) and per item_id; ids are then checked on distinct values
        groups = _run(con, f"""
            SELECT model, benchmark, item_id, grouping(item_id) = 1 AS is_pair, count(*),
                   bool_or(item_id IS NULL), bool_or(score IS NULL OR isnan(score) OR score < 0 OR score > 1)
            FROM ({raw}) GROUP BY GROUPING SETS ((model, benchmark), (item_id))""")
        pairs = [g for g in groups if g[3]]
        n_rows = sum(g[4] for g in pairs)
        if n_rows == 0 or any(g[5] or g[6] for g in pairs):
            return None
        if not all(_clean_id(g[2]) for g in groups if not g[3]):
            return None
        if not all(_clean_id(m) for m in {g[0] for g in pairs}):
            return None
        names = {g[1] for g in pairs}
        if not all(_clean_id(b) for b in names):
            return None
        try:
            canonical = {b: canonical_benchmark(b) for b in names}
        except BenchmarkNameError:
            return None
        if len(set(canonical.values())) != len(canonical):
            return None
        if _has_duplicates(con, raw, [g[2] for g in groups if not g[3]], len(pairs)):
            return None
    except duckdb.Error:
        return None
    finally:
        con.close()
    parsed = ParsedResults(responses=pl.DataFrame(schema=RESPONSES_SCHEMA), sources=[path])
    for stem, file in others.items():
        try:
            kind, frame = read_long_file(file)
        except InputError:
            return None
        if kind != stem:
            return None
        setattr(parsed, kind, frame)
    if others:
        try:
            parsed = validate_results(parsed, path)
        except InputError:
            return None
        answered = {(m, canonical[b]) for m, b, *_ in pairs}
        if any(key not in answered for key in parsed.scores.select("model", "benchmark").iter_rows()):
            return None
    else:
        parsed.scores = pl.DataFrame(schema=SCORES_SCHEMA)
    bench = "benchmark"
    renamed = {b: c for b, c in canonical.items() if b != c}
    if renamed:
        whens = " ".join(f"WHEN {_sql_text(b)} THEN {_sql_text(c)}" for b, c in renamed.items())
        bench = f"CASE benchmark {whens} ELSE benchmark END"
    sql = f"SELECT model, {bench} AS benchmark, item_id, score FROM ({raw})"
    return _BulkLong(sql, n_rows, parsed.scores, parsed.models, fmt)


class Store:
    """A DuckDB file holding results, anchors, evaluations and predictions."""

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

    # --- ingest ----------------------------------------------------------------------------------

    def ingest(self, paths: str | Path | Iterable[str | Path], reader: Reader | None = None) -> IngestReport:
        """Ingest files and folders; each file is its own transaction (see module docstring)."""
        if isinstance(paths, str | Path):
            paths = [paths]
        report = IngestReport()
        for path in paths:
            path = Path(path)
            if not path.exists():
                report.files.append(self._refuse(path, "", InputError(path, "no such file or folder"), None))
                continue
            for unit in discover_sources(path):
                report.files.append(self._ingest_unit(unit, reader or default_reader))
        return report

    def _ingest_unit(self, path: Path, reader: Reader) -> FileReport:
        started = _now()
        sha = file_sha256(path)
        seen = self.query("SELECT file FROM ingests WHERE sha256 = $s AND status = 'ok' LIMIT 1", {"s": sha})
        if seen.height:
            log.info("skipping %s: already ingested as %s", path, seen.item(0, 0))
            return FileReport(str(path), "skipped", sha, reason=f"already ingested as {seen.item(0, 0)}")
        parsed: ParsedResults | None = None
        try:
            bulk = _bulk_long(path) if reader is default_reader else None
            if bulk is not None:  # a clean long parquet: DuckDB reads it straight into the store
                log.info("ingesting %s (%d responses, read by DuckDB)", path, bulk.n_rows)
                return self._store(path, sha, started, bulk.stage, bulk.fmt, bulk.n_rows + bulk.scores.height)
            log.info("reading %s", path)
            parsed = reader(path)
            parsed = validate_results(parsed, path)
            log.info("ingesting %s", path)
            return self._store(path, sha, started, _stage_frames(parsed), _source_format(path, parsed),
                               parsed.responses.height + parsed.scores.height)
        except InputError as exc:
            return self._refuse(path, sha, exc, parsed, started)
        except (StoreLockedError, KeyboardInterrupt):
            raise
        except Exception as exc:  # a reader bug or odd file must not stop the other files
            log.debug("unexpected error reading %s", path, exc_info=True)
            return self._refuse(path, sha, InputError(path, f"{type(exc).__name__}: {exc}"), parsed, started)

    def _store(self, path: Path, sha: str, started: datetime,
               stage: Callable[[duckdb.DuckDBPyConnection], None], fmt: str, rows_read: int) -> FileReport:
        """One transaction: ``stage`` makes ``_new_responses``/``_new_scores``/``_new_models`` visible
        to the connection (registered frames or views over the file), then conflicts are checked and
        the new rows inserted set-wise, together with the ``ingests`` row."""
        with self._write() as con:
            con.begin()
            try:
                dup = _run(con, "SELECT file FROM ingests WHERE sha256 = ? AND status = 'ok' LIMIT 1",
                                  [sha])
                if dup:  # stored by another process since we looked
                    con.rollback()
                    return FileReport(str(path), "skipped", sha, reason=f"already ingested as {dup[0][0]}")
                ingest_id = _run(con, "SELECT nextval('ingest_id_seq')")[0][0]
                stage(con)
                benchmarks, overlap = self._stored_overlap(con)
                self._check_conflicts(con, path, overlap)
                n_resp, n_scores = self._insert(con, ingest_id, overlap, len(benchmarks) > 1)
                _run(
                    con,
                    "INSERT INTO ingests (ingest_id, file, sha256, format, status, reason, n_responses, "
                    "n_scores, started_at, finished_at) VALUES (?, ?, ?, ?, 'ok', NULL, ?, ?, ?, ?)",
                    [ingest_id, str(path), sha, fmt, n_resp, n_scores, started, _now()])
                con.commit()
            except BaseException:
                con.rollback()
                raise
            finally:
                for name in _STAGED:
                    with contextlib.suppress(duckdb.Error):
                        con.unregister(name)
                    with contextlib.suppress(duckdb.Error):
                        _run(con, f"DROP VIEW IF EXISTS {name}")
        log.info("stored %s: %d new responses, %d new scores", path, n_resp, n_scores)
        return FileReport(str(path), "ok", sha, n_responses=n_resp, n_scores=n_scores, rows_read=rows_read,
                          ingest_id=ingest_id)

    @staticmethod
    def _stored_overlap(con: duckdb.DuckDBPyConnection) -> tuple[list[str], bool]:
        """The new responses' benchmarks, and whether the store already holds any of their
        (model, benchmark) pairs. Usually it does not (a new benchmark file, new models), and then
        the key comparisons against the stored responses (a join over every new row, most of the
        cost of a 20 M-row ingest) can only find nothing and are skipped."""
        pairs = con.sql("SELECT DISTINCT model, benchmark FROM _new_responses").pl()
        benchmarks = sorted(pairs.get_column("benchmark").unique().to_list())
        if not benchmarks:
            return benchmarks, False
        con.register("_new_pairs", pairs)
        try:
            listed = ", ".join(_sql_text(b) for b in benchmarks)  # a literal list prunes row groups
            found = _run(con, f"SELECT 1 FROM (SELECT model, benchmark FROM responses WHERE benchmark IN "
                              f"({listed})) r SEMI JOIN _new_pairs p USING (model, benchmark) LIMIT 1")
        finally:
            con.unregister("_new_pairs")
        return benchmarks, bool(found)

    @staticmethod
    def _check_conflicts(con: duckdb.DuckDBPyConnection, path: Path, responses_overlap: bool = True) -> None:
        keys = {"responses": ("model", "benchmark", "item_id"), "scores": ("model", "benchmark")}
        for table, key in keys.items():
            if table == "responses" and not responses_overlap:
                continue
            cols = ", ".join(key)
            rows = _run(
                con,
                f"SELECT {cols}, n.score AS new_score, o.score AS old_score, i.file, "
                f"count(*) OVER () AS n_conflicts "
                f"FROM _new_{table} n JOIN {table} o USING ({cols}) "
                f"LEFT JOIN ingests i ON i.ingest_id = o.ingest_id "
                f"WHERE n.score <> o.score ORDER BY {cols} LIMIT 1")
            if rows:
                *keys, new, old, other, count = rows[0]
                shown = ", ".join(f"{k}={v!r}" for k, v in zip(key, keys, strict=True))
                raise InputError(path, f"conflicting {table[:-1]} for ({shown}): {new} here but {old} "
                                       f"in already ingested file {other}; {count} conflicting row(s)")

    @staticmethod
    def _insert(con: duckdb.DuckDBPyConnection, ingest_id: int, responses_overlap: bool = True,
                cluster: bool = True) -> tuple[int, int]:
        """Insert the staged rows that are not stored yet; returns (new responses, new scores).

        Without ``responses_overlap`` (no stored row shares a model and benchmark with the new
        ones) the anti-join is skipped; ``cluster`` orders the new responses by benchmark so
        per-benchmark reads skip other benchmarks' row groups (pointless for a one-benchmark file).
        """
        family = "CASE WHEN contains(model, '/') THEN split_part(model, '/', 1) ELSE model END"
        _run(
            con,
            f"INSERT INTO models (model, family, first_seen) SELECT model, {family}, current_timestamp "
            "FROM (SELECT model FROM _new_responses UNION SELECT model FROM _new_scores "
            "UNION SELECT model FROM _new_models) ON CONFLICT DO NOTHING")
        # metadata: a newer non-null value wins (a corrected date or size), nulls never erase
        _run(
            con,
            "INSERT INTO models (model, family, submitted_at, n_params, base_model) "
            f"SELECT model, {family}, submitted_at, n_params, base_model FROM _new_models "
            "ON CONFLICT (model) DO UPDATE SET "
            "submitted_at = coalesce(excluded.submitted_at, models.submitted_at), "
            "n_params = coalesce(excluded.n_params, models.n_params), "
            "base_model = coalesce(excluded.base_model, models.base_model)")
        _run(con, "INSERT INTO items SELECT DISTINCT benchmark, item_id FROM _new_responses "
                    "ON CONFLICT DO NOTHING")
        anti = " ANTI JOIN responses r USING (model, benchmark, item_id)" if responses_overlap else ""
        order = " ORDER BY n.benchmark" if cluster else ""
        n_resp = _run(
            con,
            f"INSERT INTO responses SELECT n.model, n.benchmark, n.item_id, n.score, ? "
            f"FROM _new_responses n{anti}{order}", [ingest_id])[0][0]
        n_scores = _run(
            con,
            "INSERT INTO scores SELECT n.model, n.benchmark, n.score, ? "
            "FROM _new_scores n ANTI JOIN scores s USING (model, benchmark)", [ingest_id])[0][0]
        return int(n_resp), int(n_scores)

    def _refuse(self, path: Path, sha: str, exc: InputError, parsed: ParsedResults | None,
                started: datetime | None = None) -> FileReport:
        reason = str(exc)
        log.warning("refused %s", reason)
        with self._write() as con:
            _run(
                con,
                "INSERT INTO ingests (file, sha256, format, status, reason, started_at, finished_at) "
                "VALUES (?, ?, ?, 'refused', ?, ?, ?)",
                [str(path), sha, _source_format(path, parsed), reason[:4000], started or _now(), _now()])
        return FileReport(str(path), "refused", sha, reason=reason)

    # --- read helpers ------------------------------------------------------------------------------

    def load_long(self, benchmark: str | None = None, *, lazy: bool = False
                  ) -> tuple[pl.DataFrame, pl.DataFrame] | tuple[pl.LazyFrame, pl.LazyFrame]:
        """(responses, scores) as long Polars frames, for :func:`sparseeval.matrix.build_matrix`.

        ``lazy=True`` returns LazyFrames that read the latest snapshot only when collected, in Arrow
        batches, with projection pushed into the SQL: a benchmark of the full leaderboard (98 M
        rows) then never exists in memory as a frame of strings (~6 GB), since ``build_matrix``
        turns each batch into integer codes as it streams past.
        """
        where, params = ("WHERE benchmark = $b", {"b": benchmark}) if benchmark is not None else ("", None)
        responses_sql = f"SELECT model, benchmark, item_id, score FROM responses {where}"
        scores_sql = f"SELECT model, benchmark, score FROM scores {where}"
        if lazy:
            return (self._scan(responses_sql, params, RESPONSES_SCHEMA),
                    self._scan(scores_sql, params, SCORES_SCHEMA))
        con = self.open_readonly()
        try:
            responses = con.sql(responses_sql, params=params).pl()
            scores = con.sql(scores_sql, params=params).pl()
        finally:
            con.close()
        return responses, scores

    def _scan(self, sql: str, params: Mapping[str, Any] | None, schema: Mapping[str, pl.DataType]
              ) -> pl.LazyFrame:
        """A LazyFrame over a read-only query: each collect opens the snapshot, streams, closes."""
        from polars.io.plugins import register_io_source

        def batches(with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None,
                    batch_size: int | None) -> Iterator[pl.DataFrame]:
            columns = ", ".join(with_columns or list(schema))
            limit = f" LIMIT {int(n_rows)}" if n_rows is not None else ""
            con = self.open_readonly()
            try:
                reader = con.sql(f"SELECT {columns} FROM ({sql}){limit}", params=params).fetch_record_batch(
                    max(batch_size or 0, 1 << 20))
                for batch in reader:
                    frame = pl.from_arrow(batch)
                    assert isinstance(frame, pl.DataFrame)
                    yield frame if predicate is None else frame.filter(predicate)
            finally:
                con.close()

        return register_io_source(batches, schema=dict(schema))

    def benchmarks(self) -> list[str]:
        """Benchmarks with any responses or scores, sorted."""
        return self.query("SELECT benchmark FROM responses UNION SELECT benchmark FROM scores "
                          "ORDER BY 1").get_column("benchmark").to_list()

    def table_counts(self) -> dict[str, int]:
        """Row count of every table (one consistent snapshot)."""
        sql = " UNION ALL ".join(f"SELECT '{t}' AS t, count(*) AS n FROM {t}" for t in TABLES)
        return dict(self.query(sql).iter_rows())

    def model_metadata(self) -> pl.DataFrame:
        """models(model, family, submitted_at, n_params, base_model, first_seen)."""
        return self.query("SELECT model, family, submitted_at, n_params, base_model, first_seen "
                          "FROM models ORDER BY model")

    # --- results of the pipeline ------------------------------------------------------------------

    def save_anchor_set(self, *, benchmark: str, method: str, k: int, items: Sequence[str],
                        weights: Sequence[float] | None = None, seed: int | None = None,
                        n_train_models: int | None = None, params: Mapping[str, Any] | None = None,
                        mlflow_run_id: str | None = None, artifact_uri: str | None = None) -> int:
        """Store an anchor set and its items in order; the same content again returns the same id."""
        if weights is not None and len(weights) != len(items):
            raise ValueError(f"{len(items)} anchors but {len(weights)} weights")
        if len(set(items)) != len(items):
            raise ValueError("anchor items repeat")
        payload = {"benchmark": benchmark, "method": method, "k": int(k), "seed": seed,
                   "items": [str(i) for i in items],
                   "weights": None if weights is None else [float(w) for w in weights]}
        content_hash = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        params_json = json.dumps(dict(params or {}), sort_keys=True, default=str)
        with self._write() as con, _transaction(con):
            found = _run(con, "SELECT anchor_set_id FROM anchor_sets WHERE content_hash = ?",
                                [content_hash])
            if found:
                anchor_set_id = int(found[0][0])
                _run(con, "UPDATE anchor_sets SET mlflow_run_id = coalesce(?, mlflow_run_id), "
                            "artifact_uri = coalesce(?, artifact_uri) WHERE anchor_set_id = ?",
                            [mlflow_run_id, artifact_uri, anchor_set_id])
            else:
                anchor_set_id = int(_run(
                    con,
                    "INSERT INTO anchor_sets (benchmark, method, k, seed, created_at, n_train_models, "
                    "params, content_hash, mlflow_run_id, artifact_uri) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING anchor_set_id",
                    [benchmark, method, int(k), seed, _now(), n_train_models, params_json, content_hash,
                     mlflow_run_id, artifact_uri])[0][0])
                con.executemany(
                    "INSERT INTO anchors VALUES (?, ?, ?, ?, ?)",
                    [[anchor_set_id, pos, benchmark, str(item), None if weights is None else float(w)]
                     for pos, (item, w) in enumerate(zip(items, weights or [None] * len(items),
                                                         strict=True))])
        return anchor_set_id

    def save_evaluations(self, rows: Iterable[Mapping[str, Any]] | pl.DataFrame) -> int:
        """Store evaluation rows; a rerun of (benchmark, method, k, seed, split_policy) replaces it."""
        cols = ("benchmark", "method", "k", "seed", "split_policy", "mae", "tau", "rho", "max_error",
                "seconds", "n_train", "n_val", "n_test", "mlflow_run_id")
        records = rows.to_dicts() if isinstance(rows, pl.DataFrame) else [dict(r) for r in rows]
        unknown = sorted({c for r in records for c in r} - set(cols) - {"created_at"})
        if unknown:
            raise ValueError(f"unknown evaluation column(s): {', '.join(unknown)}")
        values = [[r.get(c) for c in cols] + [_now()] for r in records]
        with self._write() as con, _transaction(con):
            con.executemany(
                "DELETE FROM evaluations WHERE benchmark = ? AND method = ? AND k = ? "
                "AND seed IS NOT DISTINCT FROM ? AND split_policy IS NOT DISTINCT FROM ?",
                [v[:5] for v in values])
            if values:
                con.executemany(f"INSERT INTO evaluations ({', '.join(cols)}, created_at) "
                                f"VALUES ({', '.join('?' * (len(cols) + 1))})", values)
        return len(values)

    def save_predictions(self, rows: Iterable[Mapping[str, Any]] | pl.DataFrame) -> int:
        """Upsert predictions keyed by (model, benchmark, anchor_set_id)."""
        cols = ("model", "benchmark", "anchor_set_id", "predicted", "lower", "upper", "n_anchors", "ood")
        records = rows.to_dicts() if isinstance(rows, pl.DataFrame) else [dict(r) for r in rows]
        values = [[r.get(c) for c in cols[:7]] + [bool(r.get("ood") or False), _now()] for r in records]
        bad = [v for v in values if v[3] is None or not 0.0 <= float(v[3]) <= 1.0]
        if bad:
            raise ValueError(f"prediction outside [0, 1] for model {bad[0][0]!r}: {bad[0][3]}")
        with self._write() as con, _transaction(con):
            if values:
                con.executemany(f"INSERT OR REPLACE INTO predictions ({', '.join(cols)}, created_at) "
                                f"VALUES ({', '.join('?' * (len(cols) + 1))})", values)
        return len(values)
