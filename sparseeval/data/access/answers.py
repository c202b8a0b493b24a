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
is an :class:`~sparseeval.data.readers.base.InputError` naming the file and the problem.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from sparseeval.data.readers.base import RESPONSES_SCHEMA, SETTINGS_SCHEMA, InputError, ParsedResults
from sparseeval.data.readers.lm_eval import read_lm_eval
from sparseeval.data.readers.long import LINE_COLUMN, classify, read_table, typed_frame
from sparseeval.data.readers.validation import validate_results

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
    return _validate(frame, path)


# -- lm-eval output -----------------------------------------------------------------------------


def read_lm_eval_folder(folder: Path) -> pl.DataFrame:
    """Every ``samples_*.jsonl`` under ``folder`` (lm-eval nests them in a per-model folder)."""
    files = sorted(p for p in folder.rglob("samples_*.jsonl") if _SAMPLES_RE.match(p.name))
    if not files:
        raise InputError(folder, "no lm-eval samples_<task>_<date>.jsonl files found "
                                 "(run lm_eval with --log_samples --output_path)")
    frames = [_read_model_folder(parent, group) for parent, group in _by_parent(files).items()]
    return pl.concat(frames, how="diagonal_relaxed")


def _read_model_folder(target: Path, files: list[Path]) -> pl.DataFrame:
    """One model's folder (or one samples file), through the project's lm-eval reader: it knows
    each leaderboard benchmark's metric and filter, and the MMLU subject ids. The settings columns
    come along: validation turns them into the benchmark variant the answers were run as."""
    parsed = read_lm_eval(target)
    refused = parsed.refused_parts
    if refused:
        raise InputError(refused[0].part, refused[0].reason)
    return parsed.responses


def _by_parent(files: list[Path]) -> dict[Path, list[Path]]:
    groups: dict[Path, list[Path]] = {}
    for f in files:
        groups.setdefault(f.parent, []).append(f)
    return groups


# -- tables -------------------------------------------------------------------------------------


def _read_table(path: Path, *, benchmark: str | None, model: str | None) -> pl.DataFrame:
    """A long table through the store's own reader (exact path, typed, true line numbers); a file
    without ``model`` / ``benchmark`` columns takes them from the caller (model: the file's stem)."""
    raw = read_table(path)
    if "score" not in raw.columns and "correct" in raw.columns:
        raw = raw.rename({"correct": "score"})
    for col in ("item_id", "score"):
        if col not in raw.columns:
            raise InputError(path, f"missing column {col!r} (need item_id and score or correct; "
                                   f"found {', '.join(c for c in raw.columns if c != LINE_COLUMN) or 'none'})")
    if "model" not in raw.columns:
        raw = raw.with_columns(pl.lit(model or path.name.split(".")[0]).alias("model"))
    if "benchmark" not in raw.columns:
        if benchmark is None:
            raise InputError(path, "no benchmark column: name the benchmark (--benchmark) "
                                   "or use one predictor")
        raw = raw.with_columns(pl.lit(benchmark).alias("benchmark"))
    kind = classify([c for c in raw.columns if c != LINE_COLUMN], path)
    return typed_frame(raw, kind, path)


def _validate(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    """The store's validation (ids, ranges, duplicates, benchmark variants), so predict accepts
    exactly what ingest would."""
    if frame.height == 0:
        raise InputError(path, "no answers found")
    settings = [c for c in SETTINGS_SCHEMA if c in frame.columns]
    checked = validate_results(ParsedResults(responses=frame), path).responses
    return checked.select(*RESPONSES_SCHEMA, *settings)
