"""How one lm-eval task becomes rows: its benchmark, item-id prefix, metric and filter.

A task is not a benchmark: MMLU's 57 subjects, the leaderboard v2 groups' subtasks and a group's members
fold into one benchmark whose item ids carry the subtask, while truthfulqa's siblings and generative metrics
are deliberately not stored. The metric is the leaderboard's (:mod:`sparseeval.data.readers.metric_choice`), and
the filter the one the results report, else the task's first. These decisions need the whole run (its groups,
configs and reported metrics) but no sample, so they are made here, before any samples file is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparseeval.data.readers.lm_eval_results import HARNESS, Run, _metric_keys
from sparseeval.data.readers.metric_choice import is_score_metric, pick_metric, safe_benchmark, safe_task_benchmark
from sparseeval.data.tasks import TRUTHFULQA_SIBLINGS, harness_group, means_leaderboard


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

