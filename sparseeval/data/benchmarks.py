"""Benchmark names: open-ended, with known aliases for the six Open LLM Leaderboard v1 benchmarks.

Any non-blank name is a valid benchmark (a user's own lm-eval task brings its own name); the aliases
only fold the many spellings of the leaderboard benchmarks (harness task names, leaderboard
``harness|arc:challenge|25`` keys) onto one canonical name so data from different sources meets.
A name carries at most a settings variant (``arc@0shot``); the metric is settings data, never a suffix.
"""

from __future__ import annotations

import re

from sparseeval.core.errors import UserError
from sparseeval.data.names import MAX_NAME, slug

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
    # Open LLM Leaderboard v2 (lm-eval ``leaderboard_*`` groups): one base benchmark per group
    "bbh": ("bbh", "leaderboard_bbh"),
    "gpqa": ("gpqa", "leaderboard_gpqa"),
    "math_hard": ("math_hard", "leaderboard_math_hard", "math-hard", "math_lvl5"),
    "musr": ("musr", "leaderboard_musr"),
    "ifeval": ("ifeval", "leaderboard_ifeval", "leaderboard_instruction_following"),
    "mmlu_pro": ("mmlu_pro", "leaderboard_mmlu_pro", "mmlu-pro"),
}

#: The 57 MMLU subjects (lm-eval ``mmlu_<subject>``, v0.3 ``hendrycksTest-<subject>``, lighteval
#: ``mmlu:<subject>``). The MMLU score is the leaderboard's unweighted mean over all of them.
MMLU_SUBJECTS: tuple[str, ...] = (
    "abstract_algebra", "anatomy", "astronomy", "business_ethics", "clinical_knowledge", "college_biology",
    "college_chemistry", "college_computer_science", "college_mathematics", "college_medicine",
    "college_physics", "computer_security", "conceptual_physics", "econometrics", "electrical_engineering",
    "elementary_mathematics", "formal_logic", "global_facts", "high_school_biology", "high_school_chemistry",
    "high_school_computer_science", "high_school_european_history", "high_school_geography",
    "high_school_government_and_politics", "high_school_macroeconomics", "high_school_mathematics",
    "high_school_microeconomics", "high_school_physics", "high_school_psychology", "high_school_statistics",
    "high_school_us_history", "high_school_world_history", "human_aging", "human_sexuality",
    "international_law", "jurisprudence", "logical_fallacies", "machine_learning", "management", "marketing",
    "medical_genetics", "miscellaneous", "moral_disputes", "moral_scenarios", "nutrition", "philosophy",
    "prehistory", "professional_accounting", "professional_law", "professional_medicine",
    "professional_psychology", "public_relations", "security_studies", "sociology", "us_foreign_policy",
    "virology", "world_religions",
)

#: Open LLM Leaderboard v2 groups whose subtasks fold into one base benchmark: benchmark -> (lm-eval
#: group, subtask prefix, subtask suffix, subtasks). ``leaderboard_bbh_navigate`` is bbh item ids
#: ``navigate.<doc_id>``; ``leaderboard_math_algebra_hard`` is math_hard ids ``algebra.<doc_id>``.
V2_GROUPS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "bbh": ("leaderboard_bbh", "leaderboard_bbh_", "", (
        "boolean_expressions", "causal_judgement", "date_understanding", "disambiguation_qa",
        "formal_fallacies", "geometric_shapes", "hyperbaton", "logical_deduction_five_objects",
        "logical_deduction_seven_objects", "logical_deduction_three_objects", "movie_recommendation",
        "navigate", "object_counting", "penguins_in_a_table", "reasoning_about_colored_objects", "ruin_names",
        "salient_translation_error_detection", "snarks", "sports_understanding", "temporal_sequences",
        "tracking_shuffled_objects_five_objects", "tracking_shuffled_objects_seven_objects",
        "tracking_shuffled_objects_three_objects", "web_of_lies")),
    "gpqa": ("leaderboard_gpqa", "leaderboard_gpqa_", "", ("diamond", "extended", "main")),
    "math_hard": ("leaderboard_math_hard", "leaderboard_math_", "_hard", (
        "algebra", "counting_and_prob", "geometry", "intermediate_algebra", "num_theory", "prealgebra",
        "precalculus")),
    "musr": ("leaderboard_musr", "leaderboard_musr_", "", ("murder_mysteries", "object_placements",
                                                            "team_allocation")),
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

#: The settings a benchmark's plain name stands for (the Open LLM Leaderboard's): few-shot count and
#: the metric names that mean its score (harnesses name the same score differently: lm-eval's
#: ``truthfulqa_mc2`` reports ``acc`` for what the leaderboard calls ``mc2``). A run under any other
#: n-shot or metric is stored as a variant (:func:`variant_name`), never pooled with the plain name.
#: Benchmarks not listed here: the plain name means 0-shot or unspecified, and any metric (the
#: task's own primary one). The metric names of a set are one score under the names lm-eval and lighteval
#: give it (:func:`same_metric`); they are never part of a stored name.
DEFAULT_SETTINGS: dict[str, tuple[int, frozenset[str]]] = {
    "arc": (25, frozenset({"acc_norm", "loglikelihood_acc_norm", "loglikelihood_acc_norm_nospace"})),
    "hellaswag": (10, frozenset({"acc_norm", "loglikelihood_acc_norm"})),
    "mmlu": (5, frozenset({"acc", "loglikelihood_acc"})),
    "truthfulqa": (0, frozenset({"mc2", "acc", "truthfulqa_mc2"})),
    "winogrande": (5, frozenset({"acc", "loglikelihood_acc"})),
    "gsm8k": (5, frozenset({"exact_match", "acc", "em", "quasi_em", "qem", "extractive_match"})),
    # Open LLM Leaderboard v2 (lm-eval ``leaderboard`` group settings)
    "bbh": (3, frozenset({"acc_norm"})),
    "gpqa": (0, frozenset({"acc_norm"})),
    "math_hard": (4, frozenset({"exact_match"})),
    "musr": (0, frozenset({"acc_norm"})),
    "ifeval": (0, frozenset({"prompt_level_strict_acc"})),
    "mmlu_pro": (5, frozenset({"acc"})),
}

#: Metric names a ``<benchmark>:<metric>`` variant may carry: the harnesses' per-item score metrics. Only
#: these make ``x:y`` a variant, because harness task names use ``:`` too: lighteval's ``arc:easy`` and
#: ``truthfulqa:gen`` are other tasks, not arc scored by "easy" (tests check every lighteval task name).
METRIC_NAMES: frozenset[str] = frozenset({
    "acc", "acc_norm", "acc_mutual_info", "mc1", "mc2", "exact_match", "em", "qem", "quasi_em", "pem", "pqem",
    "f1", "quasi_exact_match", "prefix_exact_match", "prefix_quasi_exact_match", "extractive_match",
    "loglikelihood_acc", "loglikelihood_acc_norm", "loglikelihood_acc_norm_nospace",
    "loglikelihood_acc_norm_single_token",
    "loglikelihood_acc_single_token", "loglikelihood_f1", "truthfulqa_mc1", "truthfulqa_mc2", "mcc", "brier_score",
    "prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc",
    "expr_gold_metric", "gpqa_instruct_metric", "gpqa_instruct_pass_at_1_1n",
    "multi_f1_numeric", "target_perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte",
}) | frozenset(m for _, metrics in DEFAULT_SETTINGS.values() for m in metrics)

_VARIANT_RE = re.compile(r"^(?P<base>.+?)@(?P<shots>\d+)shot(?::(?P<metric>[^:@]+))?$"
                         r"|^(?P<base2>.+?):(?P<metric2>[^:@|]+)$")


_ALIAS_TO_CANONICAL = {alias.lower(): canonical for canonical, aliases in LEADERBOARD_ALIASES.items()
                       for alias in aliases}


class BenchmarkNameError(UserError, ValueError):
    """A benchmark name that cannot name anything: empty, blank or with control characters."""


def default_n_shot(benchmark: str) -> int:
    """The few-shot count the plain name of ``benchmark`` stands for (0 when none is registered)."""
    return DEFAULT_SETTINGS.get(benchmark, (0, frozenset()))[0]


def variant_name(benchmark: str, n_shot: int | None = None, metric: str | None = None) -> str:
    """The stored benchmark name for ``benchmark`` run with ``n_shot`` examples: a settings variant at most.

    The plain name when the few-shot count is the benchmark's default (or unknown), else
    ``<benchmark>@<n>shot`` (``variant_name("arc", 0)`` is ``arc@0shot``). The metric is never part of
    the name: it is settings data kept with every row (``runs.metric``), so lighteval's ``gsm8k`` scored
    ``qem`` meets lm-eval's ``gsm8k``, and a predictor trained on another metric refuses the answers
    (:func:`same_metric`) as it refuses another few-shot count. ``metric`` is accepted and ignored.
    """
    del metric
    default_shots = DEFAULT_SETTINGS.get(benchmark, (0, frozenset()))[0]
    if n_shot is not None and int(n_shot) != default_shots:
        return f"{benchmark}@{int(n_shot)}shot"
    return benchmark


def same_metric(benchmark: str, a: str | None, b: str | None) -> bool:
    """Whether metrics ``a`` and ``b`` score ``benchmark`` alike: the same name, or two of the names the
    harnesses give the benchmark's own score (lm-eval's ``exact_match`` and lighteval's ``qem`` for
    gsm8k). An unknown metric (None: a table that does not say) is taken at its word."""
    if a is None or b is None or a == b:
        return True
    names = DEFAULT_SETTINGS.get(split_variant(benchmark)[0], (0, frozenset()))[1]
    return a in names and b in names


def split_variant(name: str) -> tuple[str, int | None, str | None]:
    """``arc@0shot:acc`` -> ("arc", 0, "acc"); a plain name -> (name, None, None)."""
    m = _VARIANT_RE.match(name)
    if not m:
        return name, None, None
    if m["base"] is not None:
        return m["base"], int(m["shots"]), m["metric"]
    if m["metric2"] not in METRIC_NAMES:  # a task name with a colon (lighteval ``arc:easy``), not a variant
        return name, None, None
    return m["base2"], None, m["metric2"]


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
    if len(stripped) > MAX_NAME:  # MLflow keeps it in 500-character fields (input tags, dataset names)
        raise BenchmarkNameError(f"benchmark name {stripped[:40]!r}... is {len(stripped)} characters long; "
                                 f"at most {MAX_NAME} are stored")
    if "@" in stripped or (":" in stripped and "|" not in stripped and stripped.lower() not in _ALIAS_TO_CANONICAL):
        base, shots, metric = split_variant(stripped)
        if base != stripped and "@" not in base and ":" not in base:  # a variant: canonical base + settings
            canonical = canonical_benchmark(base)
            if shots is not None or canonical in DEFAULT_SETTINGS:  # "x:y" of an unknown x is just a name
                return variant_name(canonical, shots, metric)
    key = stripped.lower()
    # leaderboard keys carry a shot count: "harness|arc:challenge|25"
    key = re.sub(r"\|\d+$", "", key)
    if key in _ALIAS_TO_CANONICAL:
        return _ALIAS_TO_CANONICAL[key]
    return stripped  # exact aliases only: a task of a benchmark is sparseeval.data.tasks' job, never a prefix


#: the joint predictor's name: its published folder, its DuckDB benchmark key (and ``<name>/<output>``
#: for its comparison rows), and its registry entry
JOINT_NAME = "sparseeval-joint"


def registered_model_name(benchmark: str) -> str:
    """Registry name of a benchmark's predictor (``sparseeval-<slug>``: MLflow names hold no ``/`` or
    ``:``, see :mod:`sparseeval.data.names`); the joint predictor's is its own name. Here, not in
    :mod:`sparseeval.publish.tracking`, so that name checks need no MLflow."""
    return benchmark if benchmark == JOINT_NAME else f"sparseeval-{slug(benchmark)}"


def joint_name_clashes(benchmarks: list[str]) -> list[str]:
    """Benchmarks whose published names are the joint predictor's: its folder and DuckDB key
    (``sparseeval-joint``, and ``sparseeval-joint/...`` for its comparison rows) or its registry entry
    (a benchmark ``joint`` is registered as ``sparseeval-joint``). Compared without case, as on a
    case-insensitive file system."""
    joint_entry = registered_model_name(JOINT_NAME)
    return [b for b in benchmarks
            if b.lower() == JOINT_NAME or b.lower().startswith(JOINT_NAME + "/")
            or registered_model_name(b).lower() == joint_entry]


def joint_benchmarks(requested: str, available: list[str]) -> list[str]:
    """The benchmarks a joint predictor spans, from the ``SPARSEEVAL_JOINT_BENCHMARKS`` setting.

    Empty: every available benchmark that is not a settings variant (``arc@0shot`` is the same
    benchmark as ``arc`` run another way: both in one joint set would count it twice). ``none``: no
    joint predictor. Otherwise the listed names (aliases allowed); a listed benchmark that is not
    available is an error, not silently dropped. With the joint predictor on, a benchmark in the data
    whose published names are the joint predictor's (:func:`joint_name_clashes`) is an error too: the
    two would overwrite each other's folder, registry versions and DuckDB rows.
    """
    text = requested.strip()
    if text.lower() == "none":
        return []
    clashes = joint_name_clashes(available)
    if clashes:
        raise BenchmarkNameError(
            f"benchmark {', '.join(map(repr, clashes))} would be published under the joint predictor's names "
            f"(folder, registry entry and DuckDB key {JOINT_NAME!r}), and one would overwrite the other; "
            f"rename that benchmark, or set SPARSEEVAL_JOINT_BENCHMARKS=none to turn the joint predictor off")
    if not text:
        return sorted(b for b in available if split_variant(b)[0] == b)
    wanted = [canonical_benchmark(b) for b in text.split(",") if b.strip()]
    missing = [b for b in wanted if b not in available]
    if missing:
        raise BenchmarkNameError(f"joint benchmarks not in the data: {', '.join(missing)} "
                                 f"(available: {', '.join(sorted(available))})")
    return sorted(dict.fromkeys(wanted))
