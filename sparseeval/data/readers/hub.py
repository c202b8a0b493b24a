"""File patterns of leaderboard details repositories: the files one benchmark needs.

A v1 details repo holds every task of every run; these allow-patterns name the aggregate results
plus the few parquet (v1) or samples (v2) files of the wanted benchmarks (``SPARSEEVAL_HUB_TASKS``,
:func:`task_patterns`, what :mod:`sparseeval.data.access.hub_sources` uses). Downloading is not done here:
:mod:`sparseeval.data.access.hub_sources` is the one place that fetches Hub repos (incrementally, pinned to a
commit), and a downloaded or local folder is read by :mod:`sparseeval.data.readers.detect`.
"""

from __future__ import annotations

from collections.abc import Iterable

from sparseeval.data.tasks import LEADERBOARD_V2_TASKS, LM_EVAL_TASKS, task_benchmark

#: v1 details task keys per canonical benchmark (file names ``details_<key>_<date>.parquet``)
V1_TASK_KEYS: dict[str, str] = {
    "arc": "harness|arc:challenge|25",
    "hellaswag": "harness|hellaswag|10",
    "mmlu": "harness|hendrycksTest-",
    "truthfulqa": "harness|truthfulqa:mc|0",
    "winogrande": "harness|winogrande|5",
    "gsm8k": "harness|gsm8k|5",
}


#: the aggregate results files of every layout (fetched whatever tasks are wanted: they are small)
RESULTS_PATTERNS = ("results_*.json", "*/results_*.json")


def details_patterns(benchmarks: Iterable[str] | None, *, layout: str = "v1") -> list[str] | None:
    """Allow-patterns for ``snapshot_download``: the aggregate results plus the wanted tasks' files.

    ``layout="v1"`` maps canonical names through :data:`V1_TASK_KEYS` (others are used as the task key);
    ``layout="v2"`` matches the ``samples_<task>_*`` files of the benchmark's exact lm-eval tasks
    (:mod:`sparseeval.data.tasks`). None means everything.
    """
    if benchmarks is None:
        return None
    patterns = list(RESULTS_PATTERNS)
    for bench in benchmarks:
        if layout == "v1":
            key = V1_TASK_KEYS.get(bench, bench)
            patterns.append(f"*details_{key}*.parquet")
        elif layout == "v2":  # the exact task names of the benchmark (math_hard's files are math_<sub>_hard)
            patterns += [f"*samples_{t}_*.jsonl" for t in _v2_tasks(bench)] or [f"*samples_{bench}_*.jsonl"]
        else:
            raise ValueError(f"unknown layout {layout!r}: use 'v1' or 'v2'")
    return patterns


def _v2_tasks(bench: str) -> list[str]:
    """The leaderboard v2 lm-eval tasks of a benchmark (none for a name that is not one)."""
    base = task_benchmark(bench, "lm-eval")[0]
    return sorted(t for t in LEADERBOARD_V2_TASKS if LM_EVAL_TASKS[t][0] == base)


def _literal(name: str) -> str:
    """``name`` as a glob that matches only itself (a ``[`` in a task name is not a character class)."""
    return name.replace("[", "[[]")


def task_patterns(tasks: Iterable[str]) -> dict[str, list[str]]:
    """Per wanted task, the globs of its files in any of the three layouts a Hub source may hold.

    A task is a leaderboard benchmark (``arc``, ``mmlu``, ``bbh``: its v1 task key and exact lm-eval
    task names), an lm-eval task name, or a glob of them (``toy_*``: a group's samples files are named
    by its subtasks, so a group is named by a glob over them). The aggregate ``results_*.json`` are not
    in here: a refresh always fetches them (:data:`RESULTS_PATTERNS`).
    """
    out: dict[str, list[str]] = {}
    for task in tasks:
        glob = task if any(c in task for c in "*?") else _literal(task)
        known = ([f"*details_{V1_TASK_KEYS[task]}*.parquet"] if task in V1_TASK_KEYS else []) + [
            f"*samples_{t}_*.jsonl" for t in _v2_tasks(task)]
        out[task] = [*known, f"*details_{glob}_*.parquet", f"*samples_{glob}_*.jsonl"]
    return out
