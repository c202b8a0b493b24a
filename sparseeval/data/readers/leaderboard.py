"""Readers for Open LLM Leaderboard files: v1 details repos, aggregate results, v2 details.

v1 details repos (``details_<org>__<model>``) and aggregate results (``results_<date>.json`` with
``config_general``) were written by lighteval: :mod:`sparseeval.data.readers.lighteval` reads them (format
``leaderboard-details-v1`` / ``leaderboard-results`` when every task key is ``harness|...``).

v2 details are lm-evaluation-harness output (``samples_leaderboard_<task>_<date>.jsonl`` under
``<org>__<model>/``): :func:`read_details_v2` reads them with the lm-eval reader, which folds the v2 groups
into one base benchmark each (``bbh``, ``gpqa``, ``math_hard``, ``musr``, ``ifeval``, ``mmlu_pro``).
"""

from __future__ import annotations

from pathlib import Path

from sparseeval.data.readers.base import ParsedResults
from sparseeval.data.readers.lighteval import (
    is_lighteval_results,
    leaderboard_task,
    read_details_file,
    read_lighteval_details,
    read_lighteval_results,
    scores_from_results,
)
from sparseeval.data.readers.lm_eval import read_lm_eval
from sparseeval.data.readers.lm_eval_collect import is_v2_samples

__all__ = ["is_leaderboard_results", "leaderboard_task", "read_details_file", "read_details_v1",
           "read_details_v2", "read_leaderboard_results", "scores_from_results"]


def is_leaderboard_results(data: object) -> bool:
    """Leaderboard v1 / lighteval aggregate results carry ``config_general`` next to ``results``."""
    return is_lighteval_results(data)


def read_leaderboard_results(path: str | Path) -> ParsedResults:
    """Aggregate leaderboard (lighteval) results: one ``results_*.json`` or a folder of them."""
    return read_lighteval_results(path)


def read_details_v1(path: str | Path) -> ParsedResults:
    """A v1 details folder (``details_<org>__<model>``) or one details parquet."""
    return read_lighteval_details(path)


def read_details_v2(path: str | Path) -> ParsedResults:
    """Leaderboard v2 details: lm-eval output with ``leaderboard_*`` tasks."""
    parsed = read_lm_eval(path)
    if parsed.format and all(is_v2_samples(t) or t.startswith("results_")
                             for t in (p.name for p in parsed.sources)) and any(
            is_v2_samples(p.name) for p in parsed.sources):
        parsed.format = "leaderboard-details-v2"
    return parsed
