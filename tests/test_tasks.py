"""Issue 21: one benchmark definition, checked against every task and group name the harnesses define.

``fixtures/tasks/task_names.json.gz`` is extracted by ``bench/extract_task_names.py`` from the release tags
of lm-evaluation-harness (task YAMLs: tasks, groups and their members, tags) and lighteval (its task
tables); its README gives the provenance. The tests run the mapping over every name in it.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

from sparseeval.benchmarks import DEFAULT_SETTINGS, MMLU_SUBJECTS, V2_GROUPS, split_variant
from sparseeval.tasks import LIGHTEVAL_TASKS, MAPPED_SUITES, MMLU_PRO_SUBJECTS, split_lighteval_key, task_benchmark

NAMES = Path(__file__).resolve().parent / "fixtures" / "tasks" / "task_names.json.gz"
LEADERBOARD = set(DEFAULT_SETTINGS)  # the benchmarks with leaderboard settings: arc ... mmlu_pro

#: the only two tasks of one release that share a (benchmark, item space): versions of one task, as the
#: harness defines them (each pair is one dataset and one prompt, copied under another name)
SAME_TASK = {
    ("lm-eval", "ifeval"): {"ifeval", "leaderboard_ifeval"},  # the leaderboard group's copy of ifeval
}


@cache
def releases() -> dict:
    with gzip.open(NAMES, "rt") as fh:
        return json.load(fh)


def lm_eval_releases() -> list[str]:
    return list(releases()["lm-eval"])


def lighteval_releases() -> list[str]:
    return list(releases()["lighteval"])


def leaves(rel: dict, name: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """Every task under a group or tag, through nested groups and tags."""
    if name in seen:
        return set()
    members = rel["groups"].get(name) or rel["tags"].get(name)
    if members is None:
        return {name}
    return set().union(*(leaves(rel, m, seen | {name}) for m in members))


def test_provenance_and_size() -> None:
    data = releases()
    for harness, tags in (("lm-eval", ("v0.4.2", "v0.4.12")), ("lighteval", ("v0.3.0", "v0.8.0", "v0.13.0"))):
        for tag in tags:
            rel = data[harness][tag]
            assert rel["tag"] == tag and re.fullmatch(r"[0-9a-f]{40}", rel["commit"]) and rel["date"]
            assert rel["repo"].startswith("github.com/")
    assert len(data["lm-eval"]["v0.4.12"]["tasks"]) > 10_000 and len(data["lighteval"]["v0.8.0"]["tasks"]) > 1000


@pytest.mark.parametrize("tag", lm_eval_releases())
def test_lm_eval_mapping_is_injective(tag: str) -> None:
    spaces: dict[tuple, set[str]] = defaultdict(set)
    for task in releases()["lm-eval"][tag]["tasks"]:
        spaces[task_benchmark(task, "lm-eval")].add(task)
    shared = {key: tasks for key, tasks in spaces.items() if len(tasks) > 1}
    assert shared == {(b, None): SAME_TASK[("lm-eval", b)] for (h, b) in SAME_TASK
                      if h == "lm-eval" and SAME_TASK[(h, b)] <= set(releases()["lm-eval"][tag]["tasks"])}


@pytest.mark.parametrize("tag", lighteval_releases())
def test_lighteval_mapping_is_injective_and_never_a_variant(tag: str) -> None:
    spaces: dict[tuple, set[str]] = defaultdict(set)
    for task in releases()["lighteval"][tag]["tasks"]:
        bench, prefix = task_benchmark(task, "lighteval")
        spaces[(bench, prefix)].add(task)
        # a colon in a task name (arc:easy, truthfulqa:gen) never reads as <benchmark>:<metric>
        assert split_variant(bench) == (bench, None, None), task
    shared = {key: tasks for key, tasks in spaces.items() if len(tasks) > 1}
    # lighteval defines some leaderboard tasks in two suites (leaderboard|gsm8k, lighteval|gsm8k): the same
    # dataset and items, another prompt: one benchmark, a settings variant at most. Nothing else is shared.
    for (bench, _), tasks in shared.items():
        assert bench in LEADERBOARD, tasks
        assert {split_lighteval_key(t)[1] for t in tasks} == {next(split_lighteval_key(t)[1] for t in tasks)}


@pytest.mark.parametrize("tag", lm_eval_releases())
def test_lm_eval_right_parents(tag: str) -> None:
    """A task lands on a leaderboard benchmark only where the harness's own groups put it, and every
    member of those groups lands there, its subtask kept in the item id."""
    rel = releases()["lm-eval"][tag]
    groups = {"mmlu": "mmlu", "mmlu_pro": "mmlu_pro", **{g: b for b, (g, *_) in V2_GROUPS.items()}}
    members = {g: leaves(rel, g) for g in groups if g in rel["groups"]}
    whole = {"arc_challenge": "arc", "hellaswag": "hellaswag", "winogrande": "winogrande", "gsm8k": "gsm8k",
             "truthfulqa_mc2": "truthfulqa", "ifeval": "ifeval", "leaderboard_ifeval": "ifeval",
             "leaderboard_mmlu_pro": "mmlu_pro"}
    for task in rel["tasks"]:
        bench, prefix = task_benchmark(task, "lm-eval")
        if bench not in LEADERBOARD:
            continue
        if prefix is None:
            assert whole.get(task) == bench, task
        else:
            parents = [g for g, m in members.items() if task in m]
            assert [groups[g] for g in parents] == [bench], (task, parents)
    for group, tasks in members.items():
        for task in tasks:
            bench, prefix = task_benchmark(task, "lm-eval")
            assert bench == groups[group] and prefix is not None, task
    assert {task_benchmark(t, "lm-eval")[1] for t in members["mmlu"]} == set(MMLU_SUBJECTS)
    if "mmlu_pro" in members:
        assert {task_benchmark(t, "lm-eval")[1] for t in members["mmlu_pro"]} == set(MMLU_PRO_SUBJECTS)
    for group, _, _, subtasks in V2_GROUPS.values():
        if group in members:
            assert {task_benchmark(t, "lm-eval")[1] for t in members[group]} == set(subtasks)


def test_lm_eval_named_examples() -> None:
    rel = releases()["lm-eval"]["v0.4.12"]
    tasks = set(rel["tasks"])
    for subject in ("professional_law", "professional_medicine", "professional_accounting",
                    "professional_psychology"):
        assert task_benchmark(f"mmlu_{subject}", "lm-eval") == ("mmlu", subject)  # not MMLU-Pro
    assert task_benchmark("mmlu_pro_law", "lm-eval") == ("mmlu_pro", "law")
    assert task_benchmark("arc_easy", "lm-eval") == ("arc_easy", None)
    assert task_benchmark("truthfulqa_gen", "lm-eval") == ("truthfulqa_gen", None)
    translated = [t for t in tasks if re.fullmatch(r"(hellaswag|arc_challenge|arc_easy|mmlu|m_mmlu|truthfulqa)_"
                                                    r"(mt_)?[a-z]{2,3}(_.*)?", t)
                  and t not in {f"mmlu_{s}" for s in MMLU_SUBJECTS} and not t.startswith("mmlu_pro_")]
    assert len(translated) > 100  # hellaswag_de, arc_challenge_mt_fi, m_mmlu_fr, mmlu_de_llama_anatomy ...
    for task in translated:
        bench, prefix = task_benchmark(task, "lm-eval")
        assert (bench, prefix) == (task, None), task  # a translated variant is its own benchmark


def test_lighteval_right_parents() -> None:
    for tag, rel in releases()["lighteval"].items():
        for key in rel["tasks"]:
            bench, prefix = task_benchmark(key, "lighteval")
            suite, bare, _ = split_lighteval_key(key)
            if bench in LEADERBOARD:
                assert suite in MAPPED_SUITES and LIGHTEVAL_TASKS.get(bare) == (bench, prefix), (tag, key)
    assert task_benchmark("helm|truthfulqa|0", "lighteval") == ("helm|truthfulqa", None)
    assert task_benchmark("lighteval|gpqa|0", "lighteval") == ("lighteval|gpqa", None)  # not the v2 group
    assert task_benchmark("lighteval|truthfulqa:gen|0", "lighteval") == ("truthfulqa:gen", None)
    assert task_benchmark("lighteval|arc:easy|25", "lighteval") == ("arc:easy", None)
    assert task_benchmark("harness|bbh:navigate|3", "lighteval") == ("harness|bbh:navigate", None)
    assert task_benchmark("leaderboard|mmlu:professional_law|5", "lighteval") == ("mmlu", "professional_law")
    # the same leaderboard task from both harnesses: one benchmark (n-shot and metric make variants)
    assert task_benchmark("leaderboard|arc:challenge|25") == task_benchmark("arc_challenge") == ("arc", None)
    assert task_benchmark("gpqa:diamond|0") == task_benchmark("leaderboard_gpqa_diamond") == ("gpqa", "diamond")


@pytest.mark.parametrize("tag", lm_eval_releases())
def test_group_subtask_item_ids_round_trip(tag: str) -> None:
    """Within every group of the harness, the stored item-id prefixes of its members are distinct and
    name their member back: no two subtasks share an item id."""
    rel = releases()["lm-eval"][tag]
    for group in rel["groups"]:
        back: dict[tuple, str] = {}
        for task in sorted(leaves(rel, group)):
            bench, prefix = task_benchmark(task, "lm-eval")
            key = (bench, prefix if prefix is not None else task)  # a generic group's member keeps its name
            assert back.setdefault(key, task) == task, (group, task, back[key])
            item = f"{key[1]}.17"
            assert item.rsplit(".", 1)[0] == key[1]
