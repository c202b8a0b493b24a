"""The bulk path for long parquet files: DuckDB checks and reads them straight into the store.

Large long-format parquet (the leaderboard's 200 M rows) never passes through Polars: ``bulk_long``
checks the file with SQL over ``read_parquet`` and the ingest transaction inserts straight from it.
Any file those checks are unsure of takes the reader + validator path, so the accepted data and
every refusal message are the same on both paths. It is only ever called on the store's pinned
private copy of a unit (:mod:`sparseeval.data.store.pinning`), whose file names hold no glob characters
and whose bytes cannot change between the checks and the insert.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import polars as pl

from sparseeval.core import settings
from sparseeval.data.benchmarks import BenchmarkNameError
from sparseeval.data.interchange import ArrowView
from sparseeval.data.readers.base import RESPONSES_SCHEMA, SCORES_SCHEMA, SETTINGS_SCHEMA, InputError, ParsedResults
from sparseeval.data.readers.detect import detect_format
from sparseeval.data.readers.long import long_format, read_long_file
from sparseeval.data.readers.validation import BAD_ID_CHARS, MAX_ID_LENGTH, validate_results
from sparseeval.data.store.transactions import _run
from sparseeval.data.tasks import task_benchmark

_BAD_ID = re.compile(BAD_ID_CHARS)


#: names under which a unit's rows are visible to the ingest transaction
_STAGED = ("_new_responses", "_new_scores", "_new_models")
#: Unicode White_Space: exactly what Polars' ``str.strip_chars()`` (Rust ``char::is_whitespace``) strips
_WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(
    chr(c) for c in range(0x2000, 0x200B))
_NUMERIC_TYPES = ("BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER",
                  "UBIGINT", "FLOAT", "DOUBLE")


def _stage_frames(parsed: ParsedResults) -> Callable[[duckdb.DuckDBPyConnection], None]:
    def stage(con: duckdb.DuckDBPyConnection) -> None:
        con.register("_new_responses", ArrowView(parsed.responses))
        con.register("_new_scores", ArrowView(parsed.scores))
        con.register("_new_models", ArrowView(parsed.models))
    return stage


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _clean_id(value: object) -> bool:
    """True when validation would keep ``value`` unchanged: text, not blank, no edge whitespace, short."""
    return (isinstance(value, str) and value != "" and value.strip(_WHITESPACE) == value
            and len(value) <= MAX_ID_LENGTH and not _BAD_ID.search(value))


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
    con.register("_item_codes", ArrowView(codes))
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
        con.register("_new_scores", ArrowView(self.scores))
        con.register("_new_models", ArrowView(self.models))


def bulk_long(path: Path) -> _BulkLong | None:
    """Check a long-table unit whose responses are parquet with SQL over the file, or return None.

    Reading 20 M rows into Polars and validating them there takes ~50 s and ~7 GB; DuckDB checks
    the same file in a few seconds with little memory. The checks here are a conservative
    *superset* of :func:`sparseeval.data.readers.validation.validate_results` for clean data: anything the
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
    con = duckdb.connect(config=settings.duckdb_config())
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
        if columns.keys() & SETTINGS_SCHEMA.keys():  # settings need the validator (variants, per-run checks)
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
            mapped = {b: task_benchmark(b) for b in names}
        except BenchmarkNameError:
            return None
        if any(prefix is not None for _, prefix in mapped.values()):
            return None  # a subtask name (mmlu_anatomy): its item ids take the subtask, the validator does that
        canonical = {b: bench for b, (bench, _) in mapped.items()}
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
