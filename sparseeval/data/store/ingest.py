"""Ingest: each unit (a file, or a run folder) read once from a pinned copy, validated, and stored in
one transaction, with the runs it brings and what they replace.

What a unit's rows mean (the rules every path follows; ``read_data`` uses this same code):

* A **run** is the responses (or the reported score) of one model on one benchmark variant from one
  ingest, with its evaluation settings (:data:`sparseeval.data.readers.base.SETTINGS_SCHEMA`).
* A new run **supersedes** the current run of the same (model, benchmark, kind) when it comes from a
  changed version of the same source (same resolved path, new bytes), or when both carry a run time
  and the new one is later. The older run and its rows stay in the store as history
  (``response_history``); the views ``responses`` / ``scores`` show current runs only. A run older
  than the current one is stored as already superseded. When a changed source no longer holds a
  (model, benchmark) it held before, that earlier run is superseded too (a file that lost rows).
* Otherwise the runs **merge**: rows already current with the same value are left alone, new keys
  are added, and the same key with another value is a **conflict**: the unit is refused, naming both
  files (two sources that disagree with no run time to order them, or at the same run time).
* A unit whose bytes were already ingested (same sha256) is skipped without being read.
* Parts of a unit a reader refused (an LFS pointer, a missing samples file) are recorded in
  ``ingest_notes``; the rest of the unit is stored with status ``partial``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb

from sparseeval.data.readers.base import SETTINGS_SCHEMA, InputError, ParsedResults, PartNote
from sparseeval.data.readers.detect import discover, read_source
from sparseeval.data.readers.validation import validate_results
from sparseeval.data.store.bulk import _STAGED, _stage_frames, bulk_long
from sparseeval.data.store.connection import Connections
from sparseeval.data.store.errors import PublishInterrupted, StoreError
from sparseeval.data.store.pinning import pinned, remove_stale_pins
from sparseeval.data.store.transactions import _is_interrupt, _now, _run

log = logging.getLogger(__name__)

Reader = Callable[[Path], ParsedResults]
_SETTINGS = tuple(SETTINGS_SCHEMA)


@dataclass
class FileReport:
    """What happened to one unit: ``ok``, ``partial`` (stored, some parts refused), ``skipped`` (same
    bytes already stored, or nothing new), ``refused`` or ``interrupted``."""

    file: str
    status: str
    sha256: str = ""
    reason: str | None = None
    n_responses: int = 0  #: rows newly stored (rows already current with the same value are not counted)
    n_scores: int = 0
    n_superseded: int = 0  #: earlier runs this unit replaced as current
    rows_read: int = 0
    ingest_id: int | None = None
    format: str = ""
    notes: list[PartNote] = field(default_factory=list)
    publish_error: str | None = None  #: stored, but the read-only snapshot could not be refreshed
    replaced: list[tuple[str, int]] = field(default_factory=list)  #: (earlier file, runs it no longer holds current)


@dataclass
class IngestReport:
    files: list[FileReport] = field(default_factory=list)
    #: stored, but the read-only snapshot could not be refreshed at the end (None: it was)
    publish_error: str | None = None

    def by_status(self, status: str) -> list[FileReport]:
        return [f for f in self.files if f.status == status]

    @property
    def refused(self) -> list[FileReport]:
        """Units refused whole, and units stored with refused parts."""
        return [f for f in self.files if f.status == "refused"
                or any(n.status == "refused" for n in f.notes)]

    @property
    def interrupted(self) -> bool:
        return any(f.status == "interrupted" for f in self.files)

    @property
    def ok(self) -> bool:
        return not self.refused and not self.interrupted


def default_reader(path: Path) -> ParsedResults:
    """Read one unit in whatever supported format it is (see :mod:`sparseeval.data.readers.detect`)."""
    return read_source(path)


def _format_of(path: Path, parsed: ParsedResults | None) -> str:
    fmt = parsed.format if parsed is not None else None
    return str(fmt) if fmt else (path.suffix.lstrip(".") or "folder" if path.is_dir() else "unknown")


class Ingesting(Connections):
    """The ingest half of the store."""

    def ingest(self, paths: str | Path | Iterable[str | Path], reader: Reader | None = None, *,
               progress: Callable[[FileReport], None] | None = None) -> IngestReport:
        """Ingest files and folders; each unit is its own transaction (see the module docstring).

        ``progress`` is called with each unit's report as soon as it is done (the CLI's progress bar).

        Ctrl-C stops the whole ingest: the unit in progress is rolled back and recorded as
        ``interrupted``, no further unit is read, and KeyboardInterrupt propagates.
        """
        if isinstance(paths, str | Path):
            paths = [paths]
        report = IngestReport()
        self.check_is_store()  # before any read: someone else's DuckDB file is refused, never written
        remove_stale_pins(self._pin_dir)
        with self.publishing_once():  # one snapshot copy per ingest, not one per unit
            self._ingest_paths(paths, reader, report, progress)
        report.publish_error = self.last_publish_error if self.snapshot else None
        return report

    def ingested_hashes(self) -> set[str]:
        """The SHA-256 of every unit stored (ingested ``ok`` or ``partial``): a unit with one of these
        hashes would be skipped as already ingested (what the pipeline's new-results sensor asks)."""
        return set(self.query("SELECT DISTINCT sha256 FROM ingests WHERE status IN ('ok', 'partial')")
                   .get_column("sha256").to_list())

    def _ingest_paths(self, paths: Iterable[str | Path], reader: Reader | None, report: IngestReport,
                      progress: Callable[[FileReport], None] | None) -> None:
        for path in paths:
            path = Path(path)
            if not path.exists() and not path.is_symlink():
                report.files.append(self._record(path, "", "refused", "no such file or folder"))
                continue
            try:
                units, notes = discover(path)
            except InputError as exc:
                report.files.append(self._record(path, "", "refused", str(exc)))
                continue
            for note in notes:  # files found but not units: refused (unreadable) or skipped (docs)
                reason = f"{note.part}: {note.reason}" if note.status == "refused" else note.reason
                report.files.append(self._record(Path(note.part), "", note.status, reason))
            for unit in units:
                entry = self._ingest_unit(unit, reader or default_reader)
                report.files.append(entry)
                if progress is not None:
                    progress(entry)
                if entry.status == "interrupted":
                    raise KeyboardInterrupt

    @property
    def _pin_dir(self) -> Path:
        return self.path.parent

    def _ingest_unit(self, path: Path, reader: Reader) -> FileReport:
        started = _now()
        sha = ""
        try:
            with pinned(path, self._pin_dir) as pin:
                sha = pin.sha256
                seen = self.query("SELECT file FROM ingests WHERE sha256 = $s AND status IN ('ok', 'partial') "
                                  "LIMIT 1", {"s": sha})
                if seen.height:
                    log.info("skipping %s: already ingested as %s", path, seen.item(0, 0))
                    return FileReport(str(path), "skipped", sha,
                                      reason=f"unchanged: same content already ingested as {seen.item(0, 0)}")
                parsed: ParsedResults | None = None
                try:
                    bulk = bulk_long(pin.copy) if reader is default_reader else None
                    if bulk is not None:  # a clean long parquet: DuckDB reads it straight into the store
                        log.info("ingesting %s (%d responses, read by DuckDB)", path, bulk.n_rows)
                        return self._store(path, sha, started, bulk.stage, bulk.fmt,
                                           bulk.n_rows + bulk.scores.height, [])
                    log.info("reading %s", path)
                    parsed = pin.map_parsed(reader(pin.copy))
                    fmt = _format_of(path, parsed)
                    parsed = validate_results(parsed, pin.copy)
                    parsed.format = fmt
                except InputError as exc:
                    raise pin.map_error(exc) from None
                return self._store(path, sha, started, _stage_frames(parsed), fmt,
                                   parsed.responses.height + parsed.scores.height, parsed.notes)
        except InputError as exc:
            return self._record(path, sha, "refused", str(exc), started)
        except PublishInterrupted:  # Ctrl-C after the commit: the unit is stored, the snapshot is stale
            raise
        except BaseException as exc:  # sorted below; Ctrl-C is recognised first
            if _is_interrupt(exc):
                # Ctrl-C, however DuckDB or a reader surfaced it (a "Query interrupted" RuntimeError, an
                # Arrow scan failing on KeyboardInterrupt): never "this file is bad", which would let the
                # ingest go on with the next file; the unit is rolled back and the whole ingest stops.
                return self._record(path, sha, "interrupted", "stopped by Ctrl-C before it was stored",
                                    started)
            if isinstance(exc, StoreError):  # locked, damaged, wrong path: the store's problem
                raise
            if isinstance(exc, duckdb.Error):  # the store itself failed (disk full, damaged file)
                log.debug("store error while ingesting %s", path, exc_info=True)
                raise
            if not isinstance(exc, Exception):  # SystemExit and the like
                raise
            # a reader bug or odd file must not stop the other files
            log.debug("unexpected error reading %s", path, exc_info=True)
            return self._record(path, sha, "refused", f"{path}: {type(exc).__name__}: {exc}", started)

    # --- the transaction ----------------------------------------------------------------------------

    def _store(self, path: Path, sha: str, started: datetime,
               stage: Callable[[duckdb.DuckDBPyConnection], None], fmt: str, rows_read: int,
               notes: list[PartNote]) -> FileReport:
        """One transaction: ``stage`` makes ``_new_responses``/``_new_scores``/``_new_models`` visible
        to the connection (registered frames or views over the pinned file); then runs are created,
        related to the current ones (supersede / older / merge), conflicts checked, rows inserted."""
        source_key = str(path.resolve())
        refused_parts = [n for n in notes if n.status == "refused"]
        status = "partial" if refused_parts else "ok"
        with self._write() as con:
            con.begin()
            try:
                dup = _run(con, "SELECT file FROM ingests WHERE sha256 = ? AND status IN ('ok', 'partial') "
                                "LIMIT 1", [sha])
                if dup:  # stored by another process since we looked
                    con.rollback()
                    return FileReport(str(path), "skipped", sha,
                                      reason=f"unchanged: same content already ingested as {dup[0][0]}")
                ingest_id = int(_run(con, "SELECT nextval('ingest_id_seq')")[0][0])
                stage(con)
                _create_runs(con, ingest_id)
                _relate_runs(con, source_key)
                _check_conflicts(con, path)
                n_resp, n_scores, n_superseded = _insert(con, ingest_id, source_key)
                replaced = [(str(f), int(n)) for f, n in _run(
                    con, "SELECT i.file, count(*) FROM runs r JOIN ingests i ON i.ingest_id = r.ingest_id "
                         "WHERE r.superseded_in = ? GROUP BY 1 ORDER BY 1", [ingest_id])]
                notes = [*notes, *_name_variants(con)]
                reason = "; ".join(f"{n.part}: {n.reason}" for n in refused_parts) or None
                _run(con,
                     "INSERT INTO ingests (ingest_id, file, source_key, sha256, format, status, reason, "
                     "n_responses, n_scores, n_superseded, started_at, finished_at) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     [ingest_id, str(path), source_key, sha, fmt, status, reason and reason[:4000], n_resp,
                      n_scores, n_superseded, started, _now()])
                if notes:
                    con.executemany("INSERT INTO ingest_notes VALUES (?, ?, ?, ?)",
                                    [[ingest_id, n.part, n.status, n.reason[:4000]] for n in notes])
                con.commit()
            except BaseException:
                con.rollback()
                raise
            finally:
                for name in (*_STAGED, "_new_runs", "_relations", "_counts"):
                    with contextlib.suppress(duckdb.Error):
                        con.unregister(name)
                    with contextlib.suppress(duckdb.Error):
                        _run(con, f"DROP VIEW IF EXISTS {name}")
                    with contextlib.suppress(duckdb.Error):
                        _run(con, f"DROP TABLE IF EXISTS {name}")
        publish_error = self.last_publish_error if self.snapshot else None
        if publish_error:
            log.warning("%s stored, but the read-only snapshot was not refreshed: %s", path, publish_error)
        reason_out = ("nothing new: every row is already stored with the same value"
                      if n_resp == 0 and n_scores == 0 and n_superseded == 0 else None)
        log.info("stored %s: %d new responses, %d new scores, %d runs superseded", path, n_resp, n_scores,
                 n_superseded)
        return FileReport(str(path), status, sha, reason=reason_out, n_responses=n_resp, n_scores=n_scores,
                          n_superseded=n_superseded, rows_read=rows_read, ingest_id=ingest_id, format=fmt,
                          notes=list(notes), publish_error=publish_error, replaced=replaced)

    def _record(self, path: Path, sha: str, status: str, reason: str,
                started: datetime | None = None) -> FileReport:
        """Record a unit that stored nothing (refused, interrupted, or a skipped file) in ``ingests``."""
        if status == "refused":  # the caller reports it (CLI table, asset metadata): log for debugging only
            log.info("refused %s", reason)
        with self._write() as con:
            _run(con,
                 "INSERT INTO ingests (file, source_key, sha256, format, status, reason, started_at, finished_at) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 [str(path), _resolved(path), sha, _format_of(path, None) if path.exists() else "", status,
                  reason[:4000], started or _now(), _now()])
        return FileReport(str(path), status, sha, reason=reason)


def _resolved(path: Path) -> str:
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):
        return str(path)


# --- set-wise steps of the transaction (module functions: they only use the connection) ------------

def _settings_select(con: duckdb.DuckDBPyConnection, table: str) -> str:
    """SELECT list of the settings columns of ``table`` (NULL for those it lacks)."""
    present = {row[0] for row in _run(con, f"DESCRIBE SELECT * FROM {table}")}
    casts = {"n_shot": "INTEGER", "limit": "DOUBLE", "run_at": "TIMESTAMP"}
    out = []
    for col in _SETTINGS:
        quoted = f'"{col}"'
        cast = casts.get(col, "VARCHAR")
        out.append(f"any_value({quoted})::{cast} AS {quoted}" if col in present else f"NULL::{cast} AS {quoted}")
    return ", ".join(out)


def _create_runs(con: duckdb.DuckDBPyConnection, ingest_id: int) -> None:
    """``_new_runs``: one run per (model, benchmark) of the new responses, and one per new score."""
    cols = ", ".join(f'"{c}"' for c in _SETTINGS)
    _run(con, f"""
        CREATE TEMP TABLE _new_runs AS
        SELECT nextval('run_id_seq') AS run_id, {ingest_id}::BIGINT AS ingest_id, model, benchmark, kind,
               {cols}, score
        FROM (
            SELECT model, benchmark, 'responses' AS kind, {_settings_select(con, '_new_responses')},
                   NULL::DOUBLE AS score
            FROM _new_responses GROUP BY model, benchmark
            UNION ALL
            SELECT model, benchmark, 'score' AS kind, {_settings_select(con, '_new_scores')}, any_value(score)
            FROM _new_scores GROUP BY model, benchmark
        )""")


def _relate_runs(con: duckdb.DuckDBPyConnection, source_key: str) -> None:
    """``_relations``: for every new run, each current run of its (model, benchmark, kind) and how the
    two relate: ``supersede`` (same source changed, or the new run is later), ``older`` (the new run is
    earlier: stored as history), ``merge`` (no order: values must agree)."""
    _run(con, """
        CREATE TEMP TABLE _relations AS
        SELECT n.run_id AS new_id, o.run_id AS old_id, n.kind, i.file AS old_file,
               CASE WHEN i.source_key = $1 THEN 'supersede'
                    WHEN n.run_at IS NOT NULL AND o.run_at IS NOT NULL AND n.run_at > o.run_at THEN 'supersede'
                    WHEN n.run_at IS NOT NULL AND o.run_at IS NOT NULL AND n.run_at < o.run_at THEN 'older'
                    ELSE 'merge' END AS relation
        FROM _new_runs n
        JOIN runs o ON o.model = n.model AND o.benchmark = n.benchmark AND o.kind = n.kind
                   AND o.superseded_in IS NULL
        JOIN ingests i ON i.ingest_id = o.ingest_id""", [source_key])


def _check_conflicts(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Refuse the unit when a merged run disagrees with a current one on any key."""
    if not _run(con, "SELECT 1 FROM _relations WHERE relation = 'merge' LIMIT 1"):
        return
    checks = {
        "score": ("SELECT n.model, n.benchmark, NULL, n.score, o.score, r.old_file, count(*) OVER () "
                  "FROM _new_runs n JOIN _relations r ON r.new_id = n.run_id AND r.relation = 'merge' "
                  "JOIN runs o ON o.run_id = r.old_id WHERE n.kind = 'score' AND n.score <> o.score "
                  "ORDER BY 1, 2 LIMIT 1"),
        "response": ("SELECT n.model, n.benchmark, n.item_id, n.score, o.score, r.old_file, count(*) OVER () "
                     "FROM _new_responses n JOIN _new_runs u ON u.model = n.model AND u.benchmark = n.benchmark "
                     "AND u.kind = 'responses' JOIN _relations r ON r.new_id = u.run_id AND r.relation = 'merge' "
                     "JOIN response_rows o ON o.run_id = r.old_id AND o.item_id = n.item_id "
                     "WHERE n.score <> o.score ORDER BY 1, 2, 3 LIMIT 1"),
    }
    for what, sql in checks.items():
        rows = _run(con, sql)
        if rows:
            model, bench, item, new, old, other, count = rows[0]
            key = f"model={model!r}, benchmark={bench!r}" + (f", item_id={item!r}" if item is not None else "")
            raise InputError(path, f"conflicting {what} for ({key}): {new} here but {old} in already ingested "
                                   f"file {other}, and neither run has a later run time to replace the other; "
                                   f"{count} conflicting row(s)")


def _name_variants(con: duckdb.DuckDBPyConnection, limit: int = 20) -> list[PartNote]:
    """Warnings for new models whose name differs from a stored one only by case or Unicode form.

    Both are kept as they are (they may be different repositories), but they are reported, and
    :func:`sparseeval.estimate.splits.model_identity` keeps them on one side of every split."""
    rows = _run(con, f"""
        SELECT n.model, o.model FROM (SELECT DISTINCT model FROM _new_responses UNION
                                      SELECT DISTINCT model FROM _new_scores) n
        JOIN models o ON lower(nfc_normalize(o.model)) = lower(nfc_normalize(n.model)) AND o.model <> n.model
        ORDER BY 1, 2 LIMIT {limit}""")
    return [PartNote(f"model {new!r}", "warning", f"differs from model {old!r} only by case or Unicode form: kept "
                     "apart in the store, and always on one side of a split") for new, old in rows]


def _insert(con: duckdb.DuckDBPyConnection, ingest_id: int, source_key: str) -> tuple[int, int, int]:
    """Insert runs, rows, models and items; mark what the new runs supersede.
    Returns (new responses, new scores, superseded runs)."""
    now = _now()
    family = "CASE WHEN contains(model, '/') THEN split_part(model, '/', 1) ELSE model END"
    _run(con, f"INSERT INTO models (model, family, first_seen) SELECT model, {family}, current_timestamp "
              "FROM (SELECT model FROM _new_responses UNION SELECT model FROM _new_scores "
              "UNION SELECT model FROM _new_models) ON CONFLICT DO NOTHING")
    # metadata: a newer non-null value wins (a corrected date or size), nulls never erase
    _run(con, "INSERT INTO models (model, family, submitted_at, n_params, base_model) "
              f"SELECT model, {family}, submitted_at, n_params, base_model FROM _new_models "
              "ON CONFLICT (model) DO UPDATE SET "
              "submitted_at = coalesce(excluded.submitted_at, models.submitted_at), "
              "n_params = coalesce(excluded.n_params, models.n_params), "
              "base_model = coalesce(excluded.base_model, models.base_model)")
    _run(con, "INSERT INTO items SELECT DISTINCT benchmark, item_id FROM _new_responses ON CONFLICT DO NOTHING")

    # responses: every row of a superseding or older run; of a merged run only keys not already current
    merged = bool(_run(con, "SELECT 1 FROM _relations WHERE relation = 'merge' AND kind = 'responses' LIMIT 1"))
    anti = (" AND NOT EXISTS (SELECT 1 FROM _relations r JOIN response_rows o ON o.run_id = r.old_id "
            "WHERE r.new_id = u.run_id AND r.relation = 'merge' AND o.item_id = n.item_id)") if merged else ""
    # rows grouped by benchmark (a benchmark's reads skip the others' row groups); a unit of one benchmark
    # needs no sort, which is a third of the ingest of a 210 M-row unit under the 4 GB memory bound
    several = _run(con, "SELECT count(DISTINCT benchmark) > 1 FROM _new_runs WHERE kind = 'responses'")[0][0]
    n_resp = int(_run(con, f"""
        INSERT INTO response_rows
        SELECT n.model, n.benchmark, n.item_id, n.score, u.run_id
        FROM _new_responses n JOIN _new_runs u ON u.model = n.model AND u.benchmark = n.benchmark
             AND u.kind = 'responses'
        WHERE true{anti}{" ORDER BY n.benchmark" if several else ""}""")[0][0])
    # rows per new run (new rows sit at the table's end: the run_id zone maps skip every older row group)
    _run(con, "CREATE TEMP TABLE _counts AS SELECT run_id, count(*) AS n FROM response_rows "
              "WHERE run_id >= (SELECT min(run_id) FROM _new_runs) GROUP BY run_id")
    # a merged score equal to the current one, or a merged responses run that added nothing, is no new run
    _run(con, """
        DELETE FROM _new_runs WHERE run_id IN (SELECT new_id FROM _relations WHERE relation = 'merge')
          AND run_id NOT IN (SELECT new_id FROM _relations WHERE relation <> 'merge')
          AND (kind = 'score' OR run_id NOT IN (SELECT run_id FROM _counts))""")
    n_scores = int(_run(con, "SELECT count(*) FROM _new_runs WHERE kind = 'score'")[0][0])
    _run(con, f"""
        INSERT INTO runs (run_id, ingest_id, model, benchmark, kind, task, n_shot, metric, filter, harness,
                          harness_version, "limit", run_at, score, n_rows, superseded_in, superseded_by,
                          superseded_at)
        SELECT u.run_id, u.ingest_id, u.model, u.benchmark, u.kind, u.task, u.n_shot, u.metric, u.filter,
               u.harness, u.harness_version, u."limit", u.run_at, u.score,
               CASE WHEN u.kind = 'responses' THEN coalesce(c.n, 0) END,
               CASE WHEN o.old_id IS NOT NULL THEN {ingest_id} END, o.old_id,
               CASE WHEN o.old_id IS NOT NULL THEN ?::TIMESTAMP END
        FROM _new_runs u
        LEFT JOIN _counts c ON c.run_id = u.run_id
        LEFT JOIN (SELECT new_id, max(old_id) AS old_id FROM _relations WHERE relation = 'older'
                   GROUP BY new_id) o ON o.new_id = u.run_id""", [now])
    # runs replaced by a later run, and runs of this source's earlier versions that it no longer holds
    superseded = _run(con, """
        UPDATE runs SET superseded_in = $1, superseded_at = $2,
               superseded_by = (SELECT max(r.new_id) FROM _relations r WHERE r.old_id = runs.run_id
                                AND r.relation = 'supersede')
        WHERE superseded_in IS NULL AND ingest_id <> $1 AND (
              run_id IN (SELECT old_id FROM _relations WHERE relation = 'supersede')
           OR ingest_id IN (SELECT ingest_id FROM ingests WHERE source_key = $3 AND ingest_id <> $1))""",
                      [ingest_id, now, source_key])
    return n_resp, n_scores, int(superseded[0][0])
