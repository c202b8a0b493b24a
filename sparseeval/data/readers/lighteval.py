"""Readers for lighteval output (and the Open LLM Leaderboard v1, which lighteval wrote).

Layouts (read at lighteval's release tags; see ``docs/formats.md``):

* **results** ``results_<date_id>.json``: ``config_general`` (``lighteval_sha``, ``max_samples``,
  ``model_name``, ...) + ``results`` keyed by task: ``suite|task|nshot`` up to 0.10
  (``leaderboard|mmlu:anatomy|5``, ``harness|arc:challenge|25`` on the leaderboard v1) and ``task|nshot``
  from 0.11 (``gsm8k|0``); plus ``all`` and ``<suite|group>:_average|n`` summaries (never scores).
* **details v1** (<= 0.10, and every leaderboard v1 details repo): ``<date_id>/details_<task>_<date_id>.parquet``,
  one row per document with the columns of the old ``Detail`` (``example``, ``predictions``, ...) and
  ``metrics`` (a struct; 0.5 - 0.7 wrote every column as ``str(...)``, so a Python-literal string too).
  The rows have no id: the item id is the row index (the document's index in the evaluation split, the
  same ids lm-eval's ``doc_id`` uses), unless a ``doc_id`` column exists.
* **details** (>= 0.11): the same file names with the columns ``doc`` (struct with ``id`` = the
  document's index as a string, ``task_name``, ``query``...), ``metric`` (struct) and ``model_response``.

lighteval's own output folder is ``<output>/results/<org>/<model>/results_<date_id>.json`` and
``<output>/details/<org>/<model>/<date_id>/details_*.parquet``; the leaderboard's details repos hold both
under ``details_<org>__<model>/``. Settings: n_shot from the ``|nshot`` suffix, limit from ``max_samples``,
harness_version ``lighteval_sha``, run_at from the ``date_id``.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import polars as pl

from sparseeval.data.benchmarks import MMLU_SUBJECTS
from sparseeval.data.readers.assemble import build_parsed, refuse_empty, settings_frame
from sparseeval.data.readers.base import (
    MODELS_SCHEMA,
    SCORES_SCHEMA,
    SETTINGS_SCHEMA,
    InputError,
    ParsedResults,
    PartNote,
)
from sparseeval.data.readers.files import LFS_REASON, is_lfs_pointer, model_from_folder, parse_date_id, read_json
from sparseeval.data.readers.metric_choice import pick_metric, safe_task_benchmark, to_float_score

HARNESS = "lighteval"
DETAILS_RE = re.compile(r"^details_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9\-.:]+)\.parquet$")
RESULTS_RE = re.compile(r"^results_(?P<date>.+)\.json$")


# --------------------------------------------------------------------------------------------- results


def is_lighteval_results(data: object) -> bool:
    """lighteval / leaderboard v1 aggregate results carry ``config_general`` next to ``results``."""
    return isinstance(data, dict) and isinstance(data.get("results"), dict) and "config_general" in data


def split_task_key(key: str) -> tuple[str, int | None]:
    """``leaderboard|mmlu:anatomy|5`` -> ("leaderboard|mmlu:anatomy", 5); ``gsm8k_test|0`` -> ("gsm8k_test", 0)."""
    head, sep, tail = key.rpartition("|")
    if sep and tail.strip().isdigit():
        return head, int(tail)
    return key, None


def leaderboard_task(path: Path, key: str) -> tuple[str, str | None]:
    """``harness|hendrycksTest-anatomy|5`` -> ("mmlu", "anatomy"); ``harness|arc:challenge|25`` -> ("arc",
    None); ``mmlu:anatomy|5`` -> ("mmlu", "anatomy"); ``gsm8k_test|0`` -> ("gsm8k_test", None)."""
    return safe_task_benchmark(path, key, HARNESS)


def group_task(key: str, subject: str | None) -> str:
    """The ``task`` setting of a row: the key, with an MMLU subject replaced by ``*`` so one run of MMLU
    has one task value (``leaderboard|mmlu:*|5``, ``harness|hendrycksTest-*|5``)."""
    if subject is None:
        return key
    i = key.lower().rfind(subject.lower())
    return key[:i] + "*" + key[i + len(subject):] if i >= 0 else key


def _is_summary(key: str) -> bool:
    task, _ = split_task_key(key)
    return key == "all" or task.endswith("_average") or ":_average" in task


def _metric_names(entry: dict[str, Any]) -> list[str]:
    return [k for k, v in entry.items() if not k.endswith("_stderr") and to_float_score(v) is not None]


def results_format(data: dict[str, Any]) -> str:
    keys = [k for k in data.get("results", {}) if k != "all"]
    return "leaderboard-results" if keys and all(k.startswith("harness|") for k in keys) else "lighteval-results"


def general_settings(data: dict[str, Any] | None, date_id: str | None) -> dict[str, Any]:
    """harness, harness_version (lighteval_sha), limit (max_samples), run_at (the date_id) of a run."""
    general = (data or {}).get("config_general") or {}
    sha = general.get("lighteval_sha")
    limit = general.get("max_samples")
    return {"harness": HARNESS, "harness_version": sha if isinstance(sha, str) and sha else None,
            "limit": float(limit) if isinstance(limit, int | float) and not isinstance(limit, bool) else None,
            "run_at": parse_date_id(date_id) if date_id else None}


def scores_from_results(path: Path, data: dict[str, Any], model: str, date_id: str | None = None
                        ) -> tuple[list[dict[str, Any]], list[PartNote]]:
    """Per-benchmark scores of one results file as the leaderboard computed them: the benchmark's
    metric, MMLU the unweighted mean of all 57 subjects (no score when any is missing), no score from a
    ``max_samples`` run. Summary keys (``all``, ``*:_average``) are never scores."""
    settings = general_settings(data, date_id)
    per_bench: dict[str, list[tuple[str, str, float, int | None, str | None]]] = {}
    notes: list[PartNote] = []
    for key, entry in data["results"].items():
        if _is_summary(key) or not isinstance(entry, dict):
            continue
        bench, subject = leaderboard_task(path, key)
        metric = pick_metric(bench, _metric_names(entry))
        if metric is None:
            notes.append(PartNote(f"{path}: {key}", "skipped", "no score metric (generative metric "
                                                              f"{next(iter(_metric_names(entry)), '?')})"))
            continue
        value = to_float_score(entry[metric])
        if value is None or not 0.0 <= value <= 1.0:
            notes.append(PartNote(f"{path}: {key}", "refused",
                                  f"{key!r} {metric} = {entry[metric]!r} is not a score in [0, 1]"))
            continue
        per_bench.setdefault(bench, []).append((key, metric, value, split_task_key(key)[1], subject))
    rows = []
    for bench, entries in per_bench.items():
        if settings["limit"] is not None:
            notes.append(PartNote(f"{path}: {bench}", "skipped", f"run used max_samples={settings['limit']:g}: "
                                                                 "its aggregate is not a benchmark score"))
            continue
        key, metric, value, n_shot, _ = entries[0]
        if bench == "mmlu":
            by_subject = {s: v for _, _, v, _, s in entries if s}
            missing = [s for s in MMLU_SUBJECTS if s not in by_subject]
            if missing:
                notes.append(PartNote(f"{path}: mmlu", "skipped", f"mmlu score needs all 57 subjects' aggregates "
                                                                  f"({57 - len(missing)} present): not stored"))
                continue
            value = sum(by_subject[s] for s in MMLU_SUBJECTS) / len(MMLU_SUBJECTS)
            key = group_task(key, entries[0][4])
        elif entries[0][4] is not None:  # gpqa:diamond is one subtask: the benchmark is their group
            notes.append(PartNote(f"{path}: {bench}", "skipped", f"{bench} is the group of its subtasks; "
                                  f"{', '.join(e[0] for e in entries)} alone give no {bench} score: not stored"))
            continue
        elif len(entries) > 1:
            notes.append(PartNote(f"{path}: {bench}", "refused", "several tasks give benchmark "
                                  f"{bench} ({', '.join(e[0] for e in entries)}): score not stored"))
            continue
        rows.append({"model": model, "benchmark": bench, "score": value, "task": key, "n_shot": n_shot,
                     "metric": metric, "filter": None, **settings})
    return rows, notes


def model_name(data: dict[str, Any] | None) -> str | None:
    name = ((data or {}).get("config_general") or {}).get("model_name")
    return name.strip() if isinstance(name, str) and name.strip() else None


def _model_row(model: str, date_id: str | None) -> dict[str, Any]:
    # lighteval files carry no parameter count (``model_size`` is the weights' memory) nor base model
    return {"model": model, "submitted_at": parse_date_id(date_id) if date_id else None, "n_params": None,
            "base_model": None}


def results_files(folder: Path) -> tuple[list[tuple[str, Path, dict[str, Any]]], list[PartNote]]:
    """lighteval results JSONs (by content, any name) directly in ``folder``, oldest first (by the
    ``results_<date_id>`` name); unreadable ``results_*.json`` are notes."""
    out, notes = [], []
    for p in sorted(folder.glob("*.json")):
        m = RESULTS_RE.match(p.name)
        try:
            data = read_json(p)
        except InputError as exc:
            if m is not None:
                notes.append(PartNote(str(p), "refused", exc.problem))
            continue
        if is_lighteval_results(data):
            out.append((m["date"] if m else "", p, data))
    return sorted(out, key=lambda t: t[0]), notes


def read_lighteval_results(path: str | Path) -> ParsedResults:
    """Aggregate results (one lighteval ``results_*.json`` under any name, or a folder of them) -> scores
    and models. The latest file wins per (model, benchmark); the earliest dates the model."""
    path = Path(path)
    notes: list[PartNote] = []
    if path.is_dir():
        files, notes = results_files(path)
    elif path.is_file():
        m = RESULTS_RE.match(path.name)
        data = read_json(path)
        if not is_lighteval_results(data):
            raise InputError(path, "not a lighteval/leaderboard results file: needs 'config_general' and 'results'")
        files = [(m["date"] if m else "", path, data)]
    else:
        raise InputError(path, "no such file or folder")
    if not files:
        raise InputError(path, "no lighteval results_*.json found"
                         + (f" ({notes[0].part}: {notes[0].reason})" if notes else ""))
    scores, models = [], []
    for rank, (date_id, p, data) in enumerate(files):
        model = model_name(data) or model_from_folder(p.parent)
        rows, file_notes = scores_from_results(p, data, model, date_id or None)
        scores += [{**row, "_run": rank} for row in rows]
        notes += file_notes
        models.append({**_model_row(model, date_id or None), "_run": -rank})
    fmt = ", ".join(sorted({results_format(d) for _, _, d in files}))
    parsed = build_parsed(pl.DataFrame(), _frame(scores), pl.DataFrame(models, schema={
        **MODELS_SCHEMA, "_run": pl.Int64}), [p for _, p, _ in files], notes, fmt)
    return refuse_empty(path, parsed)


def _frame(score_rows: list[dict[str, Any]]) -> pl.DataFrame:
    if not score_rows:
        return pl.DataFrame()
    return pl.DataFrame(score_rows, schema={**SCORES_SCHEMA, **SETTINGS_SCHEMA, "_run": pl.Int64})


# --------------------------------------------------------------------------------------------- details


def _decode_struct(path: Path, column: pl.Series, name: str) -> pl.DataFrame:
    """A metrics struct column -> one column per metric. lighteval 0.5-0.7 wrote ``str(dict)``, so JSON
    and Python-literal strings are read too."""
    if isinstance(column.dtype, pl.Struct):
        return column.struct.unnest()
    if column.dtype == pl.String:
        def parse(text: str) -> dict[str, Any]:
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                return ast.literal_eval(text)
        try:
            rows = [parse(t) if t is not None else {} for t in column.to_list()]
        except (ValueError, SyntaxError) as exc:
            raise InputError(path, f"cannot parse {name}: {exc}", column=name) from exc
        return pl.DataFrame(rows)
    raise InputError(path, f"{name!r} has type {column.dtype}, expected a struct", column=name)


def details_layout(path: Path) -> str | None:
    """'lighteval-details-v1' (``metrics`` column) or 'lighteval-details' (``doc``/``metric``) of a parquet."""
    try:
        schema = pl.read_parquet_schema(path)
    except (pl.exceptions.PolarsError, OSError):
        return None
    if "metric" in schema and "doc" in schema:
        return "lighteval-details"
    if "metrics" in schema:
        return "lighteval-details-v1"
    return None


def read_details_file(path: Path, benchmark: str, prefix: str | None) -> pl.DataFrame:
    """One details parquet (either layout) -> (item_id, score, metric)."""
    if is_lfs_pointer(path):
        raise InputError(path, LFS_REASON)
    try:
        schema = pl.read_parquet_schema(path)
        if "metric" in schema and "doc" in schema:
            frame = pl.read_parquet(path, columns=["metric", "doc"])
            metrics = _decode_struct(path, frame.get_column("metric"), "metric")
            doc = frame.get_column("doc")
            ids = doc.struct.field("id").cast(pl.String) if isinstance(doc.dtype, pl.Struct) and "id" in [
                f.name for f in doc.dtype.fields] else None
            if ids is not None and (ids.is_null() | (ids == "")).any():
                ids = None
            column = "metric"
        else:
            names = [c for c in ("metrics", "doc_id") if c in schema]
            frame = pl.read_parquet(path, columns=names)
            if "metrics" not in frame.columns:
                raise InputError(path, "no 'metrics' (details v1) or 'metric' and 'doc' (details) column",
                                 column="metrics")
            metrics = _decode_struct(path, frame.get_column("metrics"), "metrics")
            ids = frame.get_column("doc_id").cast(pl.String) if "doc_id" in frame.columns else None
            column = "metrics"
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(path, f"cannot read parquet: {exc}") from exc
    metric = pick_metric(benchmark, [c for c in metrics.columns if not c.endswith("_stderr")])
    if metric is None:
        raise InputError(path, f"the {column} struct holds no score metric ({', '.join(metrics.columns)})",
                         column=column)
    values = metrics.get_column(metric)
    if values.dtype == pl.Boolean or values.dtype.is_numeric():
        values = values.cast(pl.Float64)
    else:
        raise InputError(path, f"metric {metric!r} has type {values.dtype}, expected a number", column=column)
    bad = (values.is_null() | values.is_nan() | (values < 0) | (values > 1)).fill_null(True)
    if bad.any():
        row = int(bad.arg_true()[0])
        raise InputError(path, f"row {row}: metric {metric!r} is {values[row]!r}, not a score in [0, 1]",
                         column=column)
    if ids is None:
        ids = pl.Series("doc_id", range(frame.height)).cast(pl.String)
    if ids.is_duplicated().any():
        raise InputError(path, f"doc_id {ids.filter(ids.is_duplicated())[0]!r} appears twice", column="doc_id")
    item = ids if prefix is None else (prefix + "." + ids)
    return pl.DataFrame({"item_id": item, "score": values, "metric": metric})


def _details_root(path: Path) -> Path:
    """The model folder of a details file: ``.../details_org__model/<date_id>/x.parquet`` -> the repo,
    ``.../details/org/model/<date_id>/x.parquet`` -> ``.../details/org/model``."""
    parent = path.parent
    return parent.parent if parse_date_id(parent.name) else parent


def model_from_details_root(root: Path) -> str:
    """``details_org__model`` -> org/model; lighteval's ``<output>/details/org/model`` -> org/model."""
    parts = root.parts
    if "details" in parts and not root.name.startswith("details_"):
        i = len(parts) - 1 - parts[::-1].index("details")
        tail = parts[i + 1:]
        if tail:
            return "/".join(tail)
    return model_from_folder(root)


def _results_for(root: Path) -> tuple[list[tuple[str, Path, dict[str, Any]]], list[PartNote], bool]:
    """Results beside a details root: in it (leaderboard repos; True: they are part of the unit) or in
    lighteval's ``<output>/results/<model>`` (False: their own unit, used here for model name and settings)."""
    files, notes = results_files(root)
    if files:
        return files, notes, True
    parts = root.parts
    if "details" in parts:
        i = len(parts) - 1 - parts[::-1].index("details")
        other = Path(*parts[:i], "results", *parts[i + 1:])
        if other.is_dir():
            return results_files(other)[0], [], False
    return files, notes, True


def read_lighteval_details(path: str | Path) -> ParsedResults:
    """A details folder (``details_<org>__<model>`` repo, lighteval ``details/<org>/<model>``) or one details
    parquet -> ParsedResults. Per task the latest run's file wins (older ones are skipped notes); a bad or
    LFS-pointer file refuses that task alone."""
    path = Path(path)
    if path.is_file():
        details, root = [path], _details_root(path)
    elif path.is_dir():
        details, root = sorted(p for p in path.rglob("details_*.parquet") if p.is_file()), path
    else:
        raise InputError(path, "no such file or folder")
    if not details:
        raise InputError(path, "no details_<task>_<date>.parquet files found")
    results, notes, own_results = _results_for(root)
    model = next((n for _, _, d in reversed(results) if (n := model_name(d))), None) or model_from_details_root(root)
    results_by_date = {d: data for d, _, data in results}

    latest: dict[str, tuple[str, Path]] = {}
    for p in details:
        m = DETAILS_RE.match(p.name)
        if m is None:
            notes.append(PartNote(str(p), "refused", "details file name is not details_<task>_<date>.parquet"))
            continue
        task = m["task"]
        if task in latest and latest[task][0] > m["date"]:
            notes.append(PartNote(str(p), "skipped", f"superseded by the newer run {latest[task][1]}"))
            continue
        if task in latest:
            notes.append(PartNote(str(latest[task][1]), "skipped", f"superseded by the newer run {p}"))
        latest[task] = (m["date"], p)
    parts, errors, layouts = [], [], set()
    for task, (date_id, p) in sorted(latest.items()):
        try:
            bench, prefix = leaderboard_task(p, task)
            frame = read_details_file(p, bench, prefix)
        except InputError as exc:
            notes.append(PartNote(str(p), "refused", exc.problem))
            errors.append(exc)
            continue
        layouts.add(details_layout(p) or "lighteval-details-v1")
        settings = general_settings(results_by_date.get(date_id) or (results[-1][2] if results else None), date_id)
        settings["run_at"] = parse_date_id(date_id)
        parts.append(settings_frame(
            frame.select(pl.lit(model).alias("model"), pl.lit(bench).alias("benchmark"), "item_id", "score"),
            task=group_task(task, prefix), n_shot=split_task_key(task)[1], metric=frame["metric"][0], filter=None,
            **settings))
    responses = pl.concat(parts) if parts else pl.DataFrame()
    if responses.height:
        dup = responses.filter(pl.struct("benchmark", "item_id").is_duplicated())
        if dup.height:
            raise InputError(path, f"item {dup['item_id'][0]!r} of {dup['benchmark'][0]!r} comes from two "
                                   "task files (two shot settings of one task?)")
    scores, models = [], []
    for rank, (date_id, p, data) in enumerate(results):
        if own_results and path.is_dir():  # a details file alone is that task alone: no scores
            rows, file_notes = scores_from_results(p, data, model, date_id)
            scores += [{**row, "_run": rank} for row in rows]
            notes += file_notes
        if own_results:
            models.append({**_model_row(model, date_id), "_run": -rank})
    if not models:
        first = min((d for d, _ in latest.values()), default=None)
        models.append({**_model_row(model, first), "_run": 0})
    keys = [k for k in latest] + [k for _, _, d in results for k in d.get("results", {}) if k != "all"]
    if "lighteval-details-v1" in layouts and keys and all(k.startswith("harness|") for k in keys):
        layouts = (layouts - {"lighteval-details-v1"}) | {"leaderboard-details-v1"}
    parsed = build_parsed(responses, _frame(scores),
                          pl.DataFrame(models, schema={**MODELS_SCHEMA, "_run": pl.Int64}),
                          [*(p for _, p, _ in results if own_results and path.is_dir()),
                           *(p for _, p in latest.values())], notes,
                          ", ".join(sorted(layouts)) or "lighteval-details")
    return refuse_empty(path, parsed, errors)
