"""Reader for long tables: one row per (model, benchmark, item) result, in parquet, CSV/TSV or JSONL.

A long file is classified by its columns, so one reader covers the three kinds of file a user has:

* responses: ``model, benchmark, item_id, correct|score`` (``score`` wins when both are present);
* scores: ``model, benchmark, score`` (reported full-benchmark scores, no ``item_id``);
* models: ``model`` plus any of ``submitted_at, n_params, base_model`` (metadata, no ``score``).

A folder holding ``responses.*`` and optionally ``scores.*`` and ``models.*`` (like the bundled
``openllm_v1`` data) reads as one :class:`ParsedResults`.

Parsing uses DuckDB's native readers (fast, and their errors carry line numbers); CSV is read with
an explicit dialect and every column as text, because sniffing a broken file produces a useless
"could not detect dialect" error, and because reading text lets us name the exact line of a
non-numeric score instead of silently turning it into NULL. Casting is done with Polars
expressions; this module only parses and types. Semantic checks (ranges, blanks, duplicates)
live in :mod:`sparseeval.validation`. Each frame carries a ``_line`` column (the 1-based line in
the file, or the row number for parquet) that validation uses for messages and then drops.
"""

from __future__ import annotations

import codecs
import csv
import re
from pathlib import Path

import duckdb
import polars as pl

from sparseeval.readers.base import (
    MODELS_SCHEMA,
    RESPONSES_SCHEMA,
    SCORES_SCHEMA,
    InputError,
    ParsedResults,
)

#: file extensions this reader understands, by format
FORMATS: dict[str, str] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}
LINE_COLUMN = "_line"
_ID_COLUMNS = ("model", "benchmark", "item_id")
_META_COLUMNS = ("submitted_at", "n_params", "base_model")
_TRUE_FALSE = {"true": 1.0, "false": 0.0}


def long_format(path: Path) -> str | None:
    """``parquet``/``csv``/``tsv``/``jsonl`` for a file this reader can parse, else None."""
    return FORMATS.get(path.suffix.lower())


def read_long(path: str | Path) -> ParsedResults:
    """Read a long file or a folder of ``responses.*`` / ``scores.*`` / ``models.*``.

    Raises :class:`InputError` naming the file (and line/column where known) for anything that
    cannot be parsed or typed.
    """
    path = Path(path)
    if path.is_dir():
        return _read_folder(path)
    kind, frame = read_long_file(path)
    parsed = ParsedResults(responses=_empty(RESPONSES_SCHEMA), sources=[path])
    setattr(parsed, kind, frame)
    return parsed


def read_long_file(path: Path) -> tuple[str, pl.DataFrame]:
    """Parse one file; return its kind (``responses``/``scores``/``models``) and typed frame."""
    raw = read_table(path)
    kind = classify(raw.columns, path)
    return kind, _typed(raw, kind, path)


def _read_folder(folder: Path) -> ParsedResults:
    found: dict[str, Path] = {}
    for child in sorted(folder.iterdir()):
        stem = child.name.split(".")[0].lower()
        if child.is_file() and stem in ("responses", "scores", "models") and long_format(child):
            if stem in found:
                raise InputError(folder, f"two {stem} files: {found[stem].name} and {child.name}")
            found[stem] = child
    if "responses" not in found:
        raise InputError(folder, "no responses.parquet/.csv/.tsv/.jsonl in this folder")
    parsed = ParsedResults(responses=_empty(RESPONSES_SCHEMA), sources=list(found.values()))
    for stem, file in found.items():
        kind, frame = read_long_file(file)
        if kind != stem:
            raise InputError(file, f"file named {stem} has the columns of a {kind} file: "
                                   f"{', '.join(c for c in frame.columns if c != LINE_COLUMN)}")
        setattr(parsed, kind, frame)
    return parsed


def _empty(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


# --- parsing ---------------------------------------------------------------------------------------

def read_table(path: Path) -> pl.DataFrame:
    """Parse ``path`` with DuckDB's native reader into Polars, adding ``_line`` for text formats."""
    fmt = long_format(path)
    if fmt is None:
        raise InputError(path, f"unknown format {path.suffix or '(no extension)'!r}: expected one of "
                               f"{', '.join(sorted(FORMATS))}")
    if not path.is_file():
        raise InputError(path, "no such file")
    if path.stat().st_size == 0:
        raise InputError(path, "empty file (0 bytes)")
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false").fetchall()
    try:
        if fmt == "parquet":
            frame = _duck(con, path, "SELECT * FROM read_parquet($p)")
            offset = None
        elif fmt == "jsonl":
            check_utf8(path)
            frame = _duck(con, path, "SELECT * FROM read_json($p, format='newline_delimited', "
                                     "records=true, sample_size=-1)")
            offset = 1
        else:
            check_utf8(path)
            frame = _read_delimited(con, path, "\t" if fmt == "tsv" else ",")
            offset = 2  # header is line 1
    finally:
        con.close()
    frame = frame.rename({c: c.strip().lower() for c in frame.columns})
    if offset is None:  # parquet has no lines; validation then names the row
        return frame
    return frame.with_row_index(LINE_COLUMN, offset=offset).with_columns(pl.col(LINE_COLUMN).cast(pl.Int64))


def _read_delimited(con: duckdb.DuckDBPyConnection, path: Path, delim: str) -> pl.DataFrame:
    with path.open(newline="", encoding="utf-8-sig") as fh:
        header = next(csv.reader(fh, delimiter=delim), [])
    names = [h.strip() for h in header]
    if not any(names):
        raise InputError(path, "no header line", line=1)
    blank = [i + 1 for i, n in enumerate(names) if not n]
    if blank:
        raise InputError(path, f"header has an empty column name at position {blank[0]}", line=1)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(path, f"header repeats column {dupes[0]!r}", line=1)
    columns = {n: "VARCHAR" for n in names}
    sql = ("SELECT * FROM read_csv($p, header=true, auto_detect=false, strict_mode=true, "
           "delim=$d, quote='\"', escape='\"', columns=$c)")
    return _duck(con, path, sql, d=delim, c=columns)


_LINE_RE = re.compile(r"(?:CSV Error on Line:|\bin line)\s*(\d+)")


def _duck(con: duckdb.DuckDBPyConnection, path: Path, sql: str, **params: object) -> pl.DataFrame:
    """Run a DuckDB read and turn its errors into :class:`InputError` with the line if known."""
    try:
        return con.sql(sql, params={"p": str(path), **params}).pl()
    except duckdb.Error as exc:
        text = str(exc)
        match = _LINE_RE.search(text)
        line = int(match.group(1)) if match else None
        problem = _first_problem(text)
        if "magic bytes" in text.lower() or "parquet" in text.lower():
            problem = f"not a readable parquet file (truncated or corrupt): {problem}"
        raise InputError(path, problem, line=line) from None


def _first_problem(text: str) -> str:
    """DuckDB's messages are long; keep the lines that say what is wrong."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.lower().startswith(("possible fix", "*", "file =", "delimiter",
                                                              "original line", "line 1:", "^", "new_line",
                                                              "quote", "escape", "new line", "header",
                                                              "skip rows", "comment", "date format",
                                                              "timestamp format", "null padding",
                                                              "sample size", "ignore errors",
                                                              "all varchar", "strict mode",
                                                              "the search space", "encoding"))]
    keep = [ln for ln in keep if not re.match(r"^\w+ = ", ln)]  # reader settings, e.g. "skip_rows = 0"
    return " ".join(keep[:3]) if keep else text[:300]


def check_utf8(path: Path, chunk: int = 1 << 20) -> None:
    """Refuse a text file that is not UTF-8, naming the line of the first bad byte.

    Streamed in chunks so large files cost no memory; only a failing file is re-read to find the
    line. DuckDB would also refuse, but its message points at the wrong original line.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    consumed = 0
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            try:
                decoder.decode(block)
            except UnicodeDecodeError as exc:
                data = path.read_bytes()
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError as full:
                    bad = full.start
                else:  # pragma: no cover - the incremental decoder already failed
                    bad = consumed + exc.start
                line = data.count(b"\n", 0, bad) + 1
                raise InputError(path, f"not UTF-8 text: invalid byte 0x{data[bad]:02x} at byte {bad}",
                                 line=line) from None
            consumed += len(block)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise InputError(path, "not UTF-8 text: truncated multi-byte character at end of file") from None


# --- classification and typing ---------------------------------------------------------------------

def classify(columns: list[str], path: Path) -> str:
    """Which kind of long file the columns describe; missing columns raise a precise error."""
    cols = set(columns)
    if "model" not in cols:
        raise InputError(path, "missing column 'model'; a long table needs model, benchmark, item_id and "
                               "correct or score", column="model")
    if "item_id" in cols:
        if not cols & {"correct", "score"}:
            raise InputError(path, "missing column 'correct' or 'score' (the per-item result)",
                             column="correct|score")
        if "benchmark" not in cols:
            raise InputError(path, "missing column 'benchmark'", column="benchmark")
        return "responses"
    if "score" in cols or "correct" in cols:
        if "benchmark" not in cols:
            raise InputError(path, "missing column 'benchmark'", column="benchmark")
        if "correct" in cols and "score" not in cols:
            raise InputError(path, "missing column 'item_id' (a per-item 'correct' needs the item)",
                             column="item_id")
        return "scores"
    if cols & set(_META_COLUMNS):
        return "models"
    raise InputError(path, "missing columns: expected model, benchmark, item_id, correct|score "
                           f"(responses) or model, benchmark, score (scores); found {', '.join(columns)}")


def _typed(raw: pl.DataFrame, kind: str, path: Path) -> pl.DataFrame:
    if kind == "models":
        return _typed_models(raw, path)
    value = "score" if "score" in raw.columns else "correct"
    out = raw.select(
        *[_as_string(raw, c, path) for c in _ID_COLUMNS if c != "item_id" or kind == "responses"],
        _as_number(raw, value, path).alias("score"),
        *_line(raw),
    )
    schema = RESPONSES_SCHEMA if kind == "responses" else SCORES_SCHEMA
    return out.select(*schema, *_line(raw))


def _line(raw: pl.DataFrame) -> list[pl.Expr]:
    return [pl.col(LINE_COLUMN)] if LINE_COLUMN in raw.columns else []


def _as_string(raw: pl.DataFrame, column: str, path: Path) -> pl.Expr:
    dtype = raw.schema[column]
    if dtype == pl.String or dtype == pl.Null:
        return pl.col(column).cast(pl.String)
    if dtype.is_integer() or dtype == pl.Categorical or dtype == pl.Enum:
        return pl.col(column).cast(pl.String)
    raise InputError(path, f"wrong type: column {column!r} is {dtype}, expected text", column=column)


def _as_number(raw: pl.DataFrame, column: str, path: Path) -> pl.Expr:
    """Cast the result column to float64; a value that is present but not a number is refused."""
    dtype = raw.schema[column]
    if dtype.is_numeric() or dtype == pl.Boolean or dtype == pl.Null:
        return pl.col(column).cast(pl.Float64)
    if dtype != pl.String:
        raise InputError(path, f"wrong type: column {column!r} is {dtype}, expected a number", column=column)
    text = pl.col(column).str.strip_chars()
    lowered = text.str.to_lowercase()
    cast = (pl.when(lowered.is_in(list(_TRUE_FALSE)))
            .then(lowered.replace_strict(_TRUE_FALSE, default=None, return_dtype=pl.Float64))
            .otherwise(text.cast(pl.Float64, strict=False)))
    bad = (raw.with_row_index("_row", offset=1).with_columns(_cast=cast)
           .filter(text.is_not_null() & (text != "") & pl.col("_cast").is_null()))
    if bad.height:
        first = bad.row(0, named=True)
        where = "" if LINE_COLUMN in first else f", row {first['_row']}"
        raise InputError(path, f"wrong type: {column} {first[column]!r} is not a number "
                               f"({bad.height} such value(s){where})", line=first.get(LINE_COLUMN),
                         column=column)
    return pl.when(text == "").then(None).otherwise(cast)


def _typed_models(raw: pl.DataFrame, path: Path) -> pl.DataFrame:
    exprs: list[pl.Expr] = [_as_string(raw, "model", path)]
    if "submitted_at" in raw.columns:
        dtype = raw.schema["submitted_at"]
        if dtype == pl.String:
            parsed = pl.col("submitted_at").str.strip_chars().str.to_datetime(strict=False, time_unit="us")
            bad = raw.filter(pl.col("submitted_at").str.strip_chars().ne("")
                             & parsed.is_null() & pl.col("submitted_at").is_not_null())
            if bad.height:
                first = bad.row(0, named=True)
                raise InputError(path, f"wrong type: submitted_at {first['submitted_at']!r} is not a date",
                                 line=first.get(LINE_COLUMN), column="submitted_at")
            exprs.append(parsed.alias("submitted_at"))
        elif dtype.is_temporal() or dtype == pl.Null:
            exprs.append(pl.col("submitted_at").cast(pl.Datetime("us")))
        else:
            raise InputError(path, f"wrong type: column 'submitted_at' is {dtype}, expected a date",
                             column="submitted_at")
    else:
        exprs.append(pl.lit(None, pl.Datetime("us")).alias("submitted_at"))
    if "n_params" in raw.columns:
        exprs.append(_as_number(raw, "n_params", path).alias("n_params"))
    else:
        exprs.append(pl.lit(None, pl.Float64).alias("n_params"))
    if "base_model" in raw.columns:
        exprs.append(_as_string(raw, "base_model", path).alias("base_model"))
    else:
        exprs.append(pl.lit(None, pl.String).alias("base_model"))
    return raw.select(*exprs, *_line(raw)).select(*MODELS_SCHEMA, *_line(raw))
