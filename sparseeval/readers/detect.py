"""Recognise what a source file or folder is and dispatch it to its reader.

The store ingests "units": a long table file, an lm-eval model output folder, a leaderboard v1
details repo, or a folder of leaderboard aggregate results. A unit is read as a whole because its
files only make sense together (samples need their results file for metric and model name).
Recognition looks at names first and reads at most a results JSON, so listing a large tree is cheap.
"""

from __future__ import annotations

import json
from pathlib import Path

from sparseeval.readers.base import InputError, ParsedResults
from sparseeval.readers.leaderboard import (
    is_leaderboard_results,
    read_details_v1,
    read_details_v2,
    read_leaderboard_results,
)
from sparseeval.readers.lm_eval import is_lm_eval_results, read_json, read_lm_eval

FORMATS = ("lm-eval", "leaderboard-details-v1", "leaderboard-details-v2", "leaderboard-results", "long")
#: file suffixes read as long tables by ``sparseeval.readers.long`` (mirrors its ``FORMATS``)
LONG_SUFFIXES = (".parquet", ".pq", ".csv", ".tsv", ".jsonl", ".ndjson")
#: documentation and bookkeeping files that are never data
_SKIPPED_SUFFIXES = (".md", ".txt", ".rst", ".lock", ".tmp", ".yaml", ".yml", ".gitattributes")
_SKIPPED_STEMS = ("readme", "license", "licence")


def _is_long_file(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(LONG_SUFFIXES) and not name.startswith(("details_", "results_", "samples_"))


def _is_long_folder(folder: Path) -> bool:
    """``responses.<ext>`` (plus optional scores/models tables) is one long-table unit."""
    return any(_is_long_file(p) for p in folder.glob("responses.*"))


def _results_kind(path: Path) -> str | None:
    """'lm-eval' or 'leaderboard-results' for a ``results_*.json``; None if it is neither."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if is_leaderboard_results(data):
        return "leaderboard-results"
    if is_lm_eval_results(data):
        return "lm-eval"
    return None


def _has_details(folder: Path) -> bool:
    """v1 details parquet directly in ``folder`` or in its run sub-folders (one level)."""
    if any(folder.glob("details_*.parquet")):
        return True
    return any(sub.is_dir() and any(sub.glob("details_*.parquet")) for sub in folder.iterdir())


def _folder_format(folder: Path) -> str | None:
    if _is_long_folder(folder):
        return "long"
    samples = list(folder.glob("samples_*.jsonl"))
    if samples:
        v2 = any(p.name.startswith("samples_leaderboard_") for p in samples)
        return "leaderboard-details-v2" if v2 else "lm-eval"
    if _has_details(folder):
        return "leaderboard-details-v1"
    kinds = {_results_kind(p) for p in folder.glob("results_*.json")} - {None}
    if "lm-eval" in kinds:
        return "lm-eval"
    if kinds == {"leaderboard-results"}:
        return "leaderboard-results"
    return None


def detect_format(path: str | Path) -> str:
    """One of :data:`FORMATS` for a unit (a file or folder); InputError if it is none of them."""
    path = Path(path)
    if path.is_dir():
        fmt = _folder_format(path)
        if fmt is None:
            raise InputError(path, "folder holds no lm-eval output, leaderboard details or results "
                                   "(use iter_sources to list the units under it)")
        return fmt
    if not path.is_file():
        raise InputError(path, "no such file or folder")
    name = path.name
    if name.startswith("details_") and name.endswith(".parquet"):
        return "leaderboard-details-v1"
    if name.startswith("samples_") and name.endswith(".jsonl"):
        return "leaderboard-details-v2" if name.startswith("samples_leaderboard_") else "lm-eval"
    if name.endswith(".json"):
        data = read_json(path)
        if is_leaderboard_results(data):
            return "leaderboard-results"
        if is_lm_eval_results(data):
            return "lm-eval"
        raise InputError(path, "JSON file is neither lm-eval nor leaderboard results")
    if _is_long_file(path):
        return "long"
    raise InputError(path, f"unrecognised file type {path.suffix!r} (expected parquet, CSV/TSV, "
                           "lm-eval or leaderboard output)")


def read_source(path: str | Path) -> ParsedResults:
    """Read one unit with the reader its format needs; the result carries ``format`` (the store
    records it per ingest)."""
    path = Path(path)
    fmt = detect_format(path)
    if fmt == "long":
        from sparseeval.readers.long import read_long  # lazy: written alongside, keeps imports light

        parsed = read_long(path)
    else:
        readers = {
            "lm-eval": read_lm_eval,
            "leaderboard-details-v1": read_details_v1,
            "leaderboard-details-v2": read_details_v2,
            "leaderboard-results": read_leaderboard_results,
        }
        parsed = readers[fmt](path)
    parsed.format = fmt  # type: ignore[attr-defined]
    return parsed


def iter_sources(folder: str | Path) -> list[Path]:
    """The ingestible units under ``folder`` (itself included), sorted, hidden entries skipped.

    A folder that is a unit (lm-eval output, details repo, results folder, ``responses.*`` long
    folder) is listed once and not entered; otherwise each of its files is a unit (so an unknown
    file is refused by name at ingest rather than silently skipped), except documentation, and its
    sub-folders are searched.
    """
    folder = Path(folder)
    if folder.is_file():
        return [folder]
    if not folder.is_dir():
        raise InputError(folder, "no such folder")
    units: list[Path] = []
    pending = [folder]
    while pending:
        current = pending.pop()
        if _folder_format(current) is not None:
            units.append(current)
            continue
        for entry in sorted(current.iterdir()):
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                pending.append(entry)
            elif entry.is_file() and not (entry.name.lower().endswith(_SKIPPED_SUFFIXES)
                                          or entry.name.lower().startswith(_SKIPPED_STEMS)):
                units.append(entry)
    return sorted(units)
