"""An lm-eval samples part: one task's per-document records, read into (item_id, score) rows.

Samples come as JSONL (0.4.3+), as one indented JSON array (0.4.0-0.4.2) or embedded in a Python-API dump;
before 0.4.8 a record names neither its filter nor its metrics. Reading them is the reader's only pass over
large data, and every bad record must be refused with its line and column, so it is kept apart from the
decisions about what to read (:mod:`sparseeval.data.readers.lm_eval_plan`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from sparseeval.data.readers.base import InputError
from sparseeval.data.readers.files import LFS_REASON, is_lfs_pointer, read_json
from sparseeval.data.readers.lm_eval_plan import TaskPlan
from sparseeval.data.readers.lm_eval_results import SamplesPart
from sparseeval.data.readers.metric_choice import to_float_score

_SAMPLES_RE = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9\-.:]+)\.jsonl$")


def iter_records(part: SamplesPart) -> Iterator[tuple[int, Any]]:
    """(line or position, record) of a samples part: JSONL, a JSON array (0.4.0-0.4.2) or embedded."""
    if part.records is not None:
        yield from enumerate(part.records, start=1)
        return
    path = part.path
    if is_lfs_pointer(path):
        raise InputError(path, LFS_REASON)
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise InputError(path, f"cannot read file: {exc}") from exc
    with fh:
        try:
            first = fh.read(1)
            while first and first.isspace():
                first = fh.read(1)
            if first == "[":
                data = read_json(path)
                if not isinstance(data, list):
                    raise InputError(path, "samples file is not a JSON array of samples")
                yield from enumerate(data, start=1)
                return
            fh.seek(0)
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    yield n, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(path, f"invalid JSON ({exc.msg}) at column {exc.colno}", line=n) from exc
        except UnicodeDecodeError as exc:
            raise InputError(path, f"cannot read file: {exc}") from exc


def peek_samples(part: SamplesPart, limit: int = 50) -> tuple[list[str], list[str]]:
    """Metric names and filters from the first samples (for runs without results)."""
    metrics: list[str] = []
    filters: list[str] = []
    for n, obj in iter_records(part):
        if n > limit:
            break
        if not isinstance(obj, dict):
            break
        listed = obj.get("metrics")
        if not isinstance(listed, list):  # before 0.4.8: the metric values are the non-payload keys
            listed = [k for k, v in obj.items() if k not in _SAMPLE_PAYLOAD and to_float_score(v) is not None]
        metrics.extend(m for m in listed if isinstance(m, str) and m not in metrics)
        f = obj.get("filter")
        if isinstance(f, str) and f not in filters:
            filters.append(f)
    return metrics, filters


_SAMPLE_PAYLOAD = frozenset({"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter",
                             "metrics", "doc_hash", "prompt_hash", "target_hash"})


def read_samples(part: SamplesPart, plan: TaskPlan, filters: Sequence[str]) -> pl.DataFrame:
    """One task's samples -> (item_id, score) for the plan's metric and filter.

    Records without a ``filter`` key (before 0.4.8) are assigned one by occurrence: the k-th record of
    a document belongs to the k-th filter of ``filters``.
    """
    path = part.path
    where = part.label
    doc_ids: list[str] = []
    values: list[float] = []
    lines: list[int] = []
    seen: dict[str, int] = {}
    for n, obj in iter_records(part):
        if not isinstance(obj, dict):
            raise InputError(where, "sample is not a JSON object", line=n)
        doc_id = obj.get("doc_id")
        if doc_id is None or isinstance(doc_id, bool) or not isinstance(doc_id, int | str):
            raise InputError(where, "missing or invalid 'doc_id'", line=n, column="doc_id")
        key = str(doc_id)
        filt = obj.get("filter")
        if not isinstance(filt, str):
            k = seen.get(key, 0)
            seen[key] = k + 1
            filt = filters[k] if k < len(filters) else f"#{k}"
        if plan.filter is not None and filt != plan.filter:
            continue
        if plan.metric not in obj:
            raise InputError(where, f"metric {plan.metric!r} missing (sample has metrics "
                                    f"{obj.get('metrics')})", line=n, column=plan.metric)
        value = to_float_score(obj[plan.metric])
        if value is None or not 0.0 <= value <= 1.0 or math.isnan(value):
            raise InputError(where, f"metric {plan.metric!r} value {obj[plan.metric]!r} is not a "
                                    "score in [0, 1]", line=n, column=plan.metric)
        doc_ids.append(key)
        values.append(value)
        lines.append(n)
    del path
    frame = pl.DataFrame({"doc_id": doc_ids, "score": values, "line": lines},
                         schema={"doc_id": pl.String, "score": pl.Float64, "line": pl.Int64})
    dup = frame.filter(pl.col("doc_id").is_duplicated())
    if dup.height:
        raise InputError(where, f"doc_id {dup['doc_id'][0]!r} appears twice for filter {plan.filter!r}",
                         line=int(dup["line"][-1]))
    if frame.height == 0:
        raise InputError(where, f"no samples for metric {plan.metric!r} under filter {plan.filter!r}")
    item = pl.col("doc_id") if plan.prefix is None else pl.lit(plan.prefix + ".") + pl.col("doc_id")
    return frame.select(item.alias("item_id"), "score")


def sniff_samples(path: Path) -> bool:
    """A JSONL file of sample records with ``doc_id``, or a JSON array of them (0.4.0-0.4.2)."""
    try:
        with path.open(encoding="utf-8") as fh:
            head = fh.read(65536)
    except (OSError, UnicodeDecodeError):
        return False
    stripped = head.lstrip()
    if stripped.startswith("["):
        return bool(re.search(r'^\s*\[\s*\{\s*"doc_id"\s*:', stripped)) or (
            '"doc_id"' in stripped[:4096] and '"resps"' in stripped)
    first = stripped.split("\n", 1)[0]
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(obj, dict) and "doc_id" in obj
