"""Readers for Open LLM Leaderboard files: v1 details repos, aggregate results, v2 details.

v1 details (``details_<org>__<model>`` dataset repos, written by lighteval's ``EvaluationTracker``):
``results_<date_id>.json`` at the root (``config_general`` with ``model_name``, ``results`` keyed
``harness|arc:challenge|25`` -> {acc, acc_stderr, acc_norm, ...}) and one folder per run
``<date_id>/details_<task>_<date_id>.parquet`` with one row per document and the columns of lighteval's
``Detail`` (``example``, ``full_prompt``, ``predictions``, ``choices``, ``gold``, ``gold_index``,
``metrics`` a struct such as {acc, acc_norm}, ...). The parquet has no document id (lighteval drops
``id``), so the item id is the row index, which is the document's index in the evaluation split: the
same ids the harness's ``doc_id`` uses, so v1 and lm-eval data of a benchmark meet on one item pool.
An explicit ``doc_id`` column, where present, wins.

Aggregate results alone (``results_<date>.json`` with ``config_general``; the leaderboard's results
dataset holds one per model and run) give scores and model metadata without responses.

v2 details are lm-evaluation-harness output (``samples_leaderboard_<task>_<date>.jsonl`` under
``<org>__<model>/``): :func:`read_details_v2` delegates to the lm-eval reader.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import polars as pl

from sparseeval.readers.base import MODELS_SCHEMA, InputError, ParsedResults
from sparseeval.readers.lm_eval import (
    build_parsed,
    mmlu_subject,
    model_from_folder,
    parse_date_id,
    pick_metric,
    read_json,
    read_lm_eval,
    safe_benchmark,
    to_float_score,
)

_DETAILS_RE = re.compile(r"^details_(?P<task>.+)_(?P<date>[^_]+)\.parquet$")
_RESULTS_RE = re.compile(r"^results_(?P<date>[^_]+)\.json$")


def leaderboard_task(path: Path, key: str) -> tuple[str, str | None]:
    """``harness|hendrycksTest-anatomy|5`` -> ("mmlu", "anatomy"); ``harness|arc:challenge|25`` -> ("arc",
    None); lighteval's ``leaderboard|mmlu:anatomy|5`` -> ("mmlu", "anatomy"); other tasks pass through."""
    parts = key.split("|")
    name = parts[1] if len(parts) >= 2 else key
    subject = mmlu_subject(name)
    if subject is not None:
        return "mmlu", subject
    if ":" in name:
        head, tail = name.split(":", 1)
        if head.lower() == "mmlu":
            return "mmlu", tail
    return safe_benchmark(path, name), None


def is_leaderboard_results(data: object) -> bool:
    """Leaderboard v1 / lighteval aggregate results carry ``config_general`` next to ``results``."""
    return isinstance(data, dict) and isinstance(data.get("results"), dict) and "config_general" in data


def _metric_names(entry: dict[str, Any]) -> list[str]:
    return [k for k, v in entry.items() if not k.endswith("_stderr") and to_float_score(v) is not None]


def scores_from_results(path: Path, data: dict[str, Any], model: str) -> list[dict[str, Any]]:
    """Per-benchmark scores from one v1 results file, as the leaderboard computed them: the task's
    preferred metric, and for MMLU the unweighted mean of the subject accuracies."""
    per_bench: dict[str, list[float]] = {}
    for key, entry in data["results"].items():
        if key == "all" or not isinstance(entry, dict):
            continue
        bench, _ = leaderboard_task(path, key)
        metric = pick_metric(bench, _metric_names(entry))
        if metric is None:
            continue
        value = to_float_score(entry[metric])
        if value is None or not 0.0 <= value <= 1.0:
            raise InputError(path, f"{key!r} {metric} = {entry[metric]!r} is not a score in [0, 1]",
                             column=key)
        per_bench.setdefault(bench, []).append(value)
    return [{"model": model, "benchmark": b, "score": sum(v) / len(v)} for b, v in per_bench.items()]


def _results_files(folder: Path) -> list[tuple[str, Path, dict[str, Any]]]:
    out = []
    for p in sorted(folder.glob("results_*.json")):
        m = _RESULTS_RE.match(p.name)
        if m is None:
            continue
        data = read_json(p)
        if not is_leaderboard_results(data):
            raise InputError(p, "not a leaderboard results file: needs 'config_general' and 'results'")
        out.append((m["date"], p, data))
    return sorted(out, key=lambda t: t[0])


def _model_row(model: str, date_id: str) -> dict[str, Any]:
    # v1 files carry no parameter count (``model_size`` is the weights' memory) nor base model
    return {"model": model, "submitted_at": parse_date_id(date_id), "n_params": None, "base_model": None}


def read_leaderboard_results(path: str | Path) -> ParsedResults:
    """Aggregate leaderboard results (one ``results_*.json`` or a folder of them) -> scores and models.
    The latest file wins per (model, benchmark); the earliest dates the model."""
    path = Path(path)
    if path.is_dir():
        files = _results_files(path)
    elif path.is_file():
        m = _RESULTS_RE.match(path.name)
        data = read_json(path)
        if not is_leaderboard_results(data):
            raise InputError(path, "not a leaderboard results file: needs 'config_general' and 'results'")
        files = [(m["date"] if m else "", path, data)]
    else:
        raise InputError(path, "no such file or folder")
    if not files:
        raise InputError(path, "no results_*.json found")
    scores, models = [], []
    for rank, (date_id, p, data) in enumerate(files):
        model = _model_name(data) or model_from_folder(p.parent)
        scores += [{**row, "_run": rank} for row in scores_from_results(p, data, model)]
        models.append({**_model_row(model, date_id), "_run": -rank})
    return build_parsed(pl.DataFrame(), pl.DataFrame(scores), pl.DataFrame(models, schema={
        **MODELS_SCHEMA, "_run": pl.Int64}), [p for _, p, _ in files])


def _model_name(data: dict[str, Any]) -> str | None:
    name = (data.get("config_general") or {}).get("model_name")
    return name.strip() if isinstance(name, str) and name.strip() else None


def _decode_metrics(path: Path, column: pl.Series) -> pl.DataFrame:
    """The ``metrics`` column -> one column per metric. lighteval writes a struct; when it had to
    stringify nested values it wrote ``str(dict)``, so JSON and Python-literal strings are read too."""
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
            raise InputError(path, f"cannot parse metrics: {exc}", column="metrics") from exc
        return pl.DataFrame(rows)
    raise InputError(path, f"'metrics' has type {column.dtype}, expected a struct", column="metrics")


def read_details_file(path: Path, benchmark: str, prefix: str | None) -> pl.DataFrame:
    """One v1 details parquet -> (item_id, score, metric)."""
    try:
        schema = pl.read_parquet_schema(path)
        names = [c for c in ("metrics", "doc_id") if c in schema]
        frame = pl.read_parquet(path, columns=names)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(path, f"cannot read parquet: {exc}") from exc
    if "metrics" not in frame.columns:
        raise InputError(path, "no 'metrics' column", column="metrics")
    metrics = _decode_metrics(path, frame.get_column("metrics"))
    metric = pick_metric(benchmark, [c for c in metrics.columns if not c.endswith("_stderr")])
    if metric is None:
        raise InputError(path, "the metrics struct holds no metric", column="metrics")
    values = metrics.get_column(metric)
    if values.dtype == pl.Boolean or values.dtype.is_numeric():
        values = values.cast(pl.Float64)
    else:
        raise InputError(path, f"metric {metric!r} has type {values.dtype}, expected a number",
                         column="metrics")
    bad = (values.is_null() | values.is_nan() | (values < 0) | (values > 1)).fill_null(True)
    if bad.any():
        row = int(bad.arg_true()[0])
        raise InputError(path, f"row {row}: metric {metric!r} is {values[row]!r}, not a score in [0, 1]",
                         column="metrics")
    ids = (frame.get_column("doc_id").cast(pl.String) if "doc_id" in frame.columns
           else pl.Series("doc_id", range(frame.height)).cast(pl.String))
    if ids.is_duplicated().any():
        raise InputError(path, f"doc_id {ids.filter(ids.is_duplicated())[0]!r} appears twice",
                         column="doc_id")
    item = ids if prefix is None else (prefix + "." + ids)
    return pl.DataFrame({"item_id": item, "score": values, "metric": metric})


def read_details_v1(path: str | Path) -> ParsedResults:
    """A v1 details folder (``details_<org>__<model>``) or one details parquet -> ParsedResults.

    A folder may hold several runs; per task the latest run's file wins.
    """
    path = Path(path)
    if path.is_file():
        details, root = [path], (path.parent.parent if parse_date_id(path.parent.name) else path.parent)
    elif path.is_dir():
        details, root = sorted(path.rglob("details_*.parquet")), path
    else:
        raise InputError(path, "no such file or folder")
    if not details:
        raise InputError(path, "no details_<task>_<date>.parquet files found")
    results = _results_files(root)
    model = next((n for _, _, d in reversed(results) if (n := _model_name(d))), None) \
        or model_from_folder(root)

    latest: dict[str, tuple[str, Path]] = {}
    for p in details:
        m = _DETAILS_RE.match(p.name)
        if m is None:
            raise InputError(p, "details file name is not details_<task>_<date>.parquet")
        if m["task"] not in latest or latest[m["task"]][0] < m["date"]:
            latest[m["task"]] = (m["date"], p)
    parts = []
    for task, (_, p) in sorted(latest.items()):
        bench, prefix = leaderboard_task(p, task)
        parts.append(read_details_file(p, bench, prefix).select(
            pl.lit(model).alias("model"), pl.lit(bench).alias("benchmark"), "item_id", "score"))
    responses = pl.concat(parts)
    dup = responses.filter(pl.struct("benchmark", "item_id").is_duplicated())
    if dup.height:
        raise InputError(path, f"item {dup['item_id'][0]!r} of {dup['benchmark'][0]!r} comes from two "
                               "task files (two shot settings of one task?)")
    scores, models = [], []
    for rank, (date_id, p, data) in enumerate(results):
        scores += [{**row, "_run": rank} for row in scores_from_results(p, data, model)]
        models.append({**_model_row(model, date_id), "_run": -rank})
    if not models:
        first = min(d for d, _ in latest.values())
        models.append({**_model_row(model, first), "_run": 0})
    return build_parsed(responses, pl.DataFrame(scores),
                        pl.DataFrame(models, schema={**MODELS_SCHEMA, "_run": pl.Int64}),
                        [*(p for _, p, _ in results), *(p for _, p in latest.values())])


def read_details_v2(path: str | Path) -> ParsedResults:
    """Leaderboard v2 details: lm-eval output with ``leaderboard_*`` tasks (subtasks fold into their
    group, e.g. ``leaderboard_bbh`` with item ids ``<subtask>.<doc_id>``)."""
    return read_lm_eval(path)
