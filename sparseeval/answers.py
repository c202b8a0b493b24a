"""Read a new model's answers to anchor items from what users actually have.

Three inputs, one output frame ``(model, benchmark, item_id, score)`` (the readers' canonical
responses layout, so the predictor does not care where the answers came from):

* an **lm-evaluation-harness output folder** (``--log_samples``: ``samples_<task>_*.jsonl`` and
  ``results_*.json``), the normal way to run only the anchors (``sparseeval export`` ->
  ``lm_eval --samples``);
* a **long table** (parquet / CSV / JSON lines) with ``model, benchmark, item_id`` and ``score``
  (or ``correct``);
* a **two-column CSV** ``item_id,correct`` for one model and one benchmark, named by the caller.

Tabular files go through DuckDB's own readers (fast, typed, good error messages); every refusal
is an :class:`~sparseeval.readers.base.InputError` naming the file and the problem.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import polars as pl

from sparseeval.benchmarks import BenchmarkNameError, canonical_benchmark
from sparseeval.readers.base import RESPONSES_SCHEMA, InputError
from sparseeval.readers.lm_eval import read_lm_eval

_SAMPLES_RE = re.compile(r"^samples_(?P<task>.+)_(?P<stamp>\d{4}-\d{2}-\d{2}T[\d\-.:]+)\.jsonl$")


def read_answers(path: str | Path, *, benchmark: str | None = None, model: str | None = None) -> pl.DataFrame:
    """Answers in ``path`` as ``(model, benchmark, item_id, score)``.

    ``benchmark`` and ``model`` fill in what a two-column ``item_id,correct`` file cannot say
    (the model defaults to the file's stem); they are ignored when the file names its own.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such file or folder")
    if path.is_dir():
        frame = read_lm_eval_folder(path)
    elif _SAMPLES_RE.match(path.name):
        frame = _read_model_folder(path, [path])
    else:
        frame = _read_table(path, benchmark=benchmark, model=model)
    return _validate(frame, path, with_lines=path.is_file() and path.name.lower().endswith((".csv", ".tsv")))


# -- lm-eval output -----------------------------------------------------------------------------


def read_lm_eval_folder(folder: Path) -> pl.DataFrame:
    """Every ``samples_*.jsonl`` under ``folder`` (lm-eval nests them in a per-model folder)."""
    files = sorted(p for p in folder.rglob("samples_*.jsonl") if _SAMPLES_RE.match(p.name))
    if not files:
        raise InputError(folder, "no lm-eval samples_<task>_<date>.jsonl files found "
                                 "(run lm_eval with --log_samples --output_path)")
    frames = [_read_model_folder(parent, group) for parent, group in _by_parent(files).items()]
    return pl.concat(frames)


def _read_model_folder(target: Path, files: list[Path]) -> pl.DataFrame:
    """One model's folder (or one samples file), through the project's lm-eval reader: it knows
    each leaderboard benchmark's metric and filter, and the MMLU subject ids."""
    return read_lm_eval(target).responses.select(list(RESPONSES_SCHEMA))


def _by_parent(files: list[Path]) -> dict[Path, list[Path]]:
    groups: dict[Path, list[Path]] = {}
    for f in files:
        groups.setdefault(f.parent, []).append(f)
    return groups


# -- tables -------------------------------------------------------------------------------------


def _duckdb_read(path: Path) -> pl.DataFrame:
    """Parse a table with DuckDB; CSV as text (typed later, so a bad cell is named, not nulled)."""
    name = path.name.lower()
    con = duckdb.connect()
    try:
        if name.endswith((".parquet", ".pq")):
            rel = con.sql("SELECT * FROM read_parquet(?)", params=[str(path)])
        elif name.endswith((".csv", ".tsv", ".csv.gz", ".tsv.gz")):
            rel = con.sql("SELECT * FROM read_csv(?, header = true, all_varchar = true)", params=[str(path)])
        elif name.endswith((".jsonl", ".ndjson")):
            rel = con.sql("SELECT * FROM read_json(?, format = 'newline_delimited')", params=[str(path)])
        else:
            raise InputError(path, f"unknown answers format {path.suffix!r}: give an lm-eval output folder, "
                                   "or a .parquet / .csv / .jsonl table")
        return rel.pl()
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(path, f"cannot read as a table: {first}") from None
    finally:
        con.close()


def _read_table(path: Path, *, benchmark: str | None, model: str | None) -> pl.DataFrame:
    df = _duckdb_read(path)
    df = df.rename({c: c.strip().lower() for c in df.columns})
    if "score" not in df.columns and "correct" in df.columns:
        df = df.rename({"correct": "score"})
    for col in ("item_id", "score"):
        if col not in df.columns:
            raise InputError(path, f"missing column {col!r} (need item_id and score or correct; "
                                   f"found {', '.join(df.columns) or 'none'})")
    if "model" not in df.columns:
        df = df.with_columns(pl.lit(model or path.name.split(".")[0]).alias("model"))
    if "benchmark" not in df.columns:
        if benchmark is None:
            raise InputError(path, "no benchmark column: name the benchmark (--benchmark) "
                                   "or use one predictor")
        df = df.with_columns(pl.lit(benchmark).alias("benchmark"))
    score = pl.col("score")
    if df.schema["score"] == pl.String:  # CSV text: true/false or numbers
        low = score.str.strip_chars().str.to_lowercase()
        score = pl.when(low == "true").then(1.0).when(low == "false").then(0.0) \
            .otherwise(low.cast(pl.Float64, strict=False))
    df = df.select(
        pl.col("model").cast(pl.String),
        pl.col("benchmark").cast(pl.String),
        pl.col("item_id").cast(pl.String),
        score.cast(pl.Float64, strict=False).alias("score"),
        pl.col("score").is_not_null().alias("_given"),
    )
    bad = df.get_column("score").is_null() & df.get_column("_given")
    if bad.any():
        raise InputError(path, "score is not a number", line=_line(bad), column="score")
    df = df.drop("_given")
    benches = df.get_column("benchmark").unique().drop_nulls().to_list()
    try:
        mapping = {b: canonical_benchmark(b) for b in benches}
    except BenchmarkNameError as exc:
        raise InputError(path, str(exc), column="benchmark") from None
    return df.with_columns(pl.col("benchmark").replace_strict(mapping, default=None))


def _validate(df: pl.DataFrame, path: Path, *, with_lines: bool = False) -> pl.DataFrame:
    """Refuse nulls, scores outside [0, 1] and duplicate (model, benchmark, item) rows.

    ``with_lines``: rows are the data lines of a text table with a header, so name the line."""
    if df.height == 0:
        raise InputError(path, "no answers found")
    for col in ("model", "benchmark", "item_id", "score"):
        nulls = df.get_column(col).is_null() | (df.get_column(col).is_nan() if col == "score" else False)
        if nulls.any():
            raise InputError(path, f"{int(nulls.sum())} empty value(s)",
                             line=_line(nulls) if with_lines else None, column=col)
    bad = ~df.get_column("score").is_between(0.0, 1.0)
    if bad.any():
        first = df.filter(bad).get_column("score")[0]
        raise InputError(path, f"score {first} outside [0, 1]", line=_line(bad) if with_lines else None,
                         column="score")
    dup = df.select("model", "benchmark", "item_id").is_duplicated()
    if dup.any():
        row = df.filter(dup).row(0, named=True)
        raise InputError(path, f"duplicate answer for model {row['model']!r}, "
                               f"benchmark {row['benchmark']!r}, item {row['item_id']!r}")
    return df


def _line(mask: pl.Series) -> int | None:
    """1-based data line of the first flagged row (+1 for a header line)."""
    idx = mask.arg_true()
    return int(idx[0]) + 2 if idx.len() else None
