"""Benchmark names: open-ended, with known aliases for the six Open LLM Leaderboard v1 benchmarks.

Any non-blank name is a valid benchmark (a user's own lm-eval task brings its own name); the aliases
only fold the many spellings of the leaderboard benchmarks (harness task names, leaderboard
``harness|arc:challenge|25`` keys) onto one canonical name so data from different sources meets.
"""

from __future__ import annotations

import re

#: canonical name -> spellings seen in lm-evaluation-harness, leaderboard details and papers.
LEADERBOARD_ALIASES: dict[str, tuple[str, ...]] = {
    "arc": ("arc", "arc_challenge", "arc-challenge", "arc:challenge", "ai2_arc", "harness|arc:challenge"),
    "hellaswag": ("hellaswag", "hella_swag", "harness|hellaswag"),
    "mmlu": ("mmlu", "hendrycks_test", "hendrycks", "harness|hendrycksTest", "hendryckstest"),
    "truthfulqa": (
        "truthfulqa",
        "truthfulqa_mc2",
        "truthfulqa_mc",
        "truthfulqa:mc",
        "truthful_qa",
        "harness|truthfulqa:mc",
    ),
    "winogrande": ("winogrande", "harness|winogrande"),
    "gsm8k": ("gsm8k", "harness|gsm8k"),
}

#: lm-evaluation-harness task names for the canonical leaderboard benchmarks (used by export).
HARNESS_TASKS: dict[str, str] = {
    "arc": "arc_challenge",
    "hellaswag": "hellaswag",
    "mmlu": "mmlu",
    "truthfulqa": "truthfulqa_mc2",
    "winogrande": "winogrande",
    "gsm8k": "gsm8k",
}

_ALIAS_TO_CANONICAL = {alias.lower(): canonical for canonical, aliases in LEADERBOARD_ALIASES.items()
                       for alias in aliases}


class BenchmarkNameError(ValueError):
    """A benchmark name that cannot name anything: empty, blank or with control characters."""


def canonical_benchmark(name: object) -> str:
    """Return the canonical name for ``name``; unknown names pass through (trimmed) unchanged.

    Raises :class:`BenchmarkNameError` for empty or blank names, non-strings and names with control
    characters, because such a name would silently merge or hide data in the store.
    """
    if not isinstance(name, str):
        raise BenchmarkNameError(f"benchmark name must be a string, got {type(name).__name__}")
    stripped = name.strip()
    if not stripped:
        raise BenchmarkNameError("benchmark name is empty or blank")
    if re.search(r"[\x00-\x1f\x7f]", stripped):
        raise BenchmarkNameError(f"benchmark name {stripped!r} contains control characters")
    key = stripped.lower()
    # leaderboard keys carry a shot count: "harness|arc:challenge|25"
    key = re.sub(r"\|\d+$", "", key)
    if key in _ALIAS_TO_CANONICAL:
        return _ALIAS_TO_CANONICAL[key]
    if key.startswith("mmlu_pro") or key.startswith("mmlu-pro"):
        return stripped  # MMLU-Pro is a different benchmark, not an MMLU subject
    if key.startswith(("mmlu_", "hendrycks_test-", "harness|hendrycks_test-", "harness|hendryckstest-")):
        return "mmlu"
    return stripped
