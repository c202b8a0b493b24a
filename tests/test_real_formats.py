"""Issue 8: result files as people have them: every harness layout, detected by content, read per
(model, task, run) with the refused/skipped parts as notes, and the evaluation settings as data.

Files under ``fixtures/real_formats`` are real outputs (see its README for provenance and licences);
the other layouts are built by ``bench.support.formats`` in the shapes the tools' writers produce.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from bench.support.formats import (
    LFS_POINTER_TEXT,
    LIGHTEVAL_DATE_ID,
    write_lighteval_output,
    write_lm_eval_040,
    write_python_api_dump,
    write_truthfulqa_group,
    write_v2_bbh_separate,
    write_v2_details,
)
from sparseeval.data.benchmarks import MMLU_SUBJECTS
from sparseeval.data.readers.base import InputError
from sparseeval.data.readers.detect import detect_format, discover, iter_sources, read_source
from sparseeval.data.tasks import task_benchmark

REAL = Path(__file__).resolve().parent / "fixtures" / "real_formats"
SETTINGS = ["task", "n_shot", "metric", "filter", "harness", "harness_version", "limit", "run_at"]


def canon(frame: pl.DataFrame, *extra: str) -> list[tuple]:
    cols = [c for c in ("benchmark", "item_id", "score") if c in frame.columns]
    return sorted(frame.select(*cols, *extra).rows())


def settings(frame: pl.DataFrame) -> list[tuple]:
    return sorted(frame.select("benchmark", *SETTINGS).unique().rows(), key=str)


# ------------------------------------------------------------------------------------- names


@pytest.mark.parametrize(("task", "expected"), [
    ("mmlu:abstract_algebra|5", ("mmlu", "abstract_algebra")),
    ("leaderboard|mmlu:anatomy|5", ("mmlu", "anatomy")),
    ("harness|hendrycksTest-virology|5", ("mmlu", "virology")),
    ("arc:challenge|25", ("arc", None)),
    ("gsm8k_test|0", ("gsm8k_test", None)),  # never a benchmark named "0"
    ("lighteval|gsm8k|5", ("gsm8k", None)),
    ("leaderboard_bbh_navigate", ("bbh", "navigate")),
    ("leaderboard_math_algebra_hard", ("math_hard", "algebra")),
    ("leaderboard_gpqa_diamond", ("gpqa", "diamond")),
    ("leaderboard_musr_team_allocation", ("musr", "team_allocation")),
    ("leaderboard_mmlu_pro", ("mmlu_pro", None)),
    ("leaderboard_ifeval", ("ifeval", None)),
    ("truthfulqa_mc2", ("truthfulqa", None)),
])
def test_task_names_map_to_one_benchmark(task: str, expected: tuple) -> None:
    assert task_benchmark(task) == expected


# ---------------------------------------------------------------------------------- lm-eval real


def test_real_lm_eval_0_4_13_dummy_run() -> None:
    """Written by lm-eval 0.4.13 itself (dummy model, local toy tasks; README)."""
    folder = REAL / "lm_eval_0.4.13" / "dummy"
    assert detect_format(folder) == "lm-eval"
    parsed = read_source(folder)
    assert parsed.format == "lm-eval-0.4.3+" and parsed.notes == []
    assert set(parsed.responses["model"]) == {"jt8a2350"}  # the dummy model's random name, as written
    group = [(f"toy_a.{d}", 0.0) for d in range(6)] + [(f"toy_b.{d}", 1.0 if d == 1 else 0.0) for d in range(6)]
    assert canon(parsed.responses) == sorted([("toy_group", i, s) for i, s in group]
                                             + [("toy_gen", str(d), 0.0) for d in range(6)])
    run_at = datetime(2026, 12, 3, 6, 24, 47, 26380)  # results "date" (unix), naive UTC
    assert settings(parsed.responses) == [
        ("toy_gen", "toy_gen", 3, "exact_match", "strict-match", "lm-eval", "0.4.13", None, run_at),
        ("toy_group", "toy_group", 3, "acc", "none", "lm-eval", "0.4.13", None, run_at)]
    assert canon(parsed.scores, *SETTINGS) == [
        ("toy_gen", 0.0, "toy_gen", 3, "exact_match", "strict-match", "lm-eval", "0.4.13", None, run_at),
        ("toy_group", 0.08333333333333333, "toy_group", 3, "acc", "none", "lm-eval", "0.4.13", None, run_at)]


def test_real_lm_eval_limit_run_keeps_responses_not_score() -> None:
    parsed = read_source(REAL / "lm_eval_0.4.13_limit" / "dummy")
    assert parsed.scores.height == 0
    assert canon(parsed.responses, "limit") == [("toy_a", str(d), 0.0, 3.0) for d in range(3)]
    assert [(n.status, n.reason) for n in parsed.notes] == [
        ("skipped", "run used --limit 3: its aggregate is not a benchmark score (responses kept)")]


def test_real_lm_eval_contradicting_aggregate_is_refused(tmp_path: Path) -> None:
    folder = shutil.copytree(REAL / "lm_eval_0.4.13" / "dummy", tmp_path / "dummy")
    results = next(folder.glob("results_*.json"))
    data = json.loads(results.read_text())
    data["results"]["toy_gen"]["exact_match,strict-match"] = 0.99
    results.write_text(json.dumps(data))
    parsed = read_source(folder)
    assert set(parsed.scores["benchmark"]) == {"toy_group"}
    assert [(n.part, n.status, n.reason) for n in parsed.notes] == [
        (f"{results}: toy_gen", "refused", "aggregate exact_match,strict-match = 0.99 of task toy_gen contradicts "
                                           "its 6 samples (mean 0): score not stored")]
    assert parsed.responses.height == 18  # the responses stay


def test_real_lm_eval_0_3_pythia_files() -> None:
    """Pythia's published v0.3 results (Apache-2.0): plain metric keys, one file per checkpoint."""
    path = REAL / "pythia_v0.3" / "bloom-560m.json"
    assert detect_format(path) == "lm-eval"
    parsed = read_source(path)
    assert parsed.format == "lm-eval-0.3" and parsed.responses.height == 0
    raw = json.loads(path.read_text())["results"]
    mmlu = sum(raw[f"hendrycksTest-{s}"]["acc"] for s in MMLU_SUBJECTS) / 57  # unweighted subject mean
    got = {b: s for b, s in parsed.scores.select("benchmark", "score").rows()}
    assert got == {"arc": raw["arc_challenge"]["acc_norm"], "arc_easy": raw["arc_easy"]["acc"],
                   "lambada_openai": raw["lambada_openai"]["acc"], "logiqa": raw["logiqa"]["acc"],
                   "mmlu": pytest.approx(mmlu, abs=1e-12), "piqa": raw["piqa"]["acc"], "sciq": raw["sciq"]["acc"],
                   "winogrande": raw["winogrande"]["acc"], "wsc": raw["wsc"]["acc"]}
    assert round(got["mmlu"], 6) == 0.241918
    assert settings(parsed.scores.filter(pl.col("benchmark").is_in(["arc", "mmlu"]))) == [
        ("arc", "arc_challenge", 0, "acc_norm", None, "lm-eval", None, None, None),
        ("mmlu", "hendrycksTest", 0, "acc", None, "lm-eval", None, None, None)]
    step = read_source(REAL / "pythia_v0.3" / "160m-5shot_step103000.json")
    # revision=step103000 is a training checkpoint: part of the model's name; 5-shot from config
    assert step.scores.filter(pl.col("benchmark") == "arc").select("model", "score", "n_shot").rows() == [
        ("EleutherAI/pythia-v1.1-160m@step103000", 0.2235494880546075, 5)]


# ------------------------------------------------------------------------------- lm-eval built


def test_lm_eval_0_4_0_layout_json_array_samples_without_filter(tmp_path: Path) -> None:
    folder = write_lm_eval_040(tmp_path / "out")
    renamed = folder / "arc.json"  # detected by content, whatever the file is called
    (folder / "results.json").rename(renamed)
    assert detect_format(renamed) == "lm-eval" and iter_sources(tmp_path) == [folder]
    parsed = read_source(folder)
    assert parsed.format == "lm-eval-0.4.0" and parsed.notes == []
    m = "org/old-7b"
    assert sorted(parsed.responses.select("model", "benchmark", "item_id", "score").rows()) == sorted([
        (m, "arc", "0", 1.0), (m, "arc", "1", 1.0), (m, "arc", "2", 0.0), (m, "arc", "3", 0.0),  # acc_norm
        (m, "gsm8k", "0", 1.0), (m, "gsm8k", "1", 0.0), (m, "gsm8k", "2", 0.0)])  # 1st occurrence = strict-match
    at = datetime(2024, 3, 1)
    assert canon(parsed.scores, *SETTINGS) == [
        ("arc", 0.5, "arc_challenge", 25, "acc_norm", "none", "lm-eval", "git:4600d6b", None, at),
        ("gsm8k", 0.3333, "gsm8k", 5, "exact_match", "strict-match", "lm-eval", "git:4600d6b", None, at)]
    alone = read_source(renamed)  # the results file alone still finds its own run's samples
    assert alone.responses.height == 7


def test_python_api_dump_with_embedded_samples(tmp_path: Path) -> None:
    path = write_python_api_dump(tmp_path / "gsm8k.json")
    assert detect_format(path) == "lm-eval"
    parsed = read_source(path)
    assert parsed.format == "lm-eval-python-api"
    at = datetime(2024, 6, 1)
    assert canon(parsed.responses) == [("hellaswag", "0", 1.0), ("hellaswag", "1", 1.0), ("hellaswag", "2", 0.0)]
    assert canon(parsed.scores, *SETTINGS) == [
        ("hellaswag", 0.6667, "hellaswag", 10, "acc_norm", "none", "lm-eval", "0.4.8", None, at)]


def test_truthfulqa_group_stores_mc2_and_notes_the_rest(tmp_path: Path) -> None:
    folder = write_truthfulqa_group(tmp_path)
    parsed = read_source(folder)
    assert canon(parsed.responses) == [("truthfulqa", "0", 0.8), ("truthfulqa", "1", 0.4)]
    assert canon(parsed.scores, "task", "metric", "run_at") == [
        ("truthfulqa", 0.6, "truthfulqa_mc2", "acc", datetime(2024, 9, 10, 8, 15))]
    assert sorted((Path(n.part).name, n.status, n.reason) for n in parsed.notes) == [
        ("samples_truthfulqa_gen_2024-09-10T08-15-00.jsonl", "skipped",
         "generative metric bleu_max is not a score: truthfulqa uses mc2"),
        ("samples_truthfulqa_mc1_2024-09-10T08-15-00.jsonl", "skipped",
         "truthfulqa_mc1 is not stored: truthfulqa uses mc2")]


def test_lfs_pointer_refuses_that_task_alone_and_missing_samples_are_said(tmp_path: Path) -> None:
    folder = write_truthfulqa_group(tmp_path)
    mc2 = next(folder.glob("samples_truthfulqa_mc2_*.jsonl"))
    mc2.write_text(LFS_POINTER_TEXT)
    parsed = read_source(folder)
    assert parsed.responses.height == 0 and canon(parsed.scores) == [("truthfulqa", 0.6)]
    assert [(n.part, n.reason) for n in parsed.refused_parts] == [(str(mc2), "Git LFS pointer: run `git lfs pull`")]
    mc2.unlink()
    parsed = read_source(folder)
    assert canon(parsed.scores) == [("truthfulqa", 0.6)]
    assert parsed.refused_parts == [] and [n.reason for n in parsed.notes if n.status == "skipped"][-1] == (
        "no samples file of task truthfulqa_mc2: no per-item rows of it")  # absent, not bad: a results-only run
    only = tmp_path / "lfs.json"
    only.write_text(LFS_POINTER_TEXT)
    _, notes = discover(tmp_path)
    lfs = [(n.part, n.status, n.reason) for n in notes]
    assert lfs == [(str(only), "refused", "Git LFS pointer: run `git lfs pull`")]


def test_results_file_alone_ignores_other_runs(tmp_path: Path) -> None:
    folder = write_truthfulqa_group(tmp_path)
    results = next(folder.glob("results_*.json"))
    other = folder / "samples_truthfulqa_mc2_2023-01-01T00-00-00.jsonl"
    other.write_text("{broken\n")  # another run's broken samples beside it
    parsed = read_source(results)
    assert canon(parsed.responses) == [("truthfulqa", "0", 0.8), ("truthfulqa", "1", 0.4)]
    assert parsed.refused_parts == []


def test_v2_groups_one_benchmark_whatever_the_layout(tmp_path: Path) -> None:
    grouped = read_source(write_v2_details(tmp_path / "a"))
    separate = read_source(write_v2_bbh_separate(tmp_path / "b"))
    assert set(grouped.responses.filter(pl.col("benchmark") == "bbh")["task"]) == {"leaderboard_bbh"}
    assert set(separate.responses["benchmark"]) == {"bbh"} and separate.responses.height == 48
    assert separate.responses.filter(pl.col("item_id").str.starts_with("navigate.")).select(
        "item_id", "score").sort("item_id").rows() == [("navigate.0", 1.0), ("navigate.1", 1.0)]
    # no leaderboard_bbh aggregate: the size-weighted mean of the 24 subtasks (36 of 48 right)
    assert canon(separate.scores, "task", "n_shot", "metric") == [("bbh", 0.75, "leaderboard_bbh", 3, "acc_norm")]


# ----------------------------------------------------------------------------------- lighteval


def test_lighteval_current_layout_details_and_results(tmp_path: Path) -> None:
    root = write_lighteval_output(tmp_path / "out")
    units, notes = discover(root)
    details, results = root / "details" / "org" / "lite-1b", root / "results" / "org" / "lite-1b"
    assert units == [details, results] and notes == []
    at = datetime(2025, 2, 11, 9, 30, 12, 345678)
    d = read_source(details)
    assert d.format == "lighteval-details"
    assert canon(d.responses, "model", *SETTINGS) == [
        ("gsm8k", "0", 0.0, "org/lite-1b", "gsm8k|0", 0, "extractive_match", None, "lighteval", "a1b2c3d", None, at),
        ("gsm8k", "1", 1.0, "org/lite-1b", "gsm8k|0", 0, "extractive_match", None, "lighteval", "a1b2c3d", None, at),
        ("gsm8k", "2", 1.0, "org/lite-1b", "gsm8k|0", 0, "extractive_match", None, "lighteval", "a1b2c3d", None, at),
        ("mmlu", "abstract_algebra.0", 1.0, "org/lite-1b", "mmlu:*|5", 5, "acc", None, "lighteval", "a1b2c3d",
         None, at),
        ("mmlu", "abstract_algebra.1", 0.0, "org/lite-1b", "mmlu:*|5", 5, "acc", None, "lighteval", "a1b2c3d",
         None, at)]
    assert d.scores.height == 0  # the results folder is its own unit
    r = read_source(results)
    assert r.format == "lighteval-results"
    assert canon(r.scores, "task", "n_shot", "metric") == [("gsm8k", 0.6667, "gsm8k|0", 0, "extractive_match")]
    assert [(n.status, n.reason) for n in r.notes] == [
        ("skipped", "mmlu score needs all 57 subjects' aggregates (1 present): not stored")]


def test_lighteval_max_samples_is_a_limit(tmp_path: Path) -> None:
    root = write_lighteval_output(tmp_path, max_samples=10)
    with pytest.raises(InputError, match="gsm8k: run used max_samples=10: its aggregate is not a benchmark score"):
        read_source(root / "results" / "org" / "lite-1b" / f"results_{LIGHTEVAL_DATE_ID}.json")
    details = read_source(root / "details" / "org" / "lite-1b")  # responses kept, with the limit
    assert set(details.responses["limit"]) == {10.0} and details.responses.height == 5


def test_lighteval_suite_keys_never_become_shot_counts(tmp_path: Path) -> None:
    path = tmp_path / "anything.json"
    results = {"leaderboard|arc:challenge|25": {"acc": 0.5, "acc_norm": 0.55},
               "lighteval|gsm8k_test|0": {"qem": 0.25}, "all": {"acc": 0.5}}
    path.write_text(json.dumps({"config_general": {"model_name": "o/m", "lighteval_sha": "s"}, "results": results}))
    parsed = read_source(path)
    assert canon(parsed.scores, "task", "n_shot", "metric") == [
        ("arc", 0.55, "leaderboard|arc:challenge|25", 25, "acc_norm"),
        ("gsm8k_test", 0.25, "lighteval|gsm8k_test|0", 0, "qem")]


# ----------------------------------------------------------------------------------- discovery


def test_discover_guarantees(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="empty folder"):
        discover(empty)
    src = tmp_path / "src"
    src.mkdir()
    pl.DataFrame({"model": ["a/b"], "benchmark": ["arc"], "item_id": ["1"], "correct": [1]}).write_parquet(
        src / "responses.parquet")
    # long tables named like harness files: decided by content
    (src / "results_x.csv").write_text("model,benchmark,item_id,correct\na/b,hellaswag,1,0\n")
    pl.DataFrame({"model": ["a/b"], "benchmark": ["gsm8k"], "item_id": ["1"], "correct": [1]}).write_parquet(
        src / "details_x.parquet")
    write_python_api_dump(src / "api.json")  # beside the long folder: its own unit
    (src / "notes.md").write_text("x")
    (src / "junk.json").write_text("{\"a\": 1}")
    sub = src / "sub"
    sub.mkdir()
    write_truthfulqa_group(sub)
    os.symlink(src, sub / "loop")  # a symlink loop: noted, never walked twice
    bad = os.fsencode(str(src)) + b"/bad\xff.csv"
    with open(bad, "wb") as fh:
        fh.write(b"model,benchmark,item_id,correct\n")
    units, notes = discover(src)
    assert units == sorted([src, src / "api.json", src / "details_x.parquet", src / "results_x.csv",
                            sub / "org__tqa-3b"])
    got = sorted((n.status, n.reason) for n in notes)
    assert got == sorted([
        ("refused", "JSON that is neither lm-eval nor lighteval results nor samples"),
        ("refused", "file name is not valid UTF-8: rename it"),
        ("skipped", "documentation / not a results file"),
        ("skipped", "symlink loop: folder already visited")])
    formats = {u.name: read_source(u).format for u in units if u != src}
    assert formats == {"api.json": "lm-eval-python-api", "details_x.parquet": "long", "results_x.csv": "long",
                       "org__tqa-3b": "lm-eval-0.4.3+"}


# ---------------------------------------------------- issue 21: real folders through the store


def _stored(folder: Path, db: Path) -> dict[str, tuple[float, int | None, str]]:
    """Ingest ``folder`` through the real store into a fresh DuckDB; benchmark -> (score, n_shot, task)."""
    from sparseeval.data.store import Store

    store = Store(db)
    report = store.ingest(folder)
    assert report.ok, [(f.path, f.status, f.reason) for f in report.files]
    rows = store.query("SELECT s.benchmark, s.score, u.n_shot, u.task FROM scores s JOIN runs u USING (run_id)").rows()
    assert len({r[0] for r in rows}) == len(rows)
    return {b: (s, n, t) for b, s, n, t in rows}


def _mmlu_mean(results: dict) -> float:
    """The leaderboard's MMLU: the unweighted mean of the 57 subjects' accuracies, as written in the file."""
    return sum(results[f"mmlu_{s}"]["acc,none"] for s in MMLU_SUBJECTS) / len(MMLU_SUBJECTS)


def test_real_lm_eval_mmlu_57_subjects_no_phantom_mmlu_pro(tmp_path: Path) -> None:
    """The reported bug on a file published by others (lm-eval PR 2809, Qwen2.5-1.5B, README): its 4
    ``mmlu_professional_*`` subjects were taken for MMLU-Pro by prefix, so a phantom ``mmlu_pro`` score
    (= professional_law's accuracy) was stored and MMLU refused as "53 subjects present"."""
    folder = REAL / "lm_eval_pr2809_qwen" / "Qwen__Qwen2.5-1.5B"
    raw = json.loads(next(folder.glob("results_*.json")).read_text())["results"]
    assert {f"mmlu_{s}" for s in MMLU_SUBJECTS} <= raw.keys() and "mmlu_professional_law" in raw
    parsed = read_source(folder)
    assert [(n.status, n.reason) for n in parsed.notes] == [("skipped", "generative metric mcc is not a score")]
    got = _stored(folder, tmp_path / "s.duckdb")
    assert not any(b.startswith("mmlu_pro") for b in got)
    # 0-shot runs: the leaderboard benchmarks are stored as their 0-shot variants, never as the plain name
    expected = {"arc@0shot": raw["arc_challenge"]["acc_norm,none"],
                "hellaswag@0shot": raw["hellaswag"]["acc_norm,none"],
                "winogrande@0shot": raw["winogrande"]["acc,none"], "mmlu@0shot": _mmlu_mean(raw),
                "arc_easy": raw["arc_easy"]["acc,none"]}  # arc_easy is not arc
    expected |= {t: raw[t]["acc,none"] for t in ("lambada_openai", "mnli", "mnli_mismatch", "mrpc", "piqa", "qnli",
                                                  "qqp", "rte", "sciq", "sst2", "wnli")}
    assert {b: s for b, (s, _, _) in got.items()} == pytest.approx(expected, abs=1e-12)
    assert got["mmlu@0shot"][1:] == (0, "mmlu") and got["arc@0shot"][1:] == (0, "arc_challenge")
    assert round(got["mmlu@0shot"][0], 6) == 0.613236


def test_lm_eval_0_4_2_layout_of_the_same_run(tmp_path: Path) -> None:
    """The same real numbers in the 0.4.0-0.4.2 layout (``results.json``: no ``n-samples``, no
    ``model_name``), as the issue reported it: MMLU with its 57 subjects, no mmlu_pro."""
    source = json.loads(next((REAL / "lm_eval_pr2809_qwen" / "Qwen__Qwen2.5-1.5B").glob("results_*.json")).read_text())
    keep = ("results", "groups", "group_subtasks", "versions", "n-shot", "config", "git_hash", "date")
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({k: source[k] for k in keep}))
    parsed = read_source(folder)
    assert parsed.format == "lm-eval-0.4.0"
    got = _stored(folder, tmp_path / "s.duckdb")
    assert got["mmlu@0shot"][0] == pytest.approx(_mmlu_mean(source["results"]), abs=1e-12)
    assert not any(b.startswith("mmlu_pro") for b in got)


def test_real_lm_eval_results_dump_of_a_script(tmp_path: Path) -> None:
    """lm-eval PR 2809's rwkv7 run (README): a script's own JSON of simple_evaluate's ``results`` (``model``,
    ``tasks``, ``num_fewshot``, ``results``), MMLU only."""
    folder = REAL / "lm_eval_pr2809_rwkv7" / "VisualRWKV__rwkv7-pile"
    raw = json.loads(next(folder.glob("*.json")).read_text())
    got = _stored(folder, tmp_path / "s.duckdb")
    assert got == {"mmlu@0shot": (pytest.approx(_mmlu_mean(raw["results"]), abs=1e-12), 0, "mmlu")}


def test_real_lm_eval_translated_leaderboard_task_is_its_own_benchmark(tmp_path: Path) -> None:
    """lm-eval PR 2232 (README): ``leaderboard_arabic_copa_light`` is an Arabic leaderboard's task, not a v2
    group nor a leaderboard benchmark."""
    folder = REAL / "lm_eval_pr2232_arabic" / "TinyLlama__TinyLlama-1.1B-Chat-v1.0"
    raw = json.loads(next(folder.glob("results_*.json")).read_text())["results"]
    got = _stored(folder, tmp_path / "s.duckdb")
    assert got == {"leaderboard_arabic_copa_light": (raw["leaderboard_arabic_copa_light"]["acc,none"], 0,
                                                     "leaderboard_arabic_copa_light")}


def test_real_lm_eval_0_3_llama_folder(tmp_path: Path) -> None:
    """EleutherAI's own published llama-7B results (lm-eval ``results/llama/llama-7B``, README): MMLU split
    per subject (``hendrycksTest-*``, 5-shot), xwinograd in six languages, common-sense tasks, 0-shot."""
    folder = REAL / "lm_eval_results_2023_llama"
    raw: dict = {}
    for file in sorted(folder.glob("*.json")):
        raw |= json.loads(file.read_text())["results"]
    got = _stored(folder, tmp_path / "s.duckdb")
    mmlu = sum(raw[f"hendrycksTest-{s}"]["acc"] for s in MMLU_SUBJECTS) / len(MMLU_SUBJECTS)
    expected = {"mmlu": (mmlu, 5, "hendrycksTest"), "arc@0shot": (raw["arc_challenge"]["acc_norm"], 0, "arc_challenge"),
                "hellaswag@0shot": (raw["hellaswag"]["acc_norm"], 0, "hellaswag"),
                "winogrande@0shot": (raw["winogrande"]["acc"], 0, "winogrande"),
                "arc_easy": (raw["arc_easy"]["acc"], 0, "arc_easy")}
    expected |= {f"xwinograd_{lang}": (raw[f"xwinograd_{lang}"]["acc"], 0, f"xwinograd_{lang}")
                 for lang in ("en", "fr", "jp", "pt", "ru", "zh")}  # not winogrande
    assert {b: got[b][1:] for b in expected} == {b: e[1:] for b, e in expected.items()}
    assert {b: got[b][0] for b in expected} == pytest.approx({b: e[0] for b, e in expected.items()}, abs=1e-12)
    assert set(got) - set(expected) == {"boolq", "copa", "mc_taco", "openbookqa", "piqa", "prost", "swag", "wsc273"}


def test_real_open_llm_leaderboard_v2_groups(tmp_path: Path) -> None:
    """The Open LLM Leaderboard's own v2 run of pythia-1b (README: an extract of its results): each v2
    group is one benchmark scored by the group's aggregate, MMLU-Pro is leaderboard_mmlu_pro, and the
    ``leaderboard`` group of groups (0.2964, a mean of different metrics) is never a benchmark."""
    folder = REAL / "open_llm_leaderboard_v2_pythia1b" / "EleutherAI__pythia-1b"
    raw = json.loads(next(folder.glob("results_*.json")).read_text())["results"]
    got = _stored(folder, tmp_path / "s.duckdb")
    assert got == {
        "bbh": (raw["leaderboard_bbh"]["acc_norm,none"], None, "leaderboard_bbh"),
        "gpqa": (raw["leaderboard_gpqa"]["acc_norm,none"], None, "leaderboard_gpqa"),
        "math_hard": (raw["leaderboard_math_hard"]["exact_match,none"], None, "leaderboard_math_hard"),
        "musr": (raw["leaderboard_musr"]["acc_norm,none"], None, "leaderboard_musr"),
        "ifeval": (raw["leaderboard_ifeval"]["prompt_level_strict_acc,none"], None, "leaderboard_ifeval"),
        "mmlu_pro": (raw["leaderboard_mmlu_pro"]["acc,none"], None, "leaderboard_mmlu_pro")}
