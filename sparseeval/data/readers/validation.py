"""Semantic checks on parsed results before anything reaches the store.

Readers only parse and type; this module decides whether the data may be stored, because every
reader (long tables, lm-eval folders, leaderboard details) must be held to the same rules. A bad
value that got in would silently bias every matrix built later (a duplicated item counts twice, a
score of 1.7 inflates a mean, a blank model name merges unrelated rows), so the whole source is
refused with an :class:`InputError` that names the file, the line (``_line`` column, when the
reader supplied one) or the first offending row, the column and the problem.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from sparseeval.data.benchmarks import BenchmarkNameError, variant_name
from sparseeval.data.readers.base import (
    MODELS_SCHEMA,
    RESPONSES_SCHEMA,
    SCORES_SCHEMA,
    SETTINGS_SCHEMA,
    InputError,
    ParsedResults,
)
from sparseeval.data.tasks import task_benchmark

#: longest id (model, benchmark, item) accepted; longer ones are almost always a parsing accident
MAX_ID_LENGTH = 512
LINE_COLUMN = "_line"
#: characters never accepted in a model or item id: C0/C1 controls (NUL, newline, tab...), and the
#: invisible format characters that make two different strings print the same (zero-width space /
#: joiners, bidi overrides, BOM). Stored, they would split one model into two that nobody can tell apart.
BAD_ID_CHARS = r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]"


def validate_results(parsed: ParsedResults, path: str | Path) -> ParsedResults:
    """Return ``parsed`` checked and normalised (benchmarks canonical, ids trimmed, ``_line`` dropped).

    Raises :class:`InputError` for: missing columns, wrong types, empty input, null/blank/huge ids,
    ids with control or invisible characters, null/NaN/out-of-range scores, duplicate keys, models
    with zero items, a reported score from a ``--limit`` run, and settings that differ within one
    (model, benchmark). Evaluation settings columns (:data:`SETTINGS_SCHEMA`) are kept, and the
    benchmark becomes its variant for them (``arc`` run 0-shot is stored as ``arc@0shot``).
    A source whose rows are all gone (every part refused by the reader) is refused with those reasons.
    """
    path = Path(path)
    frames = {"responses": parsed.responses, "scores": parsed.scores, "models": parsed.models}
    schemas = {"responses": RESPONSES_SCHEMA, "scores": SCORES_SCHEMA, "models": MODELS_SCHEMA}
    for kind, frame in frames.items():
        _check_columns(frame, schemas[kind], kind, path)
        if kind != "models":
            _check_columns(frame, {c: t for c, t in SETTINGS_SCHEMA.items() if c in frame.columns}, kind, path)
    if frames["responses"].height == 0 and frames["scores"].height == 0:
        refused = parsed.refused_parts
        if refused:
            raise InputError(path, "nothing stored: " + "; ".join(f"{n.part}: {n.reason}" for n in refused))
        if frames["models"].height == 0:
            raise InputError(path, "no rows: the file is empty or has only a header")

    responses = _check_results(frames["responses"], ("model", "benchmark", "item_id"), path)
    scores = _check_results(frames["scores"], ("model", "benchmark"), path)
    if "limit" in scores.columns:
        _refuse(path, scores, pl.col("limit").is_not_null(), "a --limit run's aggregate is not a full-benchmark "
                "score (the per-item responses of such a run are kept)", "limit")
    models = _check_models(frames["models"], path)
    if responses.height and scores.height:
        _check_scored_models_have_items(responses, scores, path)
    checked = ParsedResults(
        responses=responses.select(*RESPONSES_SCHEMA, *_settings(responses)),
        scores=scores.select(*SCORES_SCHEMA, *_settings(scores)),
        models=models.select(*MODELS_SCHEMA),
        sources=list(parsed.sources) or [path],
        notes=list(parsed.notes),
        format=parsed.format,
    )
    return checked


def _settings(frame: pl.DataFrame) -> list[str]:
    return [c for c in SETTINGS_SCHEMA if c in frame.columns]


def _variants(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    """Benchmark -> its variant for the row's n-shot and metric; settings must be constant per
    (model, benchmark variant): one run has one set of settings."""
    if "n_shot" not in frame.columns and "metric" not in frame.columns:
        return frame
    shots = pl.col("n_shot") if "n_shot" in frame.columns else pl.lit(None, pl.Int64)
    metric = pl.col("metric") if "metric" in frame.columns else pl.lit(None, pl.String)
    combos = frame.select(pl.col("benchmark"), shots.alias("_n"), metric.alias("_m")).unique()
    mapping = combos.with_columns(
        pl.struct("benchmark", "_n", "_m").map_elements(
            lambda r: variant_name(r["benchmark"], r["_n"], r["_m"]), return_dtype=pl.String).alias("_variant"))
    frame = (frame.with_columns(shots.alias("_n"), metric.alias("_m"))
             .join(mapping, on=["benchmark", "_n", "_m"], how="left", nulls_equal=True, maintain_order="left")
             .with_columns(pl.col("_variant").alias("benchmark")).drop("_n", "_m", "_variant"))
    for column in _settings(frame):
        mixed = pl.col(column).n_unique().over("model", "benchmark") > 1
        _refuse(path, frame, mixed, f"one run mixes several values of setting {column!r} for the same model "
                "and benchmark", column)
    return frame


def _check_columns(frame: pl.DataFrame, schema: dict[str, pl.DataType], kind: str, path: Path) -> None:
    missing = [c for c in schema if c not in frame.columns]
    if missing and frame.height:
        raise InputError(path, f"missing column(s) {', '.join(map(repr, missing))} in {kind}",
                         column=missing[0])
    for column, dtype in schema.items():
        if column not in frame.columns or frame.height == 0:
            continue
        actual = frame.schema[column]
        ok = (actual.is_numeric() if dtype.is_numeric() else
              actual.is_temporal() or actual == pl.Null if dtype.is_temporal() else
              actual in (pl.String, pl.Null))
        if not ok:
            raise InputError(path, f"wrong type: {kind} column {column!r} is {actual}, expected {dtype}",
                             column=column)


def _where(frame: pl.DataFrame, mask: pl.Expr) -> tuple[int | None, dict, int]:
    """Line (if known), first offending row and number of offending rows for ``mask``."""
    bad = frame.with_row_index("_row", offset=1).filter(mask)
    if bad.height == 0:
        return None, {}, 0
    row = bad.row(0, named=True)
    return row.get(LINE_COLUMN), row, bad.height


def _refuse(path: Path, frame: pl.DataFrame, mask: pl.Expr, problem: str, column: str) -> None:
    line, row, count = _where(frame, mask)
    if not count:
        return
    where = "" if line is not None else f" (row {row['_row']})"
    value = row.get(column)
    shown = value if not isinstance(value, str) or len(value) <= 60 else value[:57] + "..."
    more = f"; {count} such row(s)" if count > 1 else ""
    raise InputError(path, f"{problem}: {shown!r}{where}{more}", line=line, column=column)


def _check_ids(frame: pl.DataFrame, columns: tuple[str, ...], path: Path) -> pl.DataFrame:
    for column in columns:
        text = pl.col(column).str.strip_chars()
        _refuse(path, frame, pl.col(column).is_null() | (text == ""), f"{column} is empty or blank", column)
        _refuse(path, frame, pl.col(column).str.len_chars() > MAX_ID_LENGTH,
                f"{column} longer than {MAX_ID_LENGTH} characters", column)
        if column != "benchmark":  # benchmark names are checked (same rule) by canonical_benchmark
            _refuse(path, frame, pl.col(column).str.contains(BAD_ID_CHARS),
                    f"{column} contains a control or invisible character (NUL, newline, zero-width, bidi)",
                    column)
    return frame.with_columns(pl.col(c).str.strip_chars() for c in columns if c != "benchmark")


def _canonical_benchmarks(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    """Fold benchmark spellings onto canonical names (one call per distinct name, not per row).

    A name that is a subtask of a benchmark (``mmlu_anatomy``, ``leaderboard_bbh_navigate``; see
    :mod:`sparseeval.data.tasks`) folds into that benchmark with the subtask kept in the item id
    (``anatomy.<id>``), as the harness readers store it. A score row of a subtask is refused: one
    subject's score is not the benchmark's."""
    mapping: dict[str, str] = {}
    prefixes: dict[str, str] = {}
    for name in frame.get_column("benchmark").unique().to_list():
        try:
            bench, prefix = task_benchmark(name)
        except BenchmarkNameError as exc:
            line, _, _ = _where(frame, pl.col("benchmark") == name)
            raise InputError(path, str(exc), line=line, column="benchmark") from None
        mapping[name] = bench
        if prefix is not None:
            prefixes[name] = prefix
    if prefixes and "item_id" not in frame.columns:
        name = sorted(prefixes)[0]
        line, _, _ = _where(frame, pl.col("benchmark") == name)
        raise InputError(path, f"benchmark {name!r} is the subtask {prefixes[name]!r} of {mapping[name]!r}: its "
                               f"score is not a {mapping[name]} score (give the {mapping[name]} score, or the "
                               "per-item responses)", line=line, column="benchmark")
    if prefixes:
        prefix = pl.col("benchmark").replace_strict(prefixes, default=None, return_dtype=pl.String)
        frame = frame.with_columns(pl.when(prefix.is_not_null()).then(prefix + "." + pl.col("item_id"))
                                   .otherwise(pl.col("item_id")).alias("item_id"))
    return frame.with_columns(pl.col("benchmark").replace_strict(mapping, return_dtype=pl.String))


def _check_results(frame: pl.DataFrame, key: tuple[str, ...], path: Path) -> pl.DataFrame:
    if frame.height == 0:
        return frame
    if "item_id" in key:
        _check_zero_items(frame, path)
    frame = _check_ids(frame, key, path)
    frame = _canonical_benchmarks(frame, path)
    frame = _variants(frame, path)
    score = pl.col("score")
    _refuse(path, frame, score.is_null(), "score is missing (null)", "score")
    _refuse(path, frame, score.is_nan(), "score is NaN", "score")
    _refuse(path, frame, (score < 0) | (score > 1), "score outside [0, 1]", "score")
    _check_duplicates(frame, key, path)
    return frame


def _check_zero_items(frame: pl.DataFrame, path: Path) -> None:
    """A model whose every row lacks an item id answered nothing: name the model, not a line."""
    has_item = pl.col("item_id").is_not_null() & (pl.col("item_id").str.strip_chars() != "")
    if LINE_COLUMN not in frame.columns:
        frame = frame.with_columns(pl.lit(None, pl.Int64).alias(LINE_COLUMN))
    counts = (frame.filter(pl.col("model").is_not_null())
              .group_by("model").agg(has_item.sum().alias("items"), pl.col(LINE_COLUMN).min())
              .filter(pl.col("items") == 0).sort("model"))
    if counts.height:
        row = counts.row(0, named=True)
        raise InputError(path, f"model {row['model']!r} has zero items (no row with an item_id)",
                         line=row[LINE_COLUMN], column="item_id")


def _check_duplicates(frame: pl.DataFrame, key: tuple[str, ...], path: Path) -> None:
    dupes = frame.filter(pl.len().over(key) > 1)
    if dupes.height == 0:
        return
    first = dupes.row(0, named=True)
    shown = ", ".join(f"{k}={first[k]!r}" for k in key)
    lines = ""
    if LINE_COLUMN in frame.columns:
        same = dupes.filter(pl.all_horizontal(pl.col(k) == first[k] for k in key))
        lines = f" (lines {', '.join(map(str, same.get_column(LINE_COLUMN).head(5).to_list()))})"
    n_keys = dupes.select(key).unique().height
    raise InputError(path, f"duplicate key ({shown}) appears more than once{lines}; "
                           f"{n_keys} duplicated key(s) in the file", line=first.get(LINE_COLUMN))


def _check_models(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    if frame.height == 0:
        return frame
    frame = _check_ids(frame, ("model",), path)
    _refuse(path, frame, pl.col("n_params") < 0, "n_params is negative", "n_params")
    _check_duplicates(frame, ("model",), path)
    return frame


def _check_scored_models_have_items(responses: pl.DataFrame, scores: pl.DataFrame, path: Path) -> None:
    """A reported score for a model with no responses in the same source has nothing to learn from."""
    orphans = scores.join(responses.select("model", "benchmark").unique(), on=["model", "benchmark"],
                          how="anti").sort("model", "benchmark")
    if orphans.height:
        row = orphans.row(0, named=True)
        raise InputError(path, f"model {row['model']!r} has a score for {row['benchmark']!r} but zero "
                               f"items; {orphans.height} such model/benchmark pair(s)",
                         line=row.get(LINE_COLUMN), column="model")
