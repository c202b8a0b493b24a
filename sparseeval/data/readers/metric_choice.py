"""Which metric of a harness's task is the benchmark's score, and which benchmark a task name stands for.

Both harnesses report many metrics per task (accuracies, normalised accuracies, generative similarities,
perplexities) under their own names; a score in the store is one number in [0, 1] per item, the one the
Open LLM Leaderboard used. The choice is made here once, so the lm-eval and lighteval readers (and the
exported lm-eval tasks, which must name the same metric) agree on it. Task names map to benchmarks
through :mod:`sparseeval.data.tasks`; here a bad name becomes an error against the file that holds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sparseeval.data.benchmarks import canonical_benchmark
from sparseeval.data.readers.base import InputError
from sparseeval.data.tasks import task_benchmark

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
