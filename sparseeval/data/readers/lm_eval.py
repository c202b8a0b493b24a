"""Reader for lm-evaluation-harness output, every layout the harness has written.

Layouts (read at the harness' release tags; see ``docs/formats.md``):

* **0.3** (``main.py --output_path x.json``): one JSON ``{"results": {task: {"acc": .., "acc_stderr": ..}},
  "versions", "config": {"model_args", "num_fewshot", "limit", ...}}``; plain metric keys, no samples.
* **0.4.0 - 0.4.2** (``__main__.py``): ``results.json`` (or the ``.json`` named by ``--output_path``) with
  ``results`` keyed ``"metric,filter"``, ``groups``, ``configs``, ``versions``, ``n-shot``, ``config``
  (0.4.2: ``date``, ``git_hash``) and, with ``--log_samples``, one ``<model_args>_<task>.jsonl`` per task
  beside it (``/`` and ``=`` of the model args replaced by ``__``) holding ONE JSON ARRAY (indent 2) of
  samples. Samples carry ``doc_id`` and the metric values but no ``filter``: a task with several filters
  lists every document once per filter, in the order of its ``filter_list``.
* **0.4.3+** (``EvaluationTracker``): ``<output>/<sanitized model>/results_<date_id>.json`` (adds
  ``n-samples``, ``model_name``, later ``lm_eval_version``) and ``samples_<task>_<date_id>.jsonl`` (one
  JSON object per line; ``filter`` and ``metrics`` keys since 0.4.8). ``date_id`` is
  ``datetime.now().isoformat()`` with ``:`` replaced by ``-`` (no fraction when it is zero).
* **Python API**: the dict ``simple_evaluate`` returns, dumped as JSON with the per-task ``samples``
  embedded (``{"results": ..., "samples": {task: [...]}}``).

The unit is one (model, task, run): a bad or missing part of a folder becomes a :class:`PartNote` and the
rest is still returned. Every row carries its settings (:data:`~sparseeval.data.readers.base.SETTINGS_SCHEMA`).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from sparseeval.data.benchmarks import MMLU_SUBJECTS, V2_GROUPS, canonical_benchmark
from sparseeval.data.readers.anchor_runs import anchor_specs, native_data, native_record
from sparseeval.data.readers.base import (
    MODELS_SCHEMA,
    RESPONSES_SCHEMA,
    SCORES_SCHEMA,
    SETTINGS_SCHEMA,
    InputError,
    ParsedResults,
    PartNote,
)
from sparseeval.data.tasks import (
    LEADERBOARD_V2_TASKS,
    TRUTHFULQA_SIBLINGS,
    harness_group,
    is_group,
    means_leaderboard,
    task_benchmark,
)

#: The metric the Open LLM Leaderboard used per canonical benchmark (first one present wins), with the
#: names lighteval gives the same numbers. Any other task uses the first score metric of its own list.
PREFERRED_METRICS: dict[str, tuple[str, ...]] = {
    "arc": ("acc_norm", "loglikelihood_acc_norm", "loglikelihood_acc_norm_nospace"),
    "hellaswag": ("acc_norm", "loglikelihood_acc_norm"),
    "mmlu": ("acc", "loglikelihood_acc"),
    "winogrande": ("acc", "loglikelihood_acc"),
    "truthfulqa": ("mc2", "acc", "truthfulqa_mc2"),  # lm-eval's truthfulqa_mc2 calls mc2 "acc"
    "gsm8k": ("exact_match", "acc", "quasi_em", "qem", "em", "extractive_match"),
    "bbh": ("acc_norm",),
    "gpqa": ("acc_norm",),
    "math_hard": ("exact_match",),
    "musr": ("acc_norm",),
    "ifeval": ("prompt_level_strict_acc",),
    "mmlu_pro": ("acc",),
}
#: Metrics that are not a per-item score in [0, 1] (generative similarity, perplexities): never stored.
NON_SCORE_PREFIXES = ("bleu", "rouge", "ter", "chrf", "perplexity", "word_perplexity", "byte_perplexity",
                      "bits_per_byte", "ppl", "brier_score", "likelihood_difference", "mcc")
#: Aggregations whose value is the mean of the per-document values (the only ones checked against samples).
_MEAN_AGGREGATIONS = ("mean",)
#: an aggregate may differ from the mean of its samples by float noise only
TOLERANCE = 1e-3
LFS_POINTER = "version https://git-lfs.github.com/spec/v1"
LFS_REASON = "Git LFS pointer: run `git lfs pull`"
HARNESS = "lm-eval"

_RESULTS_RE = re.compile(r"^results_(?P<date>.+)\.json$")
_SAMPLES_RE = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9\-.:]+)\.jsonl$")
_SETTINGS_COLS = list(SETTINGS_SCHEMA)


# ----------------------------------------------------------------------------------------------- shared


def read_json(path: Path) -> Any:
    """Parse a JSON file; a syntax error becomes an InputError with the line and column."""
    text = read_text(path)
    if text.startswith(LFS_POINTER):
        raise InputError(path, LFS_REASON)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON ({exc.msg}) at column {exc.colno}", line=exc.lineno) from exc


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read file: {exc}") from exc


def is_lfs_pointer(path: Path) -> bool:
    """A Git LFS pointer file (what a clone without ``git lfs pull`` holds instead of the data)."""
    try:
        with path.open("rb") as fh:
            return fh.read(len(LFS_POINTER)) == LFS_POINTER.encode()
    except OSError:
        return False


def parse_date_id(date_id: str) -> datetime | None:
    """``2024-05-01T12-34-56.123456`` / ``2024-05-01T12-34-56`` / ``2024-05-01T12:34:56`` (ISO with or without
    ``:`` replaced, as both harnesses name files) -> naive datetime (the writer's local time)."""
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2})[T_ ](\d{2})[-:](\d{2})[-:](\d{2})(\.\d+)?", date_id)
    if not m:
        return None
    try:
        return datetime.fromisoformat(f"{m[1]}T{m[2]}:{m[3]}:{m[4]}{m[5] or ''}")
    except ValueError:
        return None


def unix_to_datetime(value: object) -> datetime | None:
    """A unix timestamp (as the harness writes ``date``) -> naive UTC datetime; other values -> None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 1e8 < value < 1e11:
        return datetime.fromtimestamp(float(value), tz=UTC).replace(tzinfo=None)
    return None


def model_from_folder(folder: Path) -> str:
    """``org__model`` (lm-eval's sanitized name) or ``details_org__model`` -> ``org/model``."""
    name = folder.name
    name = name.removeprefix("details_")
    name = re.sub(r"-details$", "", name)
    return name.replace("__", "/", 1)


def mmlu_subject(task: str) -> str | None:
    """The MMLU subject of a task name (``mmlu_anatomy``, ``hendrycksTest-anatomy``, ``mmlu:anatomy``)."""
    bench, prefix = task_benchmark(task)
    return prefix if bench == "mmlu" else None


def safe_benchmark(path: Path, name: str) -> str:
    """canonical_benchmark, with bad names reported against the file."""
    try:
        return canonical_benchmark(name)
    except ValueError as exc:
        raise InputError(path, f"bad task name {name!r}: {exc}") from exc


def safe_task_benchmark(path: Path, name: str, harness: str | None = None) -> tuple[str, str | None]:
    """:func:`sparseeval.data.tasks.task_benchmark`, with bad names reported against the file."""
    try:
        return task_benchmark(name, harness)
    except ValueError as exc:
        raise InputError(path, f"bad task name {name!r}: {exc}") from exc


def is_score_metric(metric: str) -> bool:
    return not metric.endswith("_stderr") and not metric.lower().startswith(NON_SCORE_PREFIXES)


def pick_metric(benchmark: str, available: Sequence[str]) -> str | None:
    """Leaderboard's metric for known benchmarks, else the first available score metric."""
    for metric in PREFERRED_METRICS.get(benchmark, ()):
        if metric in available:
            return metric
    scores = [m for m in available if is_score_metric(m)]
    return scores[0] if scores else None


def to_float_score(value: object) -> float | None:
    """Per-document metric value -> float; bools count as 0/1, a list (ifeval's per-instruction
    results) as its mean. None for anything that is not a number."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list) and value and all(isinstance(v, int | float | bool) for v in value):
        return float(sum(float(v) for v in value) / len(value))
    return None


def settings_frame(frame: pl.DataFrame, **settings: Any) -> pl.DataFrame:
    """Add the settings columns (typed as SETTINGS_SCHEMA) as literals to ``frame``."""
    return frame.with_columns([pl.lit(settings.get(c), dtype=t).alias(c) for c, t in SETTINGS_SCHEMA.items()])


def build_parsed(responses: pl.DataFrame, scores: pl.DataFrame, models: pl.DataFrame,
                 sources: list[Path], notes: list[PartNote] | None = None,
                 fmt: str | None = None) -> ParsedResults:
    """Cast frames to the canonical schemas plus the settings columns, keeping the latest run per key
    (column ``_run`` orders runs; later wins)."""
    def latest(frame: pl.DataFrame, keys: list[str], schema: Mapping[str, pl.DataType],
               settings: bool) -> pl.DataFrame:
        full = {**schema, **(SETTINGS_SCHEMA if settings else {})}
        if frame.height == 0:
            return pl.DataFrame(schema=full)
        if "_run" in frame.columns:
            frame = frame.sort("_run", maintain_order=True).unique(keys, keep="last", maintain_order=True)
        cols = [pl.col(c).cast(t) if c in frame.columns else pl.lit(None, dtype=t).alias(c)
                for c, t in full.items()]
        return frame.select(cols).sort(keys)

    kept_responses = latest(responses, ["model", "benchmark", "item_id"], RESPONSES_SCHEMA, True)
    kept_scores, dropped = scores_with_items(latest(scores, ["model", "benchmark"], SCORES_SCHEMA, True),
                                             kept_responses, sources)
    return ParsedResults(
        responses=kept_responses,
        scores=kept_scores,
        models=latest(models, ["model"], MODELS_SCHEMA, False),
        sources=sources,
        notes=[*(notes or []), *dropped],
        format=fmt,
    )


def scores_with_items(scores: pl.DataFrame, responses: pl.DataFrame, sources: Sequence[Path],
                      ) -> tuple[pl.DataFrame, list[PartNote]]:
    """Scores of a results folder whose benchmark has per-item rows in it, and a note per score dropped.

    A folder of per-item files (lm-eval samples, leaderboard details) whose results file reports a task
    with no per-item file of it (not logged, or not downloaded: a Hub source with wanted tasks fetches
    only their files) would otherwise be refused as a whole (a score needs items); the rest of the
    folder is good, so only that score is left out, and said. A folder with no per-item rows at all is
    a results-only source: its scores are kept.
    """
    if responses.height == 0 or scores.height == 0:
        return scores, []
    held = responses.select("model", "benchmark").unique()
    orphans = scores.join(held, on=["model", "benchmark"], how="anti")
    if orphans.height == 0:
        return scores, []
    where = os.path.commonpath([str(p) for p in sources]) if sources else "?"
    notes = [PartNote(f"{where}: {bench}", "skipped",
                      f"reported score of {model} not stored: the folder holds no per-item file of {bench} "
                      "(not logged, or not downloaded), so the score has no items to learn from")
             for model, bench in orphans.select("model", "benchmark").sort("benchmark", "model").iter_rows()]
    return scores.join(held, on=["model", "benchmark"], how="semi"), notes


def refuse_empty(path: Path, parsed: ParsedResults, errors: Sequence[InputError] = ()) -> ParsedResults:
    """A source that yields no rows raises: the one error if a single part failed, else a summary."""
    if parsed.responses.height or parsed.scores.height:
        return parsed
    if len(errors) == 1:
        raise errors[0]
    refused = parsed.refused_parts
    if refused:
        detail = "; ".join(f"{n.part}: {n.reason}" for n in refused[:3])
        more = f" (and {len(refused) - 3} more)" if len(refused) > 3 else ""
        raise InputError(path, f"every part was refused: {detail}{more}")
    skipped = "; ".join(f"{n.part}: {n.reason}" for n in parsed.notes[:3])
    raise InputError(path, "no responses or scores in this source" + (f" ({skipped})" if skipped else ""))


# ------------------------------------------------------------------------------------------- lm-eval


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


@dataclass(frozen=True)
class TaskPlan:
    """How one lm-eval task becomes rows: benchmark, item-id prefix, metric and filter."""

    task: str
    benchmark: str
    prefix: str | None  #: item ids become ``<prefix>.<doc_id>`` (MMLU subjects, grouped subtasks)
    metric: str | None
    filter: str | None
    group: str | None = None  #: the results key whose aggregate is the benchmark's score, if not the task


def _parents(group_subtasks: Mapping[str, list[str]]) -> dict[str, str]:
    return {child: group for group, children in group_subtasks.items() for child in children}


def _skip_reason(task: str, benchmark: str, available: Sequence[str]) -> str | None:
    """Why a task is deliberately not stored (the truthfulqa family beyond mc2, generative metrics)."""
    if task in TRUTHFULQA_SIBLINGS:
        gen = next((m for m in available if not is_score_metric(m)), None)
        if gen is not None:
            return f"generative metric {gen} is not a score: truthfulqa uses mc2"
        return f"{task} is not stored: truthfulqa uses mc2"
    if available and not any(is_score_metric(m) for m in available):
        return f"generative metric {available[0]} is not a score"
    return None


def plan_task(path: Path, task: str, run: Run | None, sample_metrics: Sequence[str],
              sample_filters: Sequence[str]) -> TaskPlan | str:
    """Decide benchmark, item prefix, metric and filter for one task (or return why it is skipped).

    Benchmark: :func:`sparseeval.data.tasks.task_benchmark` (MMLU subjects, leaderboard v2 subtasks,
    truthfulqa_mc2...); an unknown subtask whose parent group reports an aggregate and contains only
    tasks folds into that group, its ids ``<subtask>.<doc_id>`` with the whole subtask name (so two
    subtasks never share an id), unless the group's name reads as a leaderboard benchmark it is not
    (lm-eval's own ``bbh`` CoT group is not the leaderboard's ``bbh``); anything else is its own benchmark.
    """
    benchmark, prefix = safe_task_benchmark(path, task, HARNESS)
    group = None
    if run is not None and prefix is None and benchmark == task:
        parent = _parents(run.group_subtasks).get(task)
        if parent is not None and not means_leaderboard(parent):
            siblings = run.group_subtasks.get(parent, [])
            leaf_only = not any(s in run.groups for s in siblings)
            if leaf_only and _metric_keys(run.results.get(parent, {})):
                benchmark = safe_benchmark(path, parent)
                prefix = task
                group = parent
    config = run.configs.get(task, {}) if run is not None else {}
    declared = [m["metric"] for m in config.get("metric_list") or []
                if isinstance(m, dict) and isinstance(m.get("metric"), str)]
    reported = _metric_keys(run.results.get(task, {})) if run is not None else []
    available = declared or list(sample_metrics) or list(dict.fromkeys(m for m, _ in reported))
    reason = _skip_reason(task, benchmark, available)
    if reason is not None:
        return reason
    metric = pick_metric(benchmark, available)
    if metric is None:
        return "no metric: no metric_list in results and no metric in samples"
    filters = [f for m, f in reported if m == metric and f is not None]
    order = filter_order(run, task)
    ordered = [f for f in order if f in filters] + [f for f in filters if f not in order]
    if not ordered and reported and all(f is None for _, f in reported):
        chosen: str | None = None  # 0.3: no filters at all
    else:
        if not ordered:  # no results to go by: the unfiltered score, else the leaderboard's strict match
            candidates = list(sample_filters) or order
            preferred = [f for f in ("none", "strict-match") if f in candidates]
            ordered = preferred + [f for f in candidates if f not in preferred]
        chosen = ordered[0] if ordered else "none"
    return TaskPlan(task=task, benchmark=benchmark, prefix=prefix, metric=metric, filter=chosen, group=group)


def filter_order(run: Run | None, task: str) -> list[str]:
    """The task's filters in ``filter_list`` order (``none`` when it declares none)."""
    config = run.configs.get(task, {}) if run is not None else {}
    names = [f["name"] for f in config.get("filter_list") or [] if isinstance(f, dict) and "name" in f]
    return names or ["none"]


# ------------------------------------------------------------------------------------------- samples


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


# ---------------------------------------------------------------------------------------- collection


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


def _old_layout_task(stem: str, data: Mapping[str, Any]) -> str | None:
    """The task of a 0.4.0-0.4.2 samples file ``<model_args>_<task>`` of the results ``data``."""
    prefix = sanitized_model_args(data)
    tasks = list(data.get("configs") or {}) + list(data.get("results") or {})
    if prefix is not None and stem.startswith(prefix + "_") and stem[len(prefix) + 1:] in tasks:
        return stem[len(prefix) + 1:]
    return None


def is_v2_samples(name: str) -> bool:
    """A ``samples_<task>_<date>.jsonl`` of one of the Open LLM Leaderboard v2's exact tasks."""
    m = _SAMPLES_RE.match(name)
    return m is not None and m["task"] in LEADERBOARD_V2_TASKS


def _run_from_results(path: Path, data: dict[str, Any]) -> Run:
    m = _RESULTS_RE.match(path.name)
    run = Run(path=path, data=data, date_id=m["date"] if m else None, layout=results_layout(data, path))
    embedded = data.get("samples")
    if isinstance(embedded, dict):
        for task, records in embedded.items():
            if isinstance(records, list):
                run.samples[str(task)] = SamplesPart(task=str(task), path=path, records=records)
    return run


def collect(path: Path) -> tuple[list[Run], list[PartNote], list[Path]]:
    """The runs of an lm-eval source (a model folder, one results JSON, one samples file).

    A results file given alone reads only its own run's samples (same ``date_id``, or the 0.4.0-0.4.2
    ``<model_args>_<task>.jsonl`` names); a folder pairs every samples file with its results.
    """
    notes: list[PartNote] = []
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    elif path.is_file():
        files = [path]
    else:
        raise InputError(path, "no such file or folder")
    runs: list[Run] = []
    results_by_date: dict[str, Run] = {}
    samples_files: list[Path] = []
    for p in files:
        name = p.name.lower()
        if is_lfs_pointer(p):
            if _SAMPLES_RE.match(p.name) or name.endswith(".jsonl"):
                samples_files.append(p)  # refused when its task is read
            else:
                notes.append(PartNote(str(p), "refused", LFS_REASON))
            continue
        if name.endswith(".json") and not sniff_samples(p):
            try:
                data = read_json(p)
            except InputError as exc:
                if path.is_file():
                    raise
                if _RESULTS_RE.match(p.name):
                    notes.append(PartNote(str(p), "refused", exc.problem if exc.line is None
                                          else f"{exc.problem} (line {exc.line})"))
                continue
            if is_lm_eval_results(data):
                run = _run_from_results(p, data)
                runs.append(run)
                if run.date_id:
                    results_by_date[run.date_id] = run
            elif path.is_file():
                raise InputError(p, "JSON file is not lm-eval results")
        elif name.endswith((".jsonl", ".json")) and sniff_samples(p):
            samples_files.append(p)
    if path.is_file() and runs:  # a results file alone: its own run's samples beside it
        run = runs[0]
        for p in sorted(path.parent.iterdir()):
            if p == path or not p.is_file():
                continue
            m = _SAMPLES_RE.match(p.name)
            if (m and run.date_id and m["date"] == run.date_id) or (
                    not m and p.suffix == ".jsonl" and _old_layout_task(p.stem, run.data)):
                samples_files.append(p)
    for p in samples_files:
        m = _SAMPLES_RE.match(p.name)
        if m:
            run = results_by_date.get(m["date"])
            if run is None and path.is_file():  # a samples file alone: its run's results, if beside it
                sibling = p.parent / f"results_{m['date']}.json"
                if sibling.is_file() and not is_lfs_pointer(sibling):
                    try:
                        data = read_json(sibling)
                    except InputError:
                        data = None
                    if is_lm_eval_results(data):
                        run = _run_from_results(sibling, data)
                        runs.append(run)
                        results_by_date[m["date"]] = run
            if run is None:
                run = Run(path=None, data={}, date_id=m["date"], layout="lm-eval-0.4.3+")
                runs.append(run)
                results_by_date[m["date"]] = run
            run.samples[m["task"]] = SamplesPart(task=m["task"], path=p)
            continue
        owner = next(((r, t) for r in runs if r.path is not None
                      and (t := _old_layout_task(p.stem, r.data)) is not None), None)
        if owner is None and path.is_file():
            for sibling in sorted(p.parent.glob("*.json")):
                try:
                    data = read_json(sibling) if not is_lfs_pointer(sibling) else None
                except InputError:
                    continue
                if is_lm_eval_results(data) and (t := _old_layout_task(p.stem, data)) is not None:
                    run = _run_from_results(sibling, data)
                    runs.append(run)
                    owner = (run, t)
                    break
        if owner is not None:
            owner[0].samples[owner[1]] = SamplesPart(task=owner[1], path=p)
        else:
            task = p.stem.removeprefix("samples_")
            run = Run(path=None, data={}, date_id=None, layout="lm-eval-0.4.0" if p.suffix == ".json"
                      else "lm-eval-0.4.3+")
            run.samples[task] = SamplesPart(task=task, path=p)
            runs.append(run)
    for run in runs:
        notes += _as_harness_tasks(run)
    return runs, notes, files


def _as_harness_tasks(run: Run) -> list[PartNote]:
    """Rewrite a run of exported anchor tasks (``sparseeval export --format lm-eval-task``) into the harness
    tasks they stand for (:mod:`sparseeval.data.readers.anchor_runs`); notes for samples that cannot be read."""
    specs = anchor_specs(run.data)
    if not specs:
        return []
    notes: list[PartNote] = []
    merged: dict[str, tuple[Path, dict[Any, Any]]] = {}
    for task, spec in specs.items():
        part = run.samples.pop(task, None)
        if part is None:
            continue
        try:
            records = [native_record(r, spec["metric"]) for _, r in iter_records(part)]
        except InputError as exc:
            notes.append(PartNote(part.label, "refused", _reason(exc)))
            continue
        path, by_doc = merged.setdefault(spec["base_task"], (part.path, {}))
        for r in records:  # a harness task in two exported entries (a joint and a single predictor): once
            key = (r.get("doc_id"), r.get("filter")) if isinstance(r, dict) else id(r)
            seen = by_doc.setdefault(key, r)
            if isinstance(r, dict) and seen is not r and seen.get(spec["metric"]) != r.get(spec["metric"]):
                notes.append(PartNote(part.label, "refused", f"document {key[0]} of {spec['base_task']} was answered "
                                                             f"twice in this run, differently ({task} and another "
                                                             "exported task): run the two exports separately"))
                by_doc[key] = None
    run.data = native_data(run.data, specs)
    for base, (path, by_doc) in merged.items():
        if None not in by_doc.values():
            run.samples[base] = SamplesPart(task=base, path=path, records=list(by_doc.values()))
    return notes


# -------------------------------------------------------------------------------------------- reading


@dataclass
class _TaskRows:
    plan: TaskPlan
    frame: pl.DataFrame | None = None  #: (item_id, score) when samples were read
    complete: bool = False  #: the samples cover every document the aggregate covers
    contradiction: str | None = None


def _is_group(run: Run, key: str) -> bool:
    return key in run.groups or is_group(key)  # the harness' groups: 0.4.0 has no group_subtasks


def _mean_checkable(run: Run, task: str, metric: str) -> bool:
    config = run.configs.get(task)
    if not config:
        return True
    for m in config.get("metric_list") or []:
        if isinstance(m, dict) and m.get("metric") == metric:
            agg = m.get("aggregation", "mean")
            return not isinstance(agg, str) or agg in _MEAN_AGGREGATIONS
    return True


def read_run(run: Run, model: str, skip_tasks: set[str], samples_only: bool = False
             ) -> tuple[list[pl.DataFrame], list[dict[str, Any]], list[PartNote], list[InputError]]:
    """One run -> response frames, score rows, notes and the errors behind refused parts."""
    notes: list[PartNote] = []
    errors: list[InputError] = []
    where = str(run.path) if run.path is not None else None
    base = {"harness": HARNESS, "harness_version": run.harness_version, "run_at": run.run_at}
    leaves = [t for t in run.results if not _is_group(run, t)]
    tasks = list(run.samples) if samples_only else list(dict.fromkeys([*leaves, *run.samples]))
    rows: dict[str, _TaskRows] = {}
    for task in tasks:
        if task in skip_tasks:
            continue
        part = run.samples.get(task)
        label = part.label if part is not None else f"{where}: {task}"
        broken = False
        try:
            metrics, filters = peek_samples(part) if part is not None else ([], [])
        except InputError as exc:  # that task's samples are refused; its aggregate may still be a score
            notes.append(PartNote(label, "refused", _reason(exc)))
            errors.append(exc)
            metrics, filters, broken = [], [], True
        try:
            plan = plan_task(part.path if part is not None else run.path or Path(task), task, run, metrics,
                             filters)
        except InputError as exc:
            notes.append(PartNote(label, "refused", _reason(exc)))
            errors.append(exc)
            continue
        if isinstance(plan, str):
            if not broken:
                notes.append(PartNote(label, "skipped", plan))
            continue
        entry = rows[task] = _TaskRows(plan=plan)
        if broken:
            continue
        if part is None:
            if run.samples:  # absent, not bad: not logged, or left out of a download on purpose
                notes.append(PartNote(f"{where}: {task}", "skipped",
                                      f"no samples file of task {task}: no per-item rows of it"))
            continue
        try:
            entry.frame = read_samples(part, plan, filter_order(run, task))
        except InputError as exc:
            notes.append(PartNote(label, "refused", _reason(exc)))
            errors.append(exc)
            continue
        original, effective = run.counts(task)
        expected = effective if isinstance(effective, int) else original
        entry.complete = expected is None or entry.frame.height == expected
        agg = _aggregate(run.results.get(task, {}), plan.metric or "", plan.filter)
        if agg is not None and entry.complete and _mean_checkable(run, task, plan.metric or ""):
            mean = float(entry.frame["score"].mean())  # type: ignore[arg-type]
            if abs(mean - agg) > TOLERANCE:
                key = plan.metric if plan.filter is None else f"{plan.metric},{plan.filter}"
                entry.contradiction = (f"aggregate {key} = {agg:.4g} of task {task} contradicts its "
                                       f"{entry.frame.height} samples (mean {mean:.4g}): score not stored")

    responses: list[pl.DataFrame] = []
    for task, entry in rows.items():
        if entry.frame is None:
            continue
        plan = entry.plan
        responses.append(settings_frame(
            entry.frame.with_columns(model=pl.lit(model), benchmark=pl.lit(plan.benchmark)),
            task=benchmark_task(run, plan), n_shot=run.n_shot(task), metric=plan.metric, filter=plan.filter,
            limit=run.limited(task), **base))

    scores: list[dict[str, Any]] = []
    by_bench: dict[tuple[str, str | None], list[_TaskRows]] = {}
    for entry in rows.values():  # per metric too: leaderboard_mmlu_pro (acc) is not lm-eval's mmlu_pro (CoT)
        by_bench.setdefault((entry.plan.benchmark, entry.plan.metric), []).append(entry)
    for (bench, _), members in by_bench.items() if not samples_only else ():
        row, note = _score(run, bench, members, where)
        if note is not None:
            notes.append(note)
        if row is not None:
            scores.append({"model": model, "benchmark": bench, **base, **row})
    return responses, scores, notes, errors


def benchmark_task(run: Run, plan: TaskPlan) -> str:
    """The ``task`` setting of a row: the task as run, or for a benchmark made of subtasks (MMLU subjects,
    a v2 group, a group's members) the group's name, so one run of a benchmark has one task value (the
    subtask is the item id's prefix)."""
    if plan.prefix is None:
        return plan.task
    if plan.group is not None:
        return plan.group
    if plan.benchmark == "mmlu":
        return "hendrycksTest" if plan.task == f"hendrycksTest-{plan.prefix}" else "mmlu"
    return harness_group(plan.benchmark) or plan.benchmark


def _reason(exc: InputError) -> str:
    where = []
    if exc.line is not None:
        where.append(f"line {exc.line}")
    if exc.column is not None:
        where.append(f"column {exc.column!r}")
    return exc.problem + (f" ({', '.join(where)})" if where else "")


def _score(run: Run, bench: str, members: list[_TaskRows], where: str | None
           ) -> tuple[dict[str, Any] | None, PartNote | None]:
    """The benchmark score of one run, as the leaderboard defines it, with its settings; or a note."""
    if not run.results:
        return None, None
    plan = members[0].plan
    metric, filt = plan.metric or "", plan.filter
    part = f"{where}: {bench}"
    tasks = [m.plan.task for m in members]
    limits = [lim for t in tasks if (lim := run.limited(t)) is not None]
    contradictions = [m.contradiction for m in members if m.contradiction]
    if bench == "mmlu":
        subjects = {m.plan.prefix: m for m in members if m.plan.prefix}
        values = {s: _aggregate(run.results.get(m.plan.task, {}), metric, filt) for s, m in subjects.items()}
        present = {s for s, v in values.items() if v is not None}
        if not set(MMLU_SUBJECTS) <= present:
            if not present:
                return None, None
            return None, PartNote(part, "skipped", f"mmlu score needs all 57 subjects' aggregates "
                                                   f"({len(present & set(MMLU_SUBJECTS))} present): not stored")
        value: float | None = sum(values[s] for s in MMLU_SUBJECTS) / len(MMLU_SUBJECTS)  # type: ignore[misc]
        key = benchmark_task(run, plan)
        n_shot = _members_n_shot(run, key, [m.plan.task for m in subjects.values()])
    elif any(m.plan.prefix is not None for m in members):  # a benchmark of subtasks: its group's aggregate
        key = plan.group or harness_group(bench) or bench
        value = _aggregate(run.results.get(key, {}), metric, filt)
        if value is None and bench in V2_GROUPS:  # 24 separate tasks: the group's size-weighted mean
            value = _weighted_mean(run, bench, members, metric, filt)
        if value is None:
            return None, None
        n_shot = _members_n_shot(run, key, tasks)
    else:
        key = plan.task
        if key not in run.results:
            return None, None
        value = _aggregate(run.results[key], metric, filt)
        if value is None:
            return None, PartNote(part, "refused", f"no aggregate {metric},{filt} for task {key}")
        n_shot = run.n_shot(key)
    if limits:
        if _anchor_subset(members):  # lm_eval --samples: chosen documents, not the first N
            return None, PartNote(part, "skipped", f"anchor run (lm-eval --samples, {limits[0]:g} chosen documents): "
                                                   "its aggregate is not a benchmark score (responses kept)")
        return None, PartNote(part, "skipped", f"run used --limit {limits[0]:g}: its aggregate is not a "
                                               "benchmark score (responses kept)")
    if contradictions:
        return None, PartNote(part, "refused", contradictions[0])
    if value is None or not 0.0 <= value <= 1.0:
        return None, PartNote(part, "refused", f"aggregate {metric!r} of {key!r} is {value!r}, not a score "
                                               "in [0, 1]")
    return {"score": value, "task": key, "n_shot": n_shot, "metric": metric, "filter": filt,
            "limit": None}, None


def _members_n_shot(run: Run, group: str, tasks: Sequence[str]) -> int | None:
    """A group's few-shot count: its subtasks' when they agree. A group runs no documents of its own, and
    the harness's entry for it is no count (0.4.2-0.4.3 wrote 0 for MMLU's group whose 57 subjects ran
    5-shot, from a subgroup not yet filled in; 0.4.5+ writes none). Subtasks that disagree: unknown."""
    counts = {n for t in tasks if (n := run.n_shot(t)) is not None}
    if len(counts) == 1:
        return counts.pop()
    return None if counts else run.n_shot(group)


def _anchor_subset(members: list[_TaskRows]) -> bool:
    """Whether a partial run's documents were chosen (``--samples``), not the first N (``--limit``): a
    --limit run answers doc ids 0..N-1 of every task, an anchor run scattered ones."""
    for m in members:
        if m.frame is None or m.frame.height == 0:
            continue
        docs = sorted(int(i.rsplit(".", 1)[-1]) for i in m.frame.get_column("item_id").to_list()
                      if i.rsplit(".", 1)[-1].isdigit())
        if docs != list(range(len(docs))):
            return True
    return False


def _weighted_mean(run: Run, bench: str, members: list[_TaskRows], metric: str, filt: str | None
                   ) -> float | None:
    """A v2 group's score from its subtasks' aggregates weighted by size, when every subtask is there."""
    by_sub = {m.plan.prefix: m.plan.task for m in members}
    total = weight = 0.0
    for sub in V2_GROUPS[bench][3]:
        task = by_sub.get(sub)
        value = _aggregate(run.results.get(task, {}), metric, filt) if task else None
        size = run.counts(task)[0] if task else None
        if value is None or not isinstance(size, int):
            return None
        total += value * size
        weight += size
    return total / weight if weight else None


def read_lm_eval(path: str | Path) -> ParsedResults:
    """Read one lm-eval source: a model output folder, one results JSON (any version, any file name,
    a Python-API dump with embedded samples) or one samples file.

    responses: from the samples (item id ``doc_id``, ``<subtask>.<doc_id>`` inside MMLU and the v2
    groups); scores: each benchmark's leaderboard score from the aggregates (never from a ``--limit``
    run, never when it contradicts complete samples); models: name, date, size, base model. Within a
    folder the newest run of a task supersedes older ones (noted as skipped). Bad parts are notes.
    """
    path = Path(path)
    runs, notes, _ = collect(path)
    # a samples file alone is that task alone (its results, if beside it, only say metric and filter)
    samples_only = path.is_file() and not any(r.path == path for r in runs)
    if not runs:
        if notes:
            raise InputError(path, "; ".join(f"{n.part}: {n.reason}" for n in notes[:3]))
        raise InputError(path, "no lm-eval results or samples found")
    folder = path if path.is_dir() else path.parent
    fallback = next((model_name_from_results(r.data) for r in reversed(runs) if model_name_from_results(r.data)),
                    None)
    resp_parts: list[pl.DataFrame] = []
    score_rows: list[dict[str, Any]] = []
    model_rows: list[dict[str, Any]] = []
    errors: list[InputError] = []
    seen: dict[tuple[str, str], Run] = {}
    ordered = sorted(runs, key=lambda r: r.order, reverse=True)  # newest first
    for rank, run in enumerate(ordered):
        model = model_name_from_results(run.data) or fallback or model_from_folder(folder)
        skip: set[str] = set()
        for task in [*run.results, *run.samples]:
            newer = seen.get((model, task))
            if newer is not None and newer is not run:
                skip.add(task)
        for task in sorted(skip):
            part = run.samples[task].label if task in run.samples else f"{run.path}: {task}"
            if task in run.samples or not _is_group(run, task):
                notes.append(PartNote(part, "skipped", f"superseded by the newer run "
                                                       f"{seen[(model, task)].path or seen[(model, task)].date_id}"))
        for task in [*run.results, *run.samples]:
            seen.setdefault((model, task), run)
        resp, scores, run_notes, run_errors = read_run(run, model, skip, samples_only)
        notes.extend(run_notes)
        errors.extend(run_errors)
        resp_parts += [r.with_columns(_run=pl.lit(-rank, dtype=pl.Int64)) for r in resp]
        score_rows += [{**s, "_run": -rank} for s in scores]
        if run.path is not None:
            config = run.data.get("config") or {}
            n_params = config.get("model_num_parameters")
            model_rows.append({
                "model": model, "submitted_at": run.run_at,
                "n_params": float(n_params) if isinstance(n_params, int | float) and n_params > 0 else None,
                "base_model": base_model_from_results(run.data), "_run": rank,  # the earliest run dates it
            })
    if not model_rows:
        model_rows.append({"model": fallback or model_from_folder(folder), "submitted_at": None, "n_params": None,
                           "base_model": None, "_run": 0})
    responses = pl.concat(resp_parts, how="diagonal_relaxed") if resp_parts else pl.DataFrame()
    scores = pl.DataFrame(score_rows, schema={**SCORES_SCHEMA, **SETTINGS_SCHEMA, "_run": pl.Int64}) \
        if score_rows else pl.DataFrame()
    models = pl.DataFrame(model_rows, schema={**MODELS_SCHEMA, "_run": pl.Int64})
    layouts = sorted({r.layout for r in runs})
    sources = sorted({p for r in runs for p in [r.path, *(s.path for s in r.samples.values())] if p is not None})
    parsed = build_parsed(responses, scores, models, sources, notes, ", ".join(layouts))
    return refuse_empty(path, parsed, errors)


def iter_lm_eval_files(folder: Path) -> Iterable[Path]:
    """The files of one lm-eval unit (for ingest bookkeeping)."""
    runs, _, _ = collect(folder)
    yield from sorted({p for r in runs for p in [r.path, *(s.path for s in r.samples.values())] if p})
