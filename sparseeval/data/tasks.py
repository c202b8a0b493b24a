"""One benchmark definition: a task as a harness ran it -> (benchmark, item-id prefix).

Every reader (lm-eval of every version, lighteval results and details, leaderboard v1/v2 files, long
tables) asks :func:`task_benchmark`. A task maps onto a leaderboard benchmark only by an **exact** name
listed here, each taken from the harness's own definitions (lm-eval's task YAMLs and their ``group`` /
``task`` lists, lighteval's task tables); never by a prefix or a substring. That is the whole point: by
prefix, ``mmlu_professional_law`` (an MMLU subject) looked like MMLU-Pro, and every ``mmlu_*`` task of
any other family (``mmlu_de_llama_*``, ``mmlu_flan_*``) folded into MMLU with colliding item ids.

* A task of a benchmark made of subtasks (the 57 MMLU subjects, the v2 groups' subtasks, MMLU-Pro's 14
  subjects in lm-eval) maps to (benchmark, subtask): its item ids become ``<subtask>.<doc_id>``, so the
  items of two subtasks never merge.
* A whole-benchmark task maps to (benchmark, None).
* Anything else keeps its own name: (task, None). A lighteval task keeps its suite
  (``helm|truthfulqa``, ``original|mmlu:anatomy``, ``harness|bigbench:navigate``) unless the suite is
  lighteval's default one: two suites define different tasks under one name, and HELM's truthfulqa is
  not the leaderboard's.

The n-shot count and metric are not part of the name: :func:`sparseeval.data.benchmarks.variant_name` turns a
run under other settings into a variant (``arc@0shot``, ``mmlu_pro:exact_match``) of the benchmark given
here, so one task run by lighteval and by lm-eval lands on one benchmark, a settings variant at most.

``tests/fixtures/tasks/task_names.json.gz`` (extracted by ``bench/extract_task_names.py`` from the
harness releases) checks these tables against every task and group name the harnesses define.
"""

from __future__ import annotations

from sparseeval.data.benchmarks import LEADERBOARD_ALIASES, MMLU_SUBJECTS, V2_GROUPS, canonical_benchmark

#: lm-eval's ``mmlu_pro`` group (0.4.3+): its 14 subject tasks ``mmlu_pro_<subject>``.
MMLU_PRO_SUBJECTS: tuple[str, ...] = (
    "biology", "business", "chemistry", "computer_science", "economics", "engineering", "health", "history",
    "law", "math", "other", "philosophy", "physics", "psychology")

#: MMLU's four category groups (lm-eval ``mmlu_stem`` ...): aggregates of subjects, never leaf tasks.
MMLU_CATEGORIES: tuple[str, ...] = ("mmlu_stem", "mmlu_humanities", "mmlu_other", "mmlu_social_sciences")

#: lighteval suites whose tasks are the leaderboard's (v1 details ``harness|...``, ``leaderboard|...``) or
#: lighteval's own defaults; from 0.11 the keys carry no suite ("").
MAPPED_SUITES = frozenset({"", "leaderboard", "lighteval", "harness", "extended"})
#: suites whose other tasks are stored under their bare name (lighteval's default suite, which 0.11+ keys
#: drop, so ``lighteval|arc:easy|0`` and ``arc:easy|0`` meet); other suites keep ``suite|task``
OWN_NAME_SUITES = frozenset({"", "lighteval"})
#: every suite lighteval's tables use (a key's first field is a suite only when it is one of these)
LIGHTEVAL_SUITES = MAPPED_SUITES | frozenset({"helm", "original", "custom", "community", "extended", "bigbench",
                                             "bigbench_lite", "bigbench_json", "test"})


def _lm_eval_tasks() -> dict[str, tuple[str, str | None]]:
    table: dict[str, tuple[str, str | None]] = {
        "arc_challenge": ("arc", None),
        "hellaswag": ("hellaswag", None),
        "winogrande": ("winogrande", None),
        "gsm8k": ("gsm8k", None),
        "truthfulqa_mc2": ("truthfulqa", None),
        "truthfulqa_mc": ("truthfulqa", None),  # 0.3: one task reporting mc1 and mc2
        "ifeval": ("ifeval", None),
        "leaderboard_ifeval": ("ifeval", None),
        "leaderboard_mmlu_pro": ("mmlu_pro", None),
    }
    for subject in MMLU_SUBJECTS:
        table[f"mmlu_{subject}"] = ("mmlu", subject)  # 0.4: members of mmlu_<category> -> mmlu
        table[f"hendrycksTest-{subject}"] = ("mmlu", subject)  # 0.3 and the leaderboard v1's harness
    for subject in MMLU_PRO_SUBJECTS:
        table[f"mmlu_pro_{subject}"] = ("mmlu_pro", subject)
    for bench, (_, prefix, suffix, subtasks) in V2_GROUPS.items():
        for sub in subtasks:
            table[f"{prefix}{sub}{suffix}"] = (bench, sub)
    return table


def _lm_eval_groups() -> dict[str, str]:
    groups = {"mmlu": "mmlu", "hendrycksTest": "mmlu", "mmlu_pro": "mmlu_pro"}
    groups.update({group: bench for bench, (group, *_) in V2_GROUPS.items()})
    return groups


def _lighteval_tasks() -> dict[str, tuple[str, str | None]]:
    table: dict[str, tuple[str, str | None]] = {
        "arc:challenge": ("arc", None),
        "hellaswag": ("hellaswag", None),
        "winogrande": ("winogrande", None),
        "gsm8k": ("gsm8k", None),
        "truthfulqa:mc": ("truthfulqa", None),
        "ifeval": ("ifeval", None),
        "mmlu_pro": ("mmlu_pro", None),
    }
    for subject in MMLU_SUBJECTS:
        table[f"mmlu:{subject}"] = ("mmlu", subject)
        table[f"hendrycksTest-{subject}"] = ("mmlu", subject)  # leaderboard v1 ``harness|hendrycksTest-*``
    for sub in V2_GROUPS["gpqa"][3]:
        table[f"gpqa:{sub}"] = ("gpqa", sub)
    for sub in V2_GROUPS["musr"][3]:
        table[f"musr:{sub}"] = ("musr", sub)
    return table


#: lm-eval task name -> (benchmark, item prefix): exact names only
LM_EVAL_TASKS: dict[str, tuple[str, str | None]] = _lm_eval_tasks()
#: lm-eval groups whose aggregate is a leaderboard benchmark's score: group -> benchmark
LM_EVAL_GROUPS: dict[str, str] = _lm_eval_groups()
#: lighteval task name (without suite and shot count) -> (benchmark, item prefix), for MAPPED_SUITES
LIGHTEVAL_TASKS: dict[str, tuple[str, str | None]] = _lighteval_tasks()
#: the tasks under lm-eval's ``leaderboard`` group (Open LLM Leaderboard v2): its files' task names
LEADERBOARD_V2_TASKS: frozenset[str] = frozenset(
    {"leaderboard_ifeval", "leaderboard_mmlu_pro"}
    | {f"{prefix}{sub}{suffix}" for _, prefix, suffix, subs in V2_GROUPS.values() for sub in subs})
#: benchmarks whose items are all ``<subtask>.<doc>`` of the harness's tasks (or one whole task's docs)
SUBTASK_BENCHMARKS = frozenset({"mmlu", "mmlu_pro", *V2_GROUPS})
#: members of lm-eval's ``truthfulqa`` tag besides mc2: deliberately not stored (truthfulqa is mc2)
TRUTHFULQA_SIBLINGS = frozenset({"truthfulqa_mc1", "truthfulqa_gen", "truthfulqa:gen"})

_LEADERBOARD_NAMES = frozenset(a.lower() for aliases in LEADERBOARD_ALIASES.values() for a in aliases) | frozenset(
    LEADERBOARD_ALIASES)


def split_lighteval_key(key: str) -> tuple[str, str, int | None]:
    """``leaderboard|mmlu:anatomy|5`` -> ("leaderboard", "mmlu:anatomy", 5); ``gsm8k|0`` -> ("", "gsm8k", 0);
    a plain name -> ("", name, None)."""
    parts = key.strip().split("|")
    shots = None
    if len(parts) >= 2 and parts[-1].strip().isdigit():
        shots = int(parts[-1])
        parts = parts[:-1]
    suite = ""
    if len(parts) >= 2 and parts[0].strip().lower() in LIGHTEVAL_SUITES:
        suite, parts = parts[0].strip().lower(), parts[1:]
    return suite, "|".join(parts).strip(), shots


def task_benchmark(task: str, harness: str | None = None) -> tuple[str, str | None]:
    """A task name as a harness wrote it -> (benchmark, item-id prefix).

    ``harness`` is ``"lm-eval"``, ``"lighteval"`` or None (a long table: the names of either). lm-eval
    names and lighteval keys (``suite|task|nshot``) do not overlap except where they mean the same task
    (``gsm8k``, ``hellaswag``, ``winogrande``, ``ifeval``), so None looks in both tables.
    Unknown tasks keep their own name (checked by :func:`~sparseeval.data.benchmarks.canonical_benchmark`:
    blank or control-character names are refused).
    """
    name = task.strip()
    if harness != "lighteval" and name in LM_EVAL_TASKS:
        return LM_EVAL_TASKS[name]
    if harness != "lighteval" and name in LM_EVAL_GROUPS and harness == "lm-eval":
        return LM_EVAL_GROUPS[name], None
    if harness != "lm-eval":
        suite, bare, _ = split_lighteval_key(name)
        if suite in MAPPED_SUITES and bare in LIGHTEVAL_TASKS:
            return LIGHTEVAL_TASKS[bare]
        if suite and (suite not in OWN_NAME_SUITES or means_leaderboard(bare)):
            # two suites define different tasks under one name (helm|blimp:x, lighteval|blimp:x), and
            # lighteval|gpqa or helm|truthfulqa are not the leaderboard's gpqa / truthfulqa: keep the suite
            return canonical_benchmark(f"{suite}|{bare}"), None
        name = bare
    return canonical_benchmark(name), None


def means_leaderboard(bare: str) -> bool:
    """A bare name that would read as a leaderboard benchmark (its alias, or one of our mapped tasks)."""
    return bare.lower() in _LEADERBOARD_NAMES or bare in LIGHTEVAL_TASKS or bare in LM_EVAL_TASKS


def is_group(task: str) -> bool:
    """An lm-eval group whose results entry aggregates other tasks (no samples of its own): the
    leaderboard groups and MMLU's categories. Other groups are known from a run's own ``groups`` key."""
    return task in LM_EVAL_GROUPS or task in MMLU_CATEGORIES or task == "leaderboard"


def harness_group(benchmark: str) -> str | None:
    """The lm-eval group whose aggregate is ``benchmark``'s score (``bbh`` -> ``leaderboard_bbh``)."""
    return next((g for g, b in LM_EVAL_GROUPS.items() if b == benchmark and g != "hendrycksTest"), None)


def _by_space() -> dict[tuple[str, str | None], str]:
    spaces: dict[tuple[str, str | None], str] = {}
    for task, space in LM_EVAL_TASKS.items():  # first wins: arc_challenge, mmlu_<subject> (not hendrycksTest-)
        spaces.setdefault(space, task)
    return spaces


_LM_EVAL_BY_SPACE = _by_space()


def harness_task(benchmark: str, prefix: str | None) -> str | None:
    """The lm-eval task whose items are ``benchmark``'s items ``<prefix>.<doc>`` (the inverse of
    :func:`task_benchmark`): ("mmlu", "anatomy") -> ``mmlu_anatomy``, ("mmlu_pro", "law") -> ``mmlu_pro_law``,
    ("arc", None) -> ``arc_challenge``; None where no lm-eval task is the harness's for it."""
    return _LM_EVAL_BY_SPACE.get((benchmark, prefix))
