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

from sparseeval.data.benchmarks import DEFAULT_SETTINGS, MMLU_SUBJECTS, V2_GROUPS, split_variant
from sparseeval.data.tasks import (
    LIGHTEVAL_TASKS,
    MAPPED_SUITES,
    MMLU_PRO_SUBJECTS,
    means_leaderboard,
    split_lighteval_key,
    task_benchmark,
)

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
    name their member back: no two subtasks share an item id, and an item id ``<prefix>.<doc>`` leads
    (through :func:`sparseeval.estimate.artifact.harness_location`, what an exported anchor task runs) to a task
    of the same benchmark and prefix, at the same document."""
    from sparseeval.estimate.artifact import harness_location

    rel = releases()["lm-eval"][tag]
    for group in rel["groups"]:
        back: dict[tuple, str] = {}
        for task in sorted(leaves(rel, group)):
            bench, prefix = task_benchmark(task, "lm-eval")
            key = (bench, prefix if prefix is not None else task)  # a generic group's member keeps its name
            assert back.setdefault(key, task) == task, (group, task, back[key])
            if prefix is not None:  # a mapped subtask (MMLU subject, leaderboard v2 subtask, MMLU-Pro subject)
                located, doc = harness_location(bench, f"{prefix}.17")
                assert doc == 17 and located is not None, (group, task)
                assert task_benchmark(located, "lm-eval") == (bench, prefix), (group, task, located)
            elif bench == task and not means_leaderboard(group):  # folded into its group as <task>.<doc>
                assert harness_location(group, f"{task}.17") == (task, 17), (group, task)


# ------------------------------------------------------------------ through the readers and the store


def _write_group_run(folder: Path, group: str, subtasks: dict[str, list[float]]) -> Path:
    """A 0.4.3+ run of a user's group whose subtasks' samples have the same doc ids."""
    from bench.support.formats import _config, _entry, _mc_sample, _write_jsonl

    folder.mkdir(parents=True)
    date = "2025-01-02T03-04-05.000001"
    for task, values in subtasks.items():
        _write_jsonl(folder / f"samples_{task}_{date}.jsonl", [_mc_sample(d, {"acc": v}) for d, v in enumerate(values)])
    every = [v for values in subtasks.values() for v in values]
    data = {
        "results": {group: _entry(group, acc__none=sum(every) / len(every)),
                    **{t: _entry(t, acc__none=sum(v) / len(v)) for t, v in subtasks.items()}},
        "groups": {group: _entry(group, acc__none=sum(every) / len(every))},
        "group_subtasks": {group: list(subtasks), **{t: [] for t in subtasks}},
        "configs": {t: _config(t, ["acc"]) for t in subtasks},
        "n-shot": {t: 0 for t in subtasks},
        "n-samples": {t: {"original": len(v), "effective": len(v)} for t, v in subtasks.items()},
        "config": {"model": "hf", "model_args": "pretrained=org/m", "limit": None},
        "date": 1735787045.0, "model_name": "org/m", "lm_eval_version": "0.4.7",
    }
    (folder / f"results_{date}.json").write_text(json.dumps(data))
    return folder


def test_group_subtasks_never_share_an_item_id(tmp_path: Path) -> None:
    """A group holding ``quiz_a`` and ``a``: with the group's name cut off both were items ``a.<doc>``, and
    the second task's answers counted as already stored. The whole subtask name keeps them apart."""
    from sparseeval.data.readers.detect import read_source

    folder = _write_group_run(tmp_path / "org__m", "quiz", {"quiz_a": [1.0, 0.0], "a": [0.0, 0.0]})
    parsed = read_source(folder)
    rows = sorted(parsed.responses.select("benchmark", "item_id", "score").rows())
    assert rows == [("quiz", "a.0", 0.0), ("quiz", "a.1", 0.0), ("quiz", "quiz_a.0", 1.0), ("quiz", "quiz_a.1", 0.0)]
    assert {item.rsplit(".", 1)[0] for _, item, _ in rows} == {"quiz_a", "a"}  # each id names its subtask


def test_lm_eval_own_bbh_group_is_not_the_leaderboard_bbh(tmp_path: Path) -> None:
    """lm-eval's ``bbh`` group (CoT, 27 tasks) shares its name with the leaderboard's ``bbh``; its tasks
    are not the v2 group's, so each stays its own benchmark."""
    from sparseeval.data.readers.detect import read_source

    folder = _write_group_run(tmp_path / "org__m", "bbh", {"bbh_cot_fewshot_navigate": [1.0, 0.0],
                                                          "bbh_cot_fewshot_snarks": [1.0, 1.0]})
    parsed = read_source(folder)
    assert set(parsed.responses["benchmark"]) == {"bbh_cot_fewshot_navigate", "bbh_cot_fewshot_snarks"}
    assert set(parsed.scores["benchmark"]) == {"bbh_cot_fewshot_navigate", "bbh_cot_fewshot_snarks"}


def test_long_table_subtask_names_keep_the_subtask_in_the_item_id(tmp_path: Path) -> None:
    from sparseeval.data.readers.base import InputError
    from sparseeval.data.store import Store

    rows = ["model,benchmark,item_id,correct"]
    rows += [f"m{m},{b},{i},{(m + i) % 2}" for m in range(3)
             for b in ("mmlu_anatomy", "mmlu_professional_law", "arc_easy") for i in range(2)]
    table = tmp_path / "responses.csv"
    table.write_text("\n".join(rows) + "\n")
    store = Store(tmp_path / "s.duckdb")
    assert store.ingest(table).ok
    stored = store.query("SELECT DISTINCT benchmark, item_id FROM responses ORDER BY 1, 2").rows()
    assert stored == [("arc_easy", "0"), ("arc_easy", "1"), ("mmlu", "anatomy.0"), ("mmlu", "anatomy.1"),
                      ("mmlu", "professional_law.0"), ("mmlu", "professional_law.1")]
    scores = tmp_path / "scores" / "scores.csv"
    scores.parent.mkdir()
    scores.write_text("model,benchmark,score\nm0,mmlu_anatomy,0.5\n")
    from sparseeval.data.readers.detect import read_source
    from sparseeval.data.readers.validation import validate_results

    with pytest.raises(InputError, match="subtask 'anatomy' of 'mmlu': its score is not a mmlu score"):
        validate_results(read_source(scores), scores)


def test_lighteval_suites_and_subtasks_through_the_reader(tmp_path: Path) -> None:
    from sparseeval.data.readers.detect import read_source

    results = tmp_path / "org" / "m" / "results_2025-01-02T03-04-05.000001.json"
    results.parent.mkdir(parents=True)
    results.write_text(json.dumps({"config_general": {"model_name": "org/m", "lighteval_sha": "abc"}, "results": {
        "leaderboard|truthfulqa:mc|0": {"truthfulqa_mc1": 0.3, "truthfulqa_mc2": 0.45},
        "helm|truthfulqa|0": {"em": 0.2}, "lighteval|truthfulqa:gen|0": {"bleu_max": 20.0, "rouge1_acc": 0.4},
        "lighteval|gpqa:diamond|0": {"extractive_match": 0.3}, "lighteval|arc:easy|0": {"acc": 0.7}}}))
    parsed = read_source(results)
    got = dict(parsed.scores.select("benchmark", "score").rows())
    # truthfulqa is mc2 of the leaderboard's truthfulqa:mc; HELM's and the generative one are others
    assert got == {"truthfulqa": 0.45, "helm|truthfulqa": 0.2, "arc:easy": 0.7}
    assert any(n.part.endswith("lighteval|truthfulqa:gen|0") and n.status == "skipped" for n in parsed.notes)
    assert ("skipped", "gpqa is the group of its subtasks; lighteval|gpqa:diamond|0 alone give no gpqa score: "
                       "not stored") in [(n.status, n.reason) for n in parsed.notes]


@pytest.mark.parametrize("tag", lm_eval_releases())
def test_every_mapped_task_maps_back_to_itself(tag: str) -> None:
    """Export writes an item back as (lm-eval task, doc): every task of the release that lands on a
    leaderboard benchmark comes back as itself (leaderboard_ifeval, the copy of ifeval, as ifeval)."""
    from sparseeval.data.tasks import harness_task
    from sparseeval.estimate.artifact import harness_location

    checked = 0
    for task in releases()["lm-eval"][tag]["tasks"]:
        bench, prefix = task_benchmark(task, "lm-eval")
        if bench not in LEADERBOARD:
            continue
        back = harness_task(bench, prefix)
        assert back == task or (task, back) == ("leaderboard_ifeval", "ifeval"), task
        item = f"{prefix}.7" if prefix is not None else "7"
        assert harness_location(f"{bench}@0shot", item) == (back, 7)
        checked += 1
    assert checked >= 57 + 6  # the subjects; arc_challenge, hellaswag, winogrande, gsm8k, truthfulqa_mc2, ifeval


def test_leaderboard_v2_tasks_are_the_harness_leaderboard_group() -> None:
    from sparseeval.data.tasks import LEADERBOARD_V2_TASKS

    assert leaves(releases()["lm-eval"]["v0.4.12"], "leaderboard") == LEADERBOARD_V2_TASKS
