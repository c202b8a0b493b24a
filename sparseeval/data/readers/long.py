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
live in :mod:`sparseeval.data.readers.validation`. Each frame carries a ``_line`` column (the 1-based line in
the file, or the row number for parquet) that validation uses for messages and then drops.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import gzip
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from sparseeval.core import settings
from sparseeval.data.interchange import to_polars
from sparseeval.data.readers.base import (
    MODELS_SCHEMA,
    RESPONSES_SCHEMA,
    SCORES_SCHEMA,
    SETTINGS_SCHEMA,
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
    """``parquet``/``csv``/``tsv``/``jsonl`` for a file this reader can parse (text formats may be
    gzip-compressed: ``.csv.gz``), else None."""
    suffixes = [s.lower() for s in path.suffixes]
    if len(suffixes) >= 2 and suffixes[-1] == ".gz" and FORMATS.get(suffixes[-2]) in ("csv", "tsv", "jsonl"):
        return FORMATS[suffixes[-2]]
    return FORMATS.get(path.suffix.lower())


_GLOB = re.compile(r"[\[\]?*{}]")


@contextlib.contextmanager
def exact_path(path: Path) -> Iterator[Path]:
    """A path DuckDB reads as exactly this one file.

    DuckDB expands ``[ ] ? * { }`` in a path as a glob even when it is a bound parameter, so
    ``run[12].parquet`` would read ``run1.parquet`` and ``run2.parquet``. A path with such characters
    is read through a symbolic link with a plain name in a private folder.
    """
    if not _GLOB.search(str(path)):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="sparseeval-exact-") as tmp:
        link = Path(tmp) / ("data" + "".join(path.suffixes[-2:]))
        link.symlink_to(path.resolve())
        yield link


def _is_gzip(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


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
    return kind, typed_frame(raw, kind, path)


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
    """Parse ``path`` with DuckDB's native reader into Polars, adding ``_line`` for text formats
    (the physical line where each record starts: blank lines and quoted newlines counted)."""
    fmt = long_format(path)
    if fmt is None:
        raise InputError(path, f"unknown format {path.suffix or '(no extension)'!r}: expected one of "
                               f"{', '.join(sorted(FORMATS))} (text formats may end in .gz)")
    if not path.is_file():
        raise InputError(path, "no such file")
    if path.stat().st_size == 0:
        raise InputError(path, "empty file (0 bytes)")
    compressed = path.suffix.lower() == ".gz"
    if fmt != "parquet" and not compressed and _is_gzip(path):
        raise InputError(path, f"the file is gzip-compressed but named {path.suffix!r}: decompress it or name it "
                               f"{path.name}.gz")
    con = duckdb.connect(config=settings.duckdb_config())
    con.execute("SET enable_progress_bar = false").fetchall()
    try:
        with exact_path(path) as readable:
            if fmt == "parquet":
                frame = _duck(con, path, readable, "SELECT * FROM read_parquet($p)")
                lines = None
            elif fmt == "jsonl":
                check_text(path)
                source = "read_json($p, format='newline_delimited', records=true, sample_size=-1)"
                _check_json_types(con, path, readable, source)
                frame = _duck(con, path, readable, f"SELECT * FROM {source}")
                lines = _record_lines(path, None, frame.height)
            else:
                check_text(path)
                delim = "\t" if fmt == "tsv" else ","
                frame = _read_delimited(con, path, readable, delim)
                lines = _record_lines(path, delim, frame.height)
    finally:
        con.close()
    frame = frame.rename({c: c.strip().lower() for c in frame.columns})
    if lines is None:  # parquet has no lines; validation then names the row
        return frame
    return frame.with_columns(pl.Series(LINE_COLUMN, lines, dtype=pl.Int64))


def _open_text(path: Path) -> Any:
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "rt", newline="", encoding="utf-8-sig")
    return path.open(newline="", encoding="utf-8-sig")


def _record_lines(path: Path, delim: str | None, n_records: int) -> list[int]:
    """The physical line on which each record starts, as DuckDB reads them (blank lines skipped,
    a quoted newline inside a CSV field continues the record). ``delim`` None: JSON lines."""
    lines: list[int] = []
    with _open_text(path) as fh:
        if delim is None:
            for number, line in enumerate(fh, start=1):
                if line.strip():
                    lines.append(number)
        else:
            reader = csv.reader(fh, delimiter=delim, quotechar='"', doublequote=True)
            start = 1
            for record in reader:
                if record and start > 1:  # the header is line 1
                    lines.append(start)
                start = reader.line_num + 1
    if len(lines) != n_records:  # a dialect corner where Python and DuckDB differ: fall back to counting
        offset = 1 if delim is None else 2
        return list(range(offset, offset + n_records))
    return lines


def _check_json_types(con: duckdb.DuckDBPyConnection, path: Path, readable: Path, source: str) -> None:
    """Refuse a JSON lines file whose key or result column mixes types (``"item_id": "7"`` on one
    line, ``"item_id": 7`` on another). DuckDB types such a column as JSON and its text keeps the
    quotes (``"7"``), which would store phantom items that look right."""
    described = _duck(con, path, readable, f"DESCRIBE SELECT * FROM {source}")
    for name, dtype in zip(described.get_column("column_name"), described.get_column("column_type"), strict=True):
        column = name.strip().lower()
        if dtype != "JSON" or column not in (*_ID_COLUMNS, "score", "correct", *_META_COLUMNS):
            continue
        types = _duck(con, path, readable,
                      f'SELECT row_number() OVER () AS n, json_type("{name}") AS t FROM {source}')
        counts = types.get_column("t").drop_nulls().value_counts(sort=True)
        usual = counts.item(0, 0)
        odd = types.filter(pl.col("t").is_not_null() & (pl.col("t") != usual))
        record = int(odd.item(0, "n"))
        line = _record_lines(path, None, types.height)[record - 1]
        raise InputError(path, f"column {column!r} mixes types: {odd.item(0, 't').lower()} here, "
                               f"{usual.lower()} on most lines ({odd.height} such line(s)); write every "
                               f"{column} as text (quoted) or every one as a number", line=line, column=column)


def _read_delimited(con: duckdb.DuckDBPyConnection, path: Path, readable: Path, delim: str) -> pl.DataFrame:
    with _open_text(path) as fh:
        header = next(csv.reader(fh, delimiter=delim), [])
    names = [h.strip() for h in header]
    if len(names) == 1:
        other = next((d for d in (";", "\t", "|", ",") if d != delim and d in names[0]), None)
        if other is not None:
            shown = {"\t": "tab", ";": "';'", "|": "'|'", ",": "','"}[other]
            raise InputError(path, f"the file is separated by {shown}, not {'tab' if delim == chr(9) else repr(delim)}"
                                   f" as its {path.suffix!r} name says: save it "
                                   f"{'tab-separated' if delim == chr(9) else 'comma-separated'}"
                                   f"{' or name it .tsv' if other == chr(9) else ''}", line=1)
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
    return _duck(con, path, readable, sql, d=delim, c=columns)


_LINE_RE = re.compile(r"(?:CSV Error on Line:|\bin line)\s*(\d+)")


def _duck(con: duckdb.DuckDBPyConnection, path: Path, readable: Path, sql: str, **params: object) -> pl.DataFrame:
    """Run a DuckDB read of ``readable`` (``path`` made glob-safe) and turn its errors into
    :class:`InputError` naming ``path``, with the line if known."""
    try:
        return to_polars(con.sql(sql, params={"p": str(readable), **params}))
    except duckdb.Error as exc:
        text = str(exc)
        match = _LINE_RE.search(text)
        line = int(match.group(1)) if match else None
        problem = _first_problem(text).replace(str(readable), str(path))
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


def check_text(path: Path, chunk: int = 1 << 20) -> None:
    """Refuse a text file that is not UTF-8 or holds NUL bytes, naming the line of the first bad byte.

    Streamed in chunks so large files cost no memory (a 2 GB file of NUL bytes is refused after
    its first megabyte, never handed to a parser that would buffer it as one line); only a failing
    file is re-read to find the line. DuckDB would also refuse, but its message points at the wrong
    original line.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    consumed = 0
    lines_before = 0
    opener = gzip.open if path.suffix.lower() == ".gz" else open
    with opener(path, "rb") as fh:
        while block := fh.read(chunk):
            nul = block.find(b"\x00")
            if nul >= 0:
                line = lines_before + block.count(b"\n", 0, nul) + 1
                raise InputError(path, f"binary data: NUL byte at byte {consumed + nul}; not a text table",
                                 line=line)
            lines_before += block.count(b"\n")
            try:
                decoder.decode(block)
            except UnicodeDecodeError as exc:
                with opener(path, "rb") as again:
                    data = again.read(consumed + len(block))
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError as full:
                    bad = full.start if full.reason != "unexpected end of data" else consumed + exc.start
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


def typed_frame(raw: pl.DataFrame, kind: str, path: Path) -> pl.DataFrame:
    if kind == "models":
        return _typed_models(raw, path)
    value = "score" if "score" in raw.columns else "correct"
    settings = [c for c in SETTINGS_SCHEMA if c in raw.columns]
    out = raw.select(
        *[_as_string(raw, c, path) for c in _ID_COLUMNS if c != "item_id" or kind == "responses"],
        _as_number(raw, value, path).alias("score"),
        *[_as_setting(raw, c, path) for c in settings],
        *_line(raw),
    )
    schema = RESPONSES_SCHEMA if kind == "responses" else SCORES_SCHEMA
    return out.select(*schema, *settings, *_line(raw))


def _as_setting(raw: pl.DataFrame, column: str, path: Path) -> pl.Expr:
    """An evaluation-settings column (``n_shot``, ``run_at``...) in its canonical type; a value
    that is present but cannot be read as that type is refused, never turned into null."""
    target = SETTINGS_SCHEMA[column]
    dtype = raw.schema[column]
    if target == pl.String():
        return _as_string(raw, column, path)
    if target.is_numeric():
        expr = _as_number(raw, column, path)
        if target.is_integer():
            bad = raw.select(expr.alias("v")).filter(pl.col("v").is_not_null() & (pl.col("v") != pl.col("v").round()))
            if bad.height:
                raise InputError(path, f"wrong type: {column} {bad.item(0, 0)!r} is not a whole number", column=column)
        return expr.cast(target).alias(column)
    if dtype.is_temporal() or dtype == pl.Null:
        return pl.col(column).cast(target)
    if dtype != pl.String:
        raise InputError(path, f"wrong type: column {column!r} is {dtype}, expected a date and time", column=column)
    parsed = pl.col(column).str.strip_chars().str.to_datetime(strict=False, time_unit="us")
    bad = raw.filter(pl.col(column).str.strip_chars().ne("") & parsed.is_null() & pl.col(column).is_not_null())
    if bad.height:
        first = bad.row(0, named=True)
        raise InputError(path, f"wrong type: {column} {first[column]!r} is not a date and time",
                         line=first.get(LINE_COLUMN), column=column)
    return parsed.alias(column)


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
