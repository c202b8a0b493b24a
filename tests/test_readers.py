"""Readers for lm-eval output, leaderboard details/results, detection and the hub loader (offline)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest
from fixtures.formats import (
    LM_EVAL_DATE_ID,
    V1_DATE_ID,
    write_details_parquet,
    write_lm_eval_run,
    write_v1_details,
    write_v2_details,
)

from sparseeval.readers.base import MODELS_SCHEMA, RESPONSES_SCHEMA, SCORES_SCHEMA, InputError
from sparseeval.readers.detect import detect_format, iter_sources, read_source
from sparseeval.readers.hub import details_patterns, load_details
from sparseeval.readers.leaderboard import read_details_v1, read_leaderboard_results
from sparseeval.readers.lm_eval import read_lm_eval

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "openllm_v1"


def rows(frame: pl.DataFrame) -> list[tuple]:
    return sorted(frame.rows())


def check_schemas(parsed) -> None:
    assert dict(parsed.responses.schema) == RESPONSES_SCHEMA
    assert dict(parsed.scores.schema) == SCORES_SCHEMA
    assert dict(parsed.models.schema) == MODELS_SCHEMA


# ------------------------------------------------------------------------------------------ lm-eval


def test_lm_eval_folder_exact(tmp_path: Path) -> None:
    folder = write_lm_eval_run(tmp_path)
    parsed = read_lm_eval(folder)
    check_schemas(parsed)
    m = "EleutherAI/pythia-160m"
    assert rows(parsed.responses) == sorted([
        # arc_challenge: acc_norm (the leaderboard's metric), not acc (the first in metric_list)
        (m, "arc", "0", 0.0), (m, "arc", "1", 1.0), (m, "arc", "2", 1.0), (m, "arc", "3", 0.0),
        # gsm8k: exact_match under strict-match (first filter), flexible-extract rows ignored
        (m, "gsm8k", "0", 0.0), (m, "gsm8k", "1", 1.0), (m, "gsm8k", "2", 0.0),
        # mmlu subtasks -> one benchmark, ids <subject>.<doc_id>
        (m, "mmlu", "abstract_algebra.0", 1.0), (m, "mmlu", "abstract_algebra.1", 0.0),
        (m, "mmlu", "anatomy.0", 0.0), (m, "mmlu", "anatomy.1", 1.0),
        (m, "mmlu", "formal_logic.0", 1.0), (m, "mmlu", "formal_logic.1", 1.0),
        # truthfulqa_mc2 -> truthfulqa, its per-doc mc2 value (key acc) kept as a fraction
        (m, "truthfulqa", "0", 0.75), (m, "truthfulqa", "1", 0.25),
        # a user's own task keeps its name; first metric of its metric_list
        (m, "my_task", "0", 1.0), (m, "my_task", "7", 0.0),
    ])
    assert rows(parsed.scores) == sorted([
        (m, "arc", 0.4321), (m, "gsm8k", 0.3333), (m, "mmlu", 0.6543),  # mmlu: the group's score
        (m, "truthfulqa", 0.4111), (m, "my_task", 0.5),
    ])
    assert parsed.models.rows() == [(m, datetime(2024, 5, 1, 12, 0, 0), 162322944.0, None)]
    assert {p.name for p in parsed.sources} >= {f"results_{LM_EVAL_DATE_ID}.json",
                                                f"samples_gsm8k_{LM_EVAL_DATE_ID}.jsonl"}


def test_lm_eval_model_from_model_args_and_adapter_base(tmp_path: Path) -> None:
    folder = write_lm_eval_run(tmp_path, model="me/adapter")
    results = folder / f"results_{LM_EVAL_DATE_ID}.json"
    data = json.loads(results.read_text())
    del data["model_name"]
    data["config"]["model_args"] = "pretrained=meta/base-7b,peft=me/adapter,dtype=bfloat16"
    results.write_text(json.dumps(data))
    parsed = read_lm_eval(folder)
    assert set(parsed.responses["model"]) == {"me/adapter"}
    assert parsed.models.select("model", "base_model").rows() == [("me/adapter", "meta/base-7b")]


def test_lm_eval_latest_run_wins_and_limit_drops_score(tmp_path: Path) -> None:
    write_lm_eval_run(tmp_path)
    later = "2024-06-01T08-00-00.000000"
    folder = write_lm_eval_run(tmp_path, date_id=later, date=1717228800.0, limit=True,
                               samples={"arc_challenge": [(0, {"acc": 0.0, "acc_norm": 1.0})]})
    parsed = read_lm_eval(folder)
    arc = parsed.responses.filter(pl.col("benchmark") == "arc").sort("item_id")
    assert arc["score"].to_list() == [1.0, 1.0, 1.0, 0.0]  # doc 0 replaced by the later run
    # the later run used --limit on arc: its aggregate is no benchmark score, the earlier one stays
    assert parsed.scores.filter(pl.col("benchmark") == "arc")["score"].to_list() == [0.4321]
    assert parsed.models["submitted_at"].to_list() == [datetime(2024, 5, 1, 12)]  # earliest run


def test_lm_eval_results_file_alone_gives_scores(tmp_path: Path) -> None:
    folder = write_lm_eval_run(tmp_path)
    for p in folder.glob("samples_*.jsonl"):
        p.unlink()
    results = folder / f"results_{LM_EVAL_DATE_ID}.json"
    assert detect_format(results) == "lm-eval"
    parsed = read_source(results)
    assert parsed.responses.height == 0
    assert dict(zip(parsed.scores["benchmark"], parsed.scores["score"], strict=True)) == {
        "arc": 0.4321, "gsm8k": 0.3333, "mmlu": 0.6543, "truthfulqa": 0.4111, "my_task": 0.5}


def _samples(folder: Path, task: str) -> Path:
    return folder / f"samples_{task}_{LM_EVAL_DATE_ID}.jsonl"


def test_broken_jsonl_line_names_file_and_line(tmp_path: Path) -> None:
    folder = write_lm_eval_run(tmp_path)
    path = _samples(folder, "arc_challenge")
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:40]  # truncated write
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        read_source(folder)
    assert err.value.path == str(path) and err.value.line == 3
    assert f"{path}, line 3" in str(err.value) and "invalid JSON" in str(err.value)


def test_missing_doc_id_and_missing_metric(tmp_path: Path) -> None:
    folder = write_lm_eval_run(tmp_path)
    path = _samples(folder, "mmlu_anatomy")
    objs = [json.loads(line) for line in path.read_text().splitlines()]
    del objs[1]["doc_id"]
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    with pytest.raises(InputError, match=r"line 2, column 'doc_id': missing or invalid 'doc_id'"):
        read_lm_eval(folder)
    objs[1]["doc_id"] = 1
    del objs[0]["acc"]
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    with pytest.raises(InputError) as err:
        read_lm_eval(folder)
    assert err.value.line == 1 and err.value.column == "acc" and "metric 'acc' missing" in str(err.value)
    assert err.value.path == str(path)


def test_duplicate_doc_id_and_out_of_range_metric(tmp_path: Path) -> None:
    folder = write_lm_eval_run(tmp_path)
    path = _samples(folder, "my_task")
    objs = [json.loads(line) for line in path.read_text().splitlines()]
    objs[1]["doc_id"] = 0
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    with pytest.raises(InputError, match=r"line 2: doc_id '0' appears twice"):
        read_lm_eval(folder)
    objs[1]["doc_id"], objs[1]["exact_match"] = 7, 3.5
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    with pytest.raises(InputError, match=r"line 2, column 'exact_match'.*not a score in \[0, 1\]"):
        read_lm_eval(folder)


def test_broken_results_json_names_line(tmp_path: Path) -> None:
    folder = write_lm_eval_run(tmp_path)
    results = folder / f"results_{LM_EVAL_DATE_ID}.json"
    text = results.read_text().splitlines()
    results.write_text("\n".join(text[:5]))
    with pytest.raises(InputError) as err:
        read_lm_eval(folder)
    assert err.value.path == str(results) and err.value.line is not None


# ------------------------------------------------------------------------------------ leaderboard v1


def test_v1_details_exact(tmp_path: Path) -> None:
    repo = write_v1_details(tmp_path)
    assert detect_format(repo) == "leaderboard-details-v1"
    parsed = read_source(repo)
    check_schemas(parsed)
    m = "org/model-7b"
    assert rows(parsed.responses) == sorted([
        (m, "arc", "0", 0.0), (m, "arc", "1", 1.0), (m, "arc", "2", 1.0),  # acc_norm
        (m, "mmlu", "anatomy.0", 1.0), (m, "mmlu", "anatomy.1", 0.0),  # acc; row index = doc id
        (m, "mmlu", "virology.0", 0.0), (m, "mmlu", "virology.1", 1.0),
        (m, "truthfulqa", "0", 0.4), (m, "truthfulqa", "1", 0.9),  # mc2
        (m, "gsm8k", "0", 0.0), (m, "gsm8k", "1", 1.0), (m, "gsm8k", "2", 1.0),
    ])
    got = {b: round(s, 6) for _, b, s in parsed.scores.rows()}
    assert got == {"arc": 0.6012, "mmlu": 0.6, "truthfulqa": 0.4567, "gsm8k": 0.2123}  # mmlu: subject mean
    assert parsed.models.rows() == [(m, datetime(2023, 9, 3, 10, 57, 4, 203304), None, None)]


def test_v1_latest_run_and_string_metrics(tmp_path: Path) -> None:
    repo = write_v1_details(tmp_path)
    later = "2023-12-01T00-00-00.000000"
    (repo / later).mkdir()
    write_details_parquet(repo / later / f"details_harness|arc:challenge|25_{later}.parquet",
                          [{"acc": 0.0, "acc_norm": 0.0}] * 3, as_string=True)
    arc = read_details_v1(repo).responses.filter(pl.col("benchmark") == "arc")
    assert arc["score"].to_list() == [0.0, 0.0, 0.0]


def test_v1_truncated_parquet_and_null_metric(tmp_path: Path) -> None:
    repo = write_v1_details(tmp_path)
    path = repo / V1_DATE_ID / f"details_harness|gsm8k|5_{V1_DATE_ID}.parquet"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as err:
        read_source(repo)
    assert err.value.path == str(path) and "cannot read parquet" in str(err.value)
    write_details_parquet(path, [{"acc": 1.0}, {"acc": None}])
    with pytest.raises(InputError, match=r"gsm8k\|5_.*column 'metrics': row 1: metric 'acc' is None"):
        read_source(repo)


def test_leaderboard_results_file_and_folder(tmp_path: Path) -> None:
    repo = write_v1_details(tmp_path)
    results = repo / f"results_{V1_DATE_ID}.json"
    assert detect_format(results) == "leaderboard-results"
    parsed = read_leaderboard_results(results)
    assert parsed.responses.height == 0
    assert {b: round(s, 6) for _, b, s in parsed.scores.rows()} == {
        "arc": 0.6012, "mmlu": 0.6, "truthfulqa": 0.4567, "gsm8k": 0.2123}
    only = tmp_path / "results" / "org" / "model-7b"
    only.mkdir(parents=True)
    (only / results.name).write_text(results.read_text())
    assert detect_format(only) == "leaderboard-results"
    assert iter_sources(tmp_path / "results") == [only]
    assert read_source(only).models["model"].to_list() == ["org/model-7b"]
    results.write_text(json.dumps({"config_general": {}, "results": {"harness|gsm8k|5": {"acc": 7.0}}}))
    with pytest.raises(InputError, match=r"column 'harness\|gsm8k\|5'.*not a score"):
        read_leaderboard_results(results)


# ------------------------------------------------------------------------------------ leaderboard v2


def test_v2_details_groups_subtasks(tmp_path: Path) -> None:
    folder = write_v2_details(tmp_path)
    assert detect_format(folder) == "leaderboard-details-v2"
    parsed = read_source(folder)
    check_schemas(parsed)
    m = "org/model-v2"
    assert rows(parsed.responses) == sorted([
        (m, "leaderboard_bbh", "boolean_expressions.0", 1.0),
        (m, "leaderboard_bbh", "boolean_expressions.1", 0.0),
        (m, "leaderboard_bbh", "navigate.0", 0.0), (m, "leaderboard_bbh", "navigate.1", 1.0),
        (m, "leaderboard_bbh", "navigate.2", 1.0),
        (m, "leaderboard_ifeval", "0", 1.0), (m, "leaderboard_ifeval", "1", 0.0),  # prompt_level_strict_acc
        (m, "leaderboard_mmlu_pro", "0", 1.0), (m, "leaderboard_mmlu_pro", "1", 1.0),  # not folded into mmlu
    ])
    # the umbrella "leaderboard" group has an aggregate but no items of its own: no score for it
    assert rows(parsed.scores) == sorted([(m, "leaderboard_bbh", 0.6), (m, "leaderboard_ifeval", 0.5),
                                          (m, "leaderboard_mmlu_pro", 0.3567)])
    assert parsed.models["n_params"].to_list() == [7241732096.0]


# ------------------------------------------------------------------------------------ detection, hub


def test_iter_sources_units_and_detection(tmp_path: Path) -> None:
    lm = write_lm_eval_run(tmp_path / "runs")
    v1 = write_v1_details(tmp_path / "hub")
    v2 = write_v2_details(tmp_path / "hub")
    long_file = tmp_path / "tables" / "mine.csv"
    long_file.parent.mkdir()
    long_file.write_text("model,benchmark,item_id,correct\na/b,arc,1,1\n")
    long_dir = tmp_path / "tables" / "bundle"
    long_dir.mkdir()
    pl.DataFrame({"model": ["a/b"], "benchmark": ["arc"], "item_id": ["1"], "correct": [1]}).write_parquet(
        long_dir / "responses.parquet")
    (tmp_path / "README.md").write_text("notes")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.csv").write_text("junk")
    (tmp_path / "tables" / "odd.xlsx").write_bytes(b"PK")
    units = iter_sources(tmp_path)
    assert units == sorted([lm, v1, v2, long_file, long_dir, tmp_path / "tables" / "odd.xlsx"])
    formats = {u.name: detect_format(u) for u in units if u.suffix != ".xlsx"}
    assert formats == {lm.name: "lm-eval", v1.name: "leaderboard-details-v1",
                       v2.name: "leaderboard-details-v2", "mine.csv": "long", "bundle": "long"}
    with pytest.raises(InputError, match=r"odd\.xlsx: unrecognised file type '\.xlsx'"):
        detect_format(tmp_path / "tables" / "odd.xlsx")
    with pytest.raises(InputError, match="holds no lm-eval output"):
        detect_format(tmp_path / "tables")
    parsed = read_source(long_file)  # dispatched to the long-table reader
    assert parsed.responses.select(list(RESPONSES_SCHEMA)).rows() == [("a/b", "arc", "1", 1.0)]
    assert parsed.format == "long"


def test_hub_loader_reads_local_folder_without_network(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_v1_details(tmp_path / "snap", model="org/a")
    write_v1_details(tmp_path / "snap", model="org/b")
    parsed = load_details(tmp_path / "snap", benchmarks=["arc", "mmlu"])
    assert parsed.responses.group_by("model", "benchmark").len().sort("model", "benchmark").rows() == [
        ("org/a", "arc", 3), ("org/a", "mmlu", 4), ("org/b", "arc", 3), ("org/b", "mmlu", 4)]
    assert sorted(parsed.models["model"]) == ["org/a", "org/b"]
    assert details_patterns(["arc", "mmlu"]) == [
        "results_*.json", "*/results_*.json", "*details_harness|arc:challenge|25*.parquet",
        "*details_harness|hendrycksTest-*.parquet"]
    assert details_patterns(["leaderboard_bbh"], layout="v2")[-1] == "*samples_leaderboard_bbh*.jsonl"
    with pytest.raises(ValueError, match="no cache_dir"):
        load_details("org/not-a-local-folder")


@pytest.mark.skipif(not DATA.exists(), reason="real openllm_v1 data absent")
def test_real_data_folder_is_one_long_unit() -> None:
    assert iter_sources(DATA) == [DATA]
    assert detect_format(DATA) == "long"


def test_store_ingests_every_format_idempotently(tmp_path: Path) -> None:
    from sparseeval.store import Store

    write_lm_eval_run(tmp_path / "src")
    write_v1_details(tmp_path / "src")
    write_v2_details(tmp_path / "src")
    store = Store(tmp_path / "db.duckdb")
    first = store.ingest(tmp_path / "src")
    assert [(Path(f.file).name, f.status, f.n_responses) for f in first.files] == [
        ("EleutherAI__pythia-160m", "ok", 17), ("details_org__model-7b", "ok", 12),
        ("org__model-v2", "ok", 9)]
    counts = store.table_counts()
    assert (counts["responses"], counts["scores"], counts["models"]) == (38, 12, 3)
    assert [f.status for f in store.ingest(tmp_path / "src").files] == ["skipped"] * 3
    assert store.table_counts() == counts
