"""Reader for lm-evaluation-harness output folders (``results_<date>.json``, ``samples_<task>_<date>.jsonl``).

Layout (lm-eval 0.4.x, ``EvaluationTracker``): one folder per model (``<output>/<sanitized model>``)
holding, per run, one aggregate ``results_<date_id>.json`` (``results`` per task with ``"metric,filter"``
keys, ``groups``, ``group_subtasks``, ``configs``, ``n-samples``, ``config.model_args``, ``model_name``,
``date`` as a unix float) and one ``samples_<task>_<date_id>.jsonl`` per task with ``--log_samples``: one
JSON object per (document, filter) with ``doc_id``, ``filter``, ``metrics`` and the per-document metric
values as top-level keys (``"acc": 1.0``). The ``date_id`` suffix ties a samples file to its run.

The Open LLM Leaderboard v2 details are the same format (tasks named ``leaderboard_*``), so this module
also reads them. Helpers shared with the leaderboard v1 reader (metric preference, frame building) live
here because v1 is the older variant of the same idea.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from sparseeval.benchmarks import canonical_benchmark
from sparseeval.readers.base import (
    MODELS_SCHEMA,
    RESPONSES_SCHEMA,
    SCORES_SCHEMA,
    InputError,
    ParsedResults,
)

#: The metric the Open LLM Leaderboard used per canonical benchmark (first one present wins). Any other
#: task uses the first metric of its own ``metric_list``: the task author's primary metric.
PREFERRED_METRICS: dict[str, tuple[str, ...]] = {
    "arc": ("acc_norm",),
    "hellaswag": ("acc_norm",),
    "mmlu": ("acc",),
    "winogrande": ("acc",),
    "truthfulqa": ("mc2", "acc"),  # leaderboard v1 key mc2; lm-eval's truthfulqa_mc2 calls it acc
    "gsm8k": ("exact_match", "acc"),  # lm-eval: exact_match (strict-match first); leaderboard v1: acc
}

_RESULTS_RE = re.compile(r"^results_(?P<date>[^_]+)\.json$")
_SAMPLES_RE = re.compile(r"^samples_(?P<task>.+)_(?P<date>[^_]+)\.jsonl$")
_MMLU_PREFIXES = ("mmlu_", "hendrycksTest-", "hendrycks_test-")


# ----------------------------------------------------------------------------------------------- shared


def read_json(path: Path) -> Any:
    """Parse a JSON file; a syntax error becomes an InputError with the line and column."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read file: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON ({exc.msg}) at column {exc.colno}", line=exc.lineno) from exc


def parse_date_id(date_id: str) -> datetime | None:
    """``2024-05-01T12-34-56.123456`` (ISO with ``:`` replaced, as both harnesses name files) -> datetime."""
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2})T(\d{2})-(\d{2})-(\d{2})(\.\d+)?", date_id)
    if not m:
        return None
    try:
        return datetime.fromisoformat(f"{m[1]}T{m[2]}:{m[3]}:{m[4]}{m[5] or ''}")
    except ValueError:
        return None


def unix_to_datetime(value: object) -> datetime | None:
    """A unix timestamp (as the harness writes ``date``) -> naive UTC datetime; other values -> None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 1e8:
        return datetime.fromtimestamp(float(value), tz=UTC).replace(tzinfo=None)
    return None


def model_from_folder(folder: Path) -> str:
    """``org__model`` (lm-eval's sanitized name) or ``details_org__model`` -> ``org/model``."""
    name = folder.name
    name = name.removeprefix("details_")
    name = re.sub(r"-details$", "", name)
    return name.replace("__", "/", 1)


def mmlu_subject(task: str) -> str | None:
    """The MMLU subject of a subtask name (``mmlu_anatomy`` -> ``anatomy``), else None.

    Guards ``mmlu_pro*``: MMLU-Pro is a different benchmark even though its name starts with ``mmlu_``.
    """
    if task.lower().startswith("mmlu_pro"):
        return None
    for prefix in _MMLU_PREFIXES:
        if task.lower().startswith(prefix.lower()) and len(task) > len(prefix):
            return task[len(prefix):]
    return None


def safe_benchmark(path: Path, name: str) -> str:
    """canonical_benchmark, with ``mmlu_pro*`` kept apart and bad names reported against the file."""
    try:
        if name.lower().startswith("mmlu_pro"):
            return canonical_benchmark(name.split("_")[0] + "_pro")
        return canonical_benchmark(name)
    except ValueError as exc:
        raise InputError(path, f"bad task name {name!r}: {exc}") from exc


def pick_metric(benchmark: str, available: Sequence[str]) -> str | None:
    """Leaderboard's metric for known benchmarks, else the first available metric."""
    for metric in PREFERRED_METRICS.get(benchmark, ()):
        if metric in available:
            return metric
    return available[0] if available else None


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


def build_parsed(responses: pl.DataFrame, scores: pl.DataFrame, models: pl.DataFrame,
                 sources: list[Path]) -> ParsedResults:
    """Cast frames to the canonical schemas, keeping the latest run per key (column ``_run`` orders
    runs; later wins) so a re-run of a task replaces the older one instead of conflicting with it."""
    def latest(frame: pl.DataFrame, keys: list[str], schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
        if frame.height == 0:
            return pl.DataFrame(schema=schema)
        if "_run" in frame.columns:
            frame = frame.sort("_run", maintain_order=True).unique(keys, keep="last", maintain_order=True)
        return frame.select([pl.col(c).cast(t) for c, t in schema.items()]).sort(keys)

    return ParsedResults(
        responses=latest(responses, ["model", "benchmark", "item_id"], RESPONSES_SCHEMA),
        scores=latest(scores, ["model", "benchmark"], SCORES_SCHEMA),
        models=latest(models, ["model"], MODELS_SCHEMA) if models.height else pl.DataFrame(
            schema=MODELS_SCHEMA),
        sources=sources,
    )


# ------------------------------------------------------------------------------------------- lm-eval


@dataclass(frozen=True)
class TaskPlan:
    """How one lm-eval task becomes rows: benchmark, item-id prefix, metric and filter."""

    task: str
    benchmark: str
    prefix: str | None  #: item ids become ``<prefix>.<doc_id>`` (MMLU subjects, grouped subtasks)
    metric: str | None
    filter: str | None


@dataclass
class ResultsFile:
    """One parsed ``results_<date>.json``."""

    path: Path
    date_id: str
    data: dict[str, Any]

    @property
    def results(self) -> dict[str, dict[str, Any]]:
        return self.data.get("results") or {}

    @property
    def group_subtasks(self) -> dict[str, list[str]]:
        return self.data.get("group_subtasks") or {}

    @property
    def groups(self) -> set[str]:
        """Group names (older harness versions also list plain tasks, with no children)."""
        return {g for g, children in self.group_subtasks.items() if children}

    @property
    def configs(self) -> dict[str, dict[str, Any]]:
        return self.data.get("configs") or {}


def is_lm_eval_results(data: object) -> bool:
    """lm-eval aggregate results: ``results`` keyed by task with ``metric,filter`` keys (leaderboard v1
    files have ``config_general`` and plain metric keys instead)."""
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict) or "config_general" in data:
        return False
    keys = {"configs", "n-samples", "group_subtasks", "versions", "n-shot", "config", "model_name"}
    if keys & data.keys():
        return True
    return any("," in k for entry in data["results"].values() if isinstance(entry, dict) for k in entry)


def model_name_from_results(data: Mapping[str, Any]) -> str | None:
    """``model_name`` (written by EvaluationTracker), else ``pretrained=``/``peft=`` etc. in model_args."""
    name = data.get("model_name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    config = data.get("config") or {}
    args = config.get("model_args")
    for key in ("peft", "delta", "pretrained", "model", "path", "engine"):
        if isinstance(args, dict) and args.get(key):
            return str(args[key])
        if isinstance(args, str):
            m = re.search(rf"(?:^|,)\s*{key}=([^,]+)", args)
            if m:
                return m[1].strip()
    model = config.get("model")
    return model if isinstance(model, str) and "/" in model else None


def base_model_from_results(data: Mapping[str, Any]) -> str | None:
    """An adapter run (``peft=``/``delta=`` with ``pretrained=``) names its base model."""
    args = (data.get("config") or {}).get("model_args")
    if isinstance(args, str):
        parsed = dict(kv.split("=", 1) for kv in args.split(",") if "=" in kv)
    elif isinstance(args, dict):
        parsed = {k: str(v) for k, v in args.items()}
    else:
        return None
    if ("peft" in parsed or "delta" in parsed) and parsed.get("pretrained"):
        return parsed["pretrained"].strip()
    return None


def _metric_keys(entry: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``{"acc,none": .., "acc_stderr,none": ..}`` -> [("acc", "none")], in file order."""
    out = []
    for key, value in entry.items():
        if "," not in key or to_float_score(value) is None:
            continue
        metric, filt = key.split(",", 1)
        if not metric.endswith("_stderr"):
            out.append((metric, filt))
    return out


def _parents(group_subtasks: Mapping[str, list[str]]) -> dict[str, str]:
    return {child: group for group, children in group_subtasks.items() for child in children}


def plan_task(path: Path, task: str, rf: ResultsFile | None, sample_metrics: Sequence[str],
              sample_filters: Sequence[str]) -> TaskPlan:
    """Decide benchmark, item prefix, metric and filter for one task.

    Benchmark: MMLU subjects fold into ``mmlu`` (ids ``<subject>.<doc_id>``); a subtask whose parent
    group reports an aggregate and contains only tasks (``leaderboard_bbh`` and its 24 subtasks) folds
    into that group; anything else is its own benchmark through ``canonical_benchmark``.
    """
    subject = mmlu_subject(task)
    prefix: str | None = None
    if subject is not None:
        benchmark, prefix = "mmlu", subject
    else:
        benchmark = safe_benchmark(path, task)
        if rf is not None:
            parent = _parents(rf.group_subtasks).get(task)
            if parent is not None:
                siblings = rf.group_subtasks.get(parent, [])
                leaf_only = not any(s in rf.groups for s in siblings)
                if leaf_only and _metric_keys(rf.results.get(parent, {})):
                    benchmark = safe_benchmark(path, parent)
                    prefix = task[len(parent) + 1:] if task.startswith(parent + "_") else task

    config = rf.configs.get(task, {}) if rf is not None else {}
    declared = [m["metric"] for m in config.get("metric_list") or []
                if isinstance(m, dict) and isinstance(m.get("metric"), str)]
    reported = _metric_keys(rf.results.get(task, {})) if rf is not None else []
    available = declared or list(sample_metrics) or list(dict.fromkeys(m for m, _ in reported))
    metric = pick_metric(benchmark, available)
    filters = [f for m, f in reported if m == metric]
    order = [f["name"] for f in config.get("filter_list") or [] if isinstance(f, dict) and "name" in f]
    ordered = [f for f in order if f in filters] + [f for f in filters if f not in order]
    if not ordered:  # no results to go by: the unfiltered score, else the leaderboard's strict match
        preferred = [f for f in ("none", "strict-match") if f in sample_filters]
        ordered = preferred + [f for f in sample_filters if f not in preferred]
    chosen_filter = ordered[0] if ordered else None
    return TaskPlan(task=task, benchmark=benchmark, prefix=prefix, metric=metric, filter=chosen_filter)


def _peek_samples(path: Path) -> tuple[list[str], list[str]]:
    """Metric names and filters from the first lines of a samples file (for runs without results)."""
    metrics: list[str] = []
    filters: list[str] = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if n > 50:
                break
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                break
            if isinstance(obj, dict):
                metrics.extend(m for m in obj.get("metrics") or [] if m not in metrics)
                f = obj.get("filter")
                if isinstance(f, str) and f not in filters:
                    filters.append(f)
    return metrics, filters


def read_samples(path: Path, plan: TaskPlan) -> pl.DataFrame:
    """One samples file -> (item_id, score) for the plan's metric and filter.

    Parsed line by line with ``json.loads`` on purpose: each line carries a task-specific ``doc``
    and response payload with no common schema, and a refusal must name the broken line.
    """
    if plan.metric is None:
        raise InputError(path, "no metric: no metric_list in results and no 'metrics' in samples")
    doc_ids: list[str] = []
    values: list[float] = []
    lines: list[int] = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(path, f"invalid JSON ({exc.msg}) at column {exc.colno}", line=n) from exc
            if not isinstance(obj, dict):
                raise InputError(path, "sample is not a JSON object", line=n)
            if plan.filter is not None and obj.get("filter", plan.filter) != plan.filter:
                continue
            doc_id = obj.get("doc_id")
            if doc_id is None or isinstance(doc_id, bool) or not isinstance(doc_id, int | str):
                raise InputError(path, "missing or invalid 'doc_id'", line=n, column="doc_id")
            if plan.metric not in obj:
                raise InputError(path, f"metric {plan.metric!r} missing (sample has metrics "
                                       f"{obj.get('metrics')})", line=n, column=plan.metric)
            value = to_float_score(obj[plan.metric])
            if value is None or not 0.0 <= value <= 1.0:
                raise InputError(path, f"metric {plan.metric!r} value {obj[plan.metric]!r} is not a "
                                       "score in [0, 1]", line=n, column=plan.metric)
            doc_ids.append(str(doc_id))
            values.append(value)
            lines.append(n)
    frame = pl.DataFrame({"doc_id": doc_ids, "score": values, "line": lines},
                         schema={"doc_id": pl.String, "score": pl.Float64, "line": pl.Int64})
    dup = frame.filter(pl.col("doc_id").is_duplicated())
    if dup.height:
        raise InputError(path, f"doc_id {dup['doc_id'][0]!r} appears twice for filter {plan.filter!r}",
                         line=int(dup["line"][-1]))
    item = pl.col("doc_id") if plan.prefix is None else pl.lit(plan.prefix + ".") + pl.col("doc_id")
    return frame.select(item.alias("item_id"), "score")


def _representatives(path: Path, rf: ResultsFile, plans: Mapping[str, TaskPlan]) -> dict[str, str]:
    """benchmark -> the results key whose aggregate is that benchmark's score (``mmlu`` for subjects,
    ``leaderboard_bbh`` for its subtasks, the task itself otherwise)."""
    parents = _parents(rf.group_subtasks)

    def ancestors(key: str) -> list[str]:
        out, seen = [], set()
        while key in parents and key not in seen:
            seen.add(key)
            key = parents[key]
            out.append(key)
        return out

    benchmark_of: dict[str, str] = {}
    for key in rf.results:
        if key in rf.groups:
            name = key.split("_")[0] + "_pro" if key.lower().startswith("mmlu_pro") else key
            benchmark_of[key] = safe_benchmark(path, name) if mmlu_subject(key) is None else "mmlu"
        elif key in plans and plans[key].prefix is None:
            benchmark_of[key] = plans[key].benchmark
    wanted = {p.benchmark for p in plans.values()}
    reps: dict[str, str] = {}
    for key, bench in benchmark_of.items():
        if bench not in wanted or any(benchmark_of.get(a) == bench for a in ancestors(key)):
            continue
        reps.setdefault(bench, key)
    return reps


def _limited(rf: ResultsFile, key: str) -> bool:
    """A run with ``--limit`` scored a subset: its aggregate is not the full-benchmark score."""
    n = rf.data.get("n-samples") or {}
    todo, seen = [key], set()
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        counts = n.get(k)
        if isinstance(counts, dict) and counts.get("effective", 0) < counts.get("original", 0):
            return True
        todo.extend(rf.group_subtasks.get(k, []))
    return False


def _results_files(folder: Path) -> list[ResultsFile]:
    out = []
    for p in sorted(folder.glob("results_*.json")):
        m = _RESULTS_RE.match(p.name)
        if not m:
            continue
        data = read_json(p)
        if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
            raise InputError(p, "not an lm-eval results file: no 'results' object")
        out.append(ResultsFile(path=p, date_id=m["date"], data=data))
    return sorted(out, key=lambda r: r.date_id)


def read_lm_eval(path: str | Path) -> ParsedResults:
    """Read one lm-eval model output folder (or a single ``results_*.json``) into ParsedResults.

    responses: from every ``samples_*.jsonl`` (item id = ``doc_id``); scores: from the aggregate of
    each benchmark's representative task/group in ``results_*.json``; models: name, date, parameter
    count, base model (for adapters). Later runs replace earlier ones for the same key.
    """
    path = Path(path)
    if path.is_dir():
        folder, results = path, _results_files(path)
        samples_files = sorted(folder.glob("samples_*.jsonl"))
    elif path.is_file() and path.suffix == ".jsonl":
        folder, results, samples_files = path.parent, [], [path]
    elif path.is_file():
        folder = path.parent
        results = [r for r in _results_files(folder) if r.path == path]
        if not results:
            raise InputError(path, "not an lm-eval results_<date>.json file")
        samples_files = [p for p in sorted(folder.glob(f"samples_*_{results[0].date_id}.jsonl"))]
    else:
        raise InputError(path, "no such file or folder")
    if not results and not samples_files:
        raise InputError(path, "no lm-eval results_*.json or samples_*.jsonl found")

    by_date = {r.date_id: r for r in results}
    sample_dates = set()
    for p in samples_files:
        m = _SAMPLES_RE.match(p.name)
        if not m:
            raise InputError(p, "samples file name is not samples_<task>_<date>.jsonl")
        sample_dates.add(m["date"])
    run_rank = {d: i for i, d in enumerate(sorted(set(by_date) | sample_dates))}
    fallback = results[-1] if results else None

    def model_of(rf: ResultsFile | None) -> str:
        name = model_name_from_results(rf.data) if rf is not None else None
        if name is None and fallback is not None:
            name = model_name_from_results(fallback.data)
        return name or model_from_folder(folder)

    resp_parts: list[pl.DataFrame] = []
    plans_by_run: dict[str, dict[str, TaskPlan]] = {}
    for sp in samples_files:
        m = _SAMPLES_RE.match(sp.name)
        assert m is not None  # checked above
        rf = by_date.get(m["date"])
        metrics, filters = _peek_samples(sp)
        plan = plan_task(sp, m["task"], rf, metrics, filters)
        plans_by_run.setdefault(m["date"], {})[m["task"]] = plan
        part = read_samples(sp, plan)
        resp_parts.append(part.with_columns(
            model=pl.lit(model_of(rf)), benchmark=pl.lit(plan.benchmark),
            _run=pl.lit(run_rank[m["date"]], dtype=pl.Int64)))

    score_rows: list[dict[str, Any]] = []
    model_rows: list[dict[str, Any]] = []
    for rf in results:
        model = model_of(rf)
        plans = dict(plans_by_run.get(rf.date_id, {}))
        for task in rf.results:
            if task not in rf.groups and task not in plans:
                plans[task] = plan_task(rf.path, task, rf, [], [])
        for bench, key in _representatives(rf.path, rf, plans).items():
            if _limited(rf, key):
                continue
            metric = next((p.metric for p in plans.values() if p.benchmark == bench and p.metric), None)
            keys = _metric_keys(rf.results.get(key, {}))
            filt = next((p.filter for p in plans.values() if p.benchmark == bench and p.filter), None)
            chosen = [(mm, f) for mm, f in keys if mm == metric]
            chosen = [c for c in chosen if c[1] == filt] or chosen
            if not chosen:
                continue
            score = to_float_score(rf.results[key][f"{chosen[0][0]},{chosen[0][1]}"])
            if score is None or not 0.0 <= score <= 1.0:
                raise InputError(rf.path, f"aggregate {chosen[0][0]!r} of {key!r} is {score!r}, "
                                          "not a score in [0, 1]", column=key)
            score_rows.append({"model": model, "benchmark": bench, "score": score,
                               "_run": run_rank[rf.date_id]})
        config = rf.data.get("config") or {}
        n_params = config.get("model_num_parameters")
        model_rows.append({
            "model": model,
            "submitted_at": unix_to_datetime(rf.data.get("date")) or parse_date_id(rf.date_id),
            "n_params": float(n_params) if isinstance(n_params, int | float) and n_params > 0 else None,
            "base_model": base_model_from_results(rf.data),
            "_run": -run_rank[rf.date_id],  # the earliest run dates the model
        })

    responses = pl.concat(resp_parts, how="diagonal") if resp_parts else pl.DataFrame()
    scores = pl.DataFrame(score_rows, schema={**SCORES_SCHEMA, "_run": pl.Int64}) if score_rows \
        else pl.DataFrame()
    models = pl.DataFrame(model_rows, schema={**MODELS_SCHEMA, "_run": pl.Int64}) if model_rows \
        else pl.DataFrame({"model": [model_of(None)]}).with_columns(
            submitted_at=pl.lit(None, pl.Datetime("us")), n_params=pl.lit(None, pl.Float64),
            base_model=pl.lit(None, pl.String))
    return build_parsed(responses, scores, models, [*(r.path for r in results), *samples_files])


def iter_lm_eval_files(folder: Path) -> Iterable[Path]:
    """The files of one lm-eval unit (for ingest bookkeeping)."""
    yield from sorted(folder.glob("results_*.json"))
    yield from sorted(folder.glob("samples_*.jsonl"))
