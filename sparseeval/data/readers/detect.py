"""Recognise what a source is, by content, and dispatch it to its reader; discover the units of a tree.

A "unit" is what one reader call reads: a long-table file, a long-table folder (``responses.*`` with
optional ``scores.*`` / ``models.*``), an lm-eval model folder (its results JSONs and samples files), a
single results JSON (lm-eval, Python-API dump, lighteval, leaderboard v1), a samples file with no results,
a lighteval / leaderboard v1 details root (``<date_id>/details_*.parquet`` plus its results), or a folder
of lighteval results only. Recognition reads content (JSON keys, the first JSONL record, parquet
columns), never trusts prefixes: ``arc.json`` holding lm-eval results is lm-eval, ``results_x.csv`` with
long-table columns is a long table.

:func:`discover` guarantees every file under a folder is in a unit, or in a note (skipped: documentation,
hidden entries are passed over silently; refused: unreadable, non-UTF-8 names, unrecognised files, Git LFS
pointers), follows no symlink loop, and never aborts on one bad entry.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sparseeval.data.readers.base import InputError, ParsedResults, PartNote
from sparseeval.data.readers.files import LFS_REASON, is_lfs_pointer, parse_date_id
from sparseeval.data.readers.lighteval import (
    DETAILS_RE,
    details_layout,
    is_lighteval_results,
    read_lighteval_details,
    read_lighteval_results,
    results_format,
)
from sparseeval.data.readers.lm_eval import read_lm_eval
from sparseeval.data.readers.lm_eval_collect import _old_layout_task, is_v2_samples
from sparseeval.data.readers.lm_eval_results import _RESULTS_RE, is_lm_eval_results
from sparseeval.data.readers.lm_eval_samples import _SAMPLES_RE, sniff_samples

#: format families returned by :func:`detect_format` (``ParsedResults.format`` holds the exact layout)
FORMATS = ("lm-eval", "lighteval-details", "lighteval-results", "leaderboard-details-v1",
           "leaderboard-details-v2", "leaderboard-results", "long")
#: file suffixes read as long tables by ``sparseeval.data.readers.long`` (mirrors its ``FORMATS``)
LONG_SUFFIXES = (".parquet", ".pq", ".csv", ".tsv", ".jsonl", ".ndjson", ".csv.gz", ".tsv.gz", ".jsonl.gz",
                 ".ndjson.gz")
#: documentation and bookkeeping files that are never data
_SKIPPED_SUFFIXES = (".md", ".txt", ".rst", ".lock", ".tmp", ".yaml", ".yml", ".gitattributes", ".html",
                     ".png", ".jpg", ".svg", ".pdf", ".ipynb", ".py", ".sh", ".cfg", ".toml", ".ini")
_SKIPPED_STEMS = ("readme", "license", "licence", "changelog", "citation", "notice")
_LONG_STEMS = ("responses", "scores", "models")
_MAX_SNIFF_JSON = 512 * 1024 * 1024


def _kind(path: Path) -> str | None:
    """What one file is, by content: lm-eval-results | lm-eval-samples | lighteval-results |
    lighteval-details | long | None (unrecognised). Raises InputError for unreadable files."""
    name = path.name.lower()
    if is_lfs_pointer(path):
        raise InputError(path, LFS_REASON)
    if name.endswith(".json"):
        if sniff_samples(path):
            return "lm-eval-samples"
        if path.stat().st_size > _MAX_SNIFF_JSON:
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(path, f"not valid JSON: {exc}") from exc
        except OSError as exc:
            raise InputError(path, f"cannot read file: {exc}") from exc
        if is_lighteval_results(data):
            return "lighteval-results"
        if is_lm_eval_results(data):
            return "lm-eval-results"
        return None
    if name.endswith((".jsonl", ".ndjson")):
        return "lm-eval-samples" if sniff_samples(path) else "long"
    if name.endswith((".parquet", ".pq")):
        if DETAILS_RE.match(path.name) or details_layout(path) is not None:
            return "lighteval-details" if details_layout(path) is not None else "long"
        return "long"
    if name.endswith(LONG_SUFFIXES):
        return "long"
    return None


def _is_doc(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(_SKIPPED_SUFFIXES) or name.startswith(_SKIPPED_STEMS)


def _bad_name(path: Path) -> bool:
    try:
        path.name.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def _is_long_folder(folder: Path) -> bool:
    """``responses.<ext>`` (plus optional scores/models tables) is one long-table unit."""
    try:
        return any(p.is_file() and p.name.lower().endswith(LONG_SUFFIXES) and not _is_lfs(p)
                   and _kind(p) == "long" for p in folder.glob("responses.*"))
    except InputError:
        return False


def _is_lfs(path: Path) -> bool:
    return is_lfs_pointer(path)


def _is_long_member(path: Path) -> bool:
    return path.name.split(".")[0].lower() in _LONG_STEMS and path.name.lower().endswith(LONG_SUFFIXES)


def _details_runs(folder: Path) -> list[Path]:
    """The ``<date_id>`` sub-folders of a lighteval details root that hold details parquet files."""
    out = []
    try:
        for sub in folder.iterdir():
            if sub.is_dir() and not sub.is_symlink() and parse_date_id(sub.name) and any(
                    DETAILS_RE.match(p.name) for p in sub.iterdir()):
                out.append(sub)
    except OSError:
        return []
    return sorted(out)


def _folder_format(folder: Path) -> str | None:
    """The format family of a folder that is one unit as a whole, else None."""
    if _is_long_folder(folder):
        return "long"
    files = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")]
    if any(DETAILS_RE.match(p.name) for p in files) or _details_runs(folder):
        return "leaderboard-details-v1" if folder.name.startswith("details_") else "lighteval-details"
    kinds = set()
    for p in files:
        if _is_doc(p):
            continue
        try:
            kinds.add(_kind(p))
        except InputError:
            if _RESULTS_RE.match(p.name) or _SAMPLES_RE.match(p.name):
                kinds.add("lm-eval-lfs")
    if kinds & {"lm-eval-results", "lm-eval-samples"}:
        if any(is_v2_samples(p.name) for p in files):
            return "leaderboard-details-v2"
        return "lm-eval"
    if kinds == {"lighteval-results"}:
        formats = {results_format(json.loads(p.read_text(encoding="utf-8"))) for p in files
                   if not _is_doc(p) and p.name.lower().endswith(".json")}
        return "leaderboard-results" if formats == {"leaderboard-results"} else "lighteval-results"
    return None


def detect_format(path: str | Path) -> str:
    """The format family (one of :data:`FORMATS`) of a unit, by content; InputError if none."""
    path = Path(path)
    if path.is_dir():
        fmt = _folder_format(path)
        if fmt is None:
            raise InputError(path, "folder holds no lm-eval output, lighteval details or results, or long table "
                                   "(use discover/iter_sources to list the units under it)")
        return fmt
    if not path.is_file():
        raise InputError(path, "no such file or folder")
    kind = _kind(path)
    if kind == "lm-eval-results" or kind == "lm-eval-samples":
        return "leaderboard-details-v2" if is_v2_samples(path.name) else "lm-eval"
    if kind == "lighteval-results":
        return results_format(json.loads(path.read_text(encoding="utf-8")))
    if kind == "lighteval-details":
        return "lighteval-details"
    if kind == "long":
        return "long"
    if path.name.lower().endswith(".json"):
        raise InputError(path, "JSON file is neither lm-eval nor lighteval results nor lm-eval samples")
    raise InputError(path, f"unrecognised file type {path.suffix!r} (expected parquet, CSV/TSV, JSONL, "
                           "lm-eval or lighteval output)")


def read_source(path: str | Path) -> ParsedResults:
    """Read one unit with the reader its content needs; ``format`` says which layout (and version)."""
    path = Path(path)
    fmt = detect_format(path)
    if fmt == "long":
        from sparseeval.data.readers.long import read_long  # lazy: keeps imports light

        parsed = read_long(path)
        parsed.format = "long"
        return parsed
    if fmt in ("lm-eval", "leaderboard-details-v2"):
        parsed = read_lm_eval(path)
        if fmt == "leaderboard-details-v2":
            parsed.format = "leaderboard-details-v2"
        return parsed
    if fmt in ("lighteval-results", "leaderboard-results"):
        return read_lighteval_results(path)
    return read_lighteval_details(path)


def discover(path: str | Path) -> tuple[list[Path], list[PartNote]]:
    """The units under ``path`` and a note for every file that is in none.

    A folder that is one unit (long table, lm-eval model folder, details root, lighteval results only)
    is listed once; files of other kinds beside it are their own units; sub-folders are searched (a details
    root's ``<date_id>`` folders belong to it). Documentation -> skipped note; unrecognised, unreadable,
    non-UTF-8-named or Git-LFS-pointer files -> refused notes; hidden entries are passed over; symlinked
    folders are followed once (a loop is noted, never walked). An empty folder raises InputError.
    """
    path = Path(path)
    if path.is_file():
        return [path], []
    if not path.is_dir():
        raise InputError(path, "no such file or folder")
    units: list[Path] = []
    notes: list[PartNote] = []
    visited: set[str] = set()
    pending = [path]
    any_entry = False
    while pending:
        folder = pending.pop()
        try:
            real = os.path.realpath(folder)
        except OSError as exc:
            notes.append(PartNote(str(folder), "refused", f"cannot resolve folder: {exc}"))
            continue
        if real in visited:
            notes.append(PartNote(str(folder), "skipped", "symlink loop: folder already visited"))
            continue
        visited.add(real)
        try:
            entries = sorted(folder.iterdir())
        except OSError as exc:
            notes.append(PartNote(str(folder), "refused", f"cannot list folder: {exc}"))
            continue
        entries = [e for e in entries if not e.name.startswith(".")]
        any_entry = any_entry or bool(entries)
        claimed: set[Path] = set()
        subdirs = [e for e in entries if _safe_is_dir(e)]
        files = [e for e in entries if e not in subdirs]
        try:
            fmt = _folder_format(folder)
        except OSError:
            fmt = None
        if fmt == "long":
            units.append(folder)
            claimed |= {f for f in files if _is_long_member(f)}
        elif fmt in ("leaderboard-details-v1", "lighteval-details"):
            units.append(folder)
            runs = _details_runs(folder)
            claimed |= {f for f in files if DETAILS_RE.match(f.name)}
            claimed |= {f for f in files if f.name.endswith(".json") and _kind_quiet(f) == "lighteval-results"}
            subdirs = [d for d in subdirs if d not in runs]
            for run in runs:  # files in a run folder that are not details are noted
                for f in sorted(run.iterdir()):
                    if f.name.startswith(".") or (f.is_file() and DETAILS_RE.match(f.name)):
                        continue
                    notes.append(_other_note(f))
        elif fmt in ("lm-eval", "leaderboard-details-v2", "lighteval-results", "leaderboard-results"):
            units.append(folder)
            results_only = fmt in ("lighteval-results", "leaderboard-results")
            member = ("lighteval-results",) if results_only else ("lm-eval-results",
                                                                                  "lm-eval-samples")
            claimed |= {f for f in files if _kind_quiet(f) in member or (
                not results_only and (_SAMPLES_RE.match(f.name) or _RESULTS_RE.match(f.name))
                and _is_lfs(f))}
        for f in files:
            if f in claimed:
                continue
            if fmt == "long" and _kind_quiet(f) == "lm-eval-samples" and _claimed_by_results(f, files):
                continue  # read with its results file (a unit of its own below)
            notes_or_unit = _classify_file(f)
            if isinstance(notes_or_unit, PartNote):
                notes.append(notes_or_unit)
            else:
                units.append(f)
        pending.extend(reversed(subdirs))
    if not any_entry:
        raise InputError(path, "empty folder: nothing to read")
    return sorted(set(units)), notes


def _claimed_by_results(samples: Path, files: list[Path]) -> bool:
    m = _SAMPLES_RE.match(samples.name)
    for f in files:
        r = _RESULTS_RE.match(f.name)
        if m and r and r["date"] == m["date"]:
            return True
        if f.suffix == ".json" and _kind_quiet(f) == "lm-eval-results":
            try:
                data = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue
            if _old_layout_task(samples.stem, data):
                return True
    return False


def _safe_is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _kind_quiet(path: Path) -> str | None:
    try:
        return _kind(path)
    except (InputError, OSError):
        return None


def _other_note(path: Path) -> PartNote:
    result = _classify_file(path)
    if isinstance(result, PartNote):
        return result
    return PartNote(str(path), "skipped", "inside a details run folder but not a details file: not read")


def _classify_file(path: Path) -> Path | PartNote:
    """A stand-alone file: a unit, or a note saying why it is not one."""
    if _bad_name(path):
        return PartNote(repr(str(path)), "refused",
                        "file name is not valid UTF-8: rename it")
    if _safe_is_dir(path):
        return PartNote(str(path), "skipped", "folder")
    if not path.is_file():
        return PartNote(str(path), "refused", "not a regular file (broken link, socket or device)")
    if _is_doc(path):
        return PartNote(str(path), "skipped", "documentation / not a results file")
    try:
        kind = _kind(path)
    except InputError as exc:
        return PartNote(str(path), "refused", exc.problem)
    except OSError as exc:
        return PartNote(str(path), "refused", f"cannot read file: {exc}")
    if kind is None:
        what = "JSON that is neither lm-eval nor lighteval results nor samples" if path.suffix.lower() == ".json" \
            else f"unrecognised file type {path.suffix!r}"
        return PartNote(str(path), "refused", what)
    return path


def iter_sources(folder: str | Path) -> list[Path]:
    """The ingestible units under ``folder`` (see :func:`discover`, which also returns the notes)."""
    return discover(folder)[0]
