"""Fetch leaderboard details repositories with ``huggingface_hub`` and read them.

Downloads happen only when asked (never at import or test time) and only the files of the wanted
tasks: a v1 details repo holds every task of every run, and the allow-patterns keep a fetch to the
few parquet files one benchmark needs. A local folder with the same layout is read with no network.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import polars as pl

from sparseeval.readers.base import InputError, ParsedResults
from sparseeval.tasks import LEADERBOARD_V2_TASKS, LM_EVAL_TASKS, task_benchmark

#: v1 details task keys per canonical benchmark (file names ``details_<key>_<date>.parquet``)
V1_TASK_KEYS: dict[str, str] = {
    "arc": "harness|arc:challenge|25",
    "hellaswag": "harness|hellaswag|10",
    "mmlu": "harness|hendrycksTest-",
    "truthfulqa": "harness|truthfulqa:mc|0",
    "winogrande": "harness|winogrande|5",
    "gsm8k": "harness|gsm8k|5",
}


def details_patterns(benchmarks: Iterable[str] | None, *, layout: str = "v1") -> list[str] | None:
    """Allow-patterns for ``snapshot_download``: the aggregate results plus the wanted tasks' files.

    ``layout="v1"`` maps canonical names through :data:`V1_TASK_KEYS` (others are used as the task key);
    ``layout="v2"`` matches the ``samples_<task>_*`` files of the benchmark's exact lm-eval tasks
    (:mod:`sparseeval.tasks`). None means everything.
    """
    if benchmarks is None:
        return None
    patterns = ["results_*.json", "*/results_*.json"]
    for bench in benchmarks:
        if layout == "v1":
            key = V1_TASK_KEYS.get(bench, bench)
            patterns.append(f"*details_{key}*.parquet")
        elif layout == "v2":  # the exact task names of the benchmark (math_hard's files are math_<sub>_hard)
            base = task_benchmark(bench, "lm-eval")[0]
            tasks = sorted(t for t in LEADERBOARD_V2_TASKS if LM_EVAL_TASKS[t][0] == base)
            patterns += [f"*samples_{t}_*.jsonl" for t in tasks] or [f"*samples_{bench}_*.jsonl"]
        else:
            raise ValueError(f"unknown layout {layout!r}: use 'v1' or 'v2'")
    return patterns


def download_details(repo_id: str, *, cache_dir: str | Path, allow_patterns: list[str] | None = None,
                     revision: str | None = None, local_dir: str | Path | None = None) -> Path:
    """Download (or reuse from cache) a details dataset repo; returns the local folder."""
    from huggingface_hub import snapshot_download  # imported lazily: only a real download needs it

    folder = snapshot_download(
        repo_id=repo_id,
        repo_type="dataset",
        revision=revision,
        cache_dir=str(cache_dir),
        local_dir=str(local_dir) if local_dir is not None else None,
        allow_patterns=allow_patterns,
    )
    return Path(folder)


def load_details(repo_id_or_folder: str | Path, *, cache_dir: str | Path | None = None,
                 benchmarks: Iterable[str] | None = None, layout: str = "v1",
                 revision: str | None = None) -> ParsedResults:
    """Read a details repo: a local folder directly (no network), else download it first.

    A local folder may be a single unit or hold several (e.g. one sub-folder per model in v2); all
    units are read and concatenated. ``benchmarks`` (canonical names) limits what is returned, as the
    allow-patterns limit what is downloaded.
    """
    from sparseeval.readers.detect import iter_sources, read_source

    local = Path(repo_id_or_folder)
    if not local.exists():
        if cache_dir is None:
            raise ValueError(f"{repo_id_or_folder!r} is not a local folder and no cache_dir was given")
        local = download_details(str(repo_id_or_folder), cache_dir=cache_dir, revision=revision,
                                 allow_patterns=details_patterns(benchmarks, layout=layout))
    parsed = [read_source(unit) for unit in iter_sources(local)]
    if not parsed:
        raise InputError(local, "no results found in the downloaded or given folder")
    out = _concat(parsed)
    if benchmarks is not None:
        wanted = list(benchmarks)
        out.responses = out.responses.filter(pl.col("benchmark").is_in(wanted))
        out.scores = out.scores.filter(pl.col("benchmark").is_in(wanted))
    return out


def _concat(parts: list[ParsedResults]) -> ParsedResults:
    return ParsedResults(
        responses=pl.concat([p.responses for p in parts]),
        scores=pl.concat([p.scores for p in parts]),
        models=pl.concat([p.models for p in parts]).unique("model", keep="first", maintain_order=True),
        sources=[s for p in parts for s in p.sources],
    )
