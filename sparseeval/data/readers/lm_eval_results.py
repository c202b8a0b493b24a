"""An lm-eval results document, of every version, and the run it describes.

The harness's aggregate results file changed shape with every release (see :mod:`sparseeval.data.readers.lm_eval`
for the layouts): metric keys with or without ``,filter``, the model named by ``model_name`` or only inside
``model_args``, run dates in the file name or in ``date``, counts in ``n-samples`` or nowhere. This module reads
all of them into one :class:`Run` (the results document plus its samples per task), so the rest of the reader
asks a run for a task's few-shot count or ``--limit`` without knowing which version wrote it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sparseeval.data.readers.files import parse_date_id, unix_to_datetime
from sparseeval.data.readers.metric_choice import to_float_score

HARNESS = "lm-eval"

_RESULTS_RE = re.compile(r"^results_(?P<date>.+)\.json$")


def is_lm_eval_results(data: object) -> bool:
    """lm-eval aggregate results of any version: ``results`` keyed by task, plus the harness' own keys
    (lighteval and leaderboard v1 files carry ``config_general`` instead)."""
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict) or "config_general" in data:
        return False
    if not all(isinstance(v, dict) for v in data["results"].values()):
        return False
    keys = {"configs", "n-samples", "group_subtasks", "versions", "n-shot", "config", "model_name", "samples"}
    if keys & data.keys():
        return True
    return any("," in k for entry in data["results"].values() for k in entry)


def results_layout(data: Mapping[str, Any], path: Path | None) -> str:
    """The format string of one lm-eval results document."""
    if isinstance(data.get("samples"), dict):
        return "lm-eval-python-api"
    if not any("," in k for e in data.get("results", {}).values() if isinstance(e, dict) for k in e):
        return "lm-eval-0.3"
    if "n-samples" in data or (path is not None and _RESULTS_RE.match(path.name)):
        return "lm-eval-0.4.3+"
    return "lm-eval-0.4.0"


def model_name_from_results(data: Mapping[str, Any]) -> str | None:
    """``model_name`` (written by EvaluationTracker), else ``pretrained=``/``peft=`` etc. in model_args.
    A training checkpoint named by ``revision=`` (not ``main`` nor a commit hash) is part of the model:
    ``EleutherAI/pythia-160m@step1000``."""
    name = data.get("model_name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    config = data.get("config") or {}
    args = _model_args(config.get("model_args"))
    for key in ("peft", "delta", "pretrained", "model", "path", "engine"):
        if args.get(key):
            model = str(args[key]).strip()
            rev = str(args.get("revision") or "").strip()
            if key == "pretrained" and rev and rev not in ("main", "master") \
                    and not re.fullmatch(r"[0-9a-f]{7,40}", rev):
                model += f"@{rev}"
            return model
    model = config.get("model")
    return model if isinstance(model, str) and "/" in model else None


def _model_args(args: object) -> dict[str, str]:
    if isinstance(args, dict):
        return {str(k): str(v) for k, v in args.items() if v is not None}
    if isinstance(args, str):
        return {k.strip(): v.strip() for k, v in (kv.split("=", 1) for kv in args.split(",") if "=" in kv)}
    return {}


def base_model_from_results(data: Mapping[str, Any]) -> str | None:
    """An adapter run (``peft=``/``delta=`` with ``pretrained=``) names its base model."""
    parsed = _model_args((data.get("config") or {}).get("model_args"))
    if ("peft" in parsed or "delta" in parsed) and parsed.get("pretrained"):
        return parsed["pretrained"]
    return None


def sanitized_model_args(data: Mapping[str, Any]) -> str | None:
    """The prefix lm-eval 0.4.0-0.4.2 gave samples files: model_args with ``/`` and ``=`` -> ``__``."""
    args = (data.get("config") or {}).get("model_args")
    return re.sub(r"/|=", "__", args) if isinstance(args, str) else None


def _metric_keys(entry: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """``{"acc,none": .., "acc_stderr,none": ..}`` -> [("acc", "none")]; 0.3 ``{"acc": ..}`` -> [("acc", None)]."""
    out: list[tuple[str, str | None]] = []
    for key, value in entry.items():
        if key in ("alias", "name", "sample_len", "samples", "sample_count") or to_float_score(value) is None \
                or isinstance(value, list):
            continue
        metric, filt = key.split(",", 1) if "," in key else (key, None)
        if not metric.endswith("_stderr"):
            out.append((metric, filt))
    return out


def _aggregate(entry: Mapping[str, Any], metric: str, filt: str | None) -> float | None:
    value = entry.get(metric if filt is None else f"{metric},{filt}")
    return to_float_score(value) if not isinstance(value, list) else None


@dataclass
class SamplesPart:
    """The samples of one task of one run: a file, or a list embedded in a Python-API dump."""

    task: str
    path: Path
    records: list[Any] | None = None  #: embedded samples (None: read ``path``)

    @property
    def label(self) -> str:
        return str(self.path) if self.records is None else f"{self.path}: samples[{self.task!r}]"


@dataclass
class Run:
    """One evaluation run: its results document (if any) and its samples per task."""

    path: Path | None
    data: dict[str, Any]
    date_id: str | None
    layout: str
    samples: dict[str, SamplesPart] = field(default_factory=dict)

    @property
    def results(self) -> dict[str, dict[str, Any]]:
        return self.data.get("results") or {}

    @property
    def configs(self) -> dict[str, dict[str, Any]]:
        return self.data.get("configs") or {}

    @property
    def group_subtasks(self) -> dict[str, list[str]]:
        return {g: list(c) for g, c in (self.data.get("group_subtasks") or {}).items() if c}

    @property
    def groups(self) -> set[str]:
        return set(self.group_subtasks) | set(self.data.get("groups") or {})

    @property
    def run_at(self) -> datetime | None:
        return unix_to_datetime(self.data.get("date")) or (parse_date_id(self.date_id) if self.date_id else None)

    @property
    def order(self) -> str:
        at = self.run_at
        return at.isoformat() if at else (self.date_id or "")

    @property
    def harness_version(self) -> str | None:
        version = self.data.get("lm_eval_version")
        if isinstance(version, str) and version:
            return version
        sha = self.data.get("git_hash")
        return f"git:{sha}" if isinstance(sha, str) and sha else None

    @property
    def limit(self) -> float | None:
        value = (self.data.get("config") or {}).get("limit")
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    def n_shot(self, task: str) -> int | None:
        for value in ((self.data.get("n-shot") or {}).get(task),
                      (self.configs.get(task) or {}).get("num_fewshot"),
                      (self.data.get("config") or {}).get("num_fewshot"),
                      self.data.get("num_fewshot")):  # a script's own dump of simple_evaluate's results
            if isinstance(value, int | float) and not isinstance(value, bool):
                return int(value)
            if isinstance(value, str) and value.isdigit():
                return int(value)
        return None

    def counts(self, task: str) -> tuple[int | None, int | None]:
        """(original, effective) document counts of a task (0.4.3+ ``n-samples``)."""
        counts = (self.data.get("n-samples") or {}).get(task)
        if isinstance(counts, dict):
            return counts.get("original"), counts.get("effective")
        return None, None

    def limited(self, task: str) -> float | None:
        """The --limit this task ran under (the configured value, else the effective count)."""
        if self.limit is not None:
            return self.limit
        original, effective = self.counts(task)
        if isinstance(original, int) and isinstance(effective, int) and effective < original:
            return float(effective)
        return None
