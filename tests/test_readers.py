"""Readers for lm-eval output, leaderboard details/results, detection and the details file patterns (offline)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from bench.support.formats import (
    LM_EVAL_DATE_ID,
    V1_DATE_ID,
    write_details_parquet,
    write_lm_eval_run,
    write_v1_details,
    write_v2_details,
)
from sparseeval.data.readers.base import MODELS_SCHEMA, RESPONSES_SCHEMA, SCORES_SCHEMA, SETTINGS_SCHEMA, InputError
from sparseeval.data.readers.detect import detect_format, discover, iter_sources, read_source
from sparseeval.data.readers.hub import details_patterns
from sparseeval.data.readers.leaderboard import read_details_v1, read_leaderboard_results
from sparseeval.data.readers.lm_eval import read_lm_eval
from tests.support import needs_real_data

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "openllm_v1"


def rows(frame: pl.DataFrame) -> list[tuple]:
    """The canonical columns (no settings) of responses or scores, sorted."""
    cols = [c for c in (*RESPONSES_SCHEMA, *SCORES_SCHEMA) if c in frame.columns]
    return sorted(frame.select(list(dict.fromkeys(cols))).rows())


def notes(parsed) -> list[tuple[str, str, str]]:
    return sorted((Path(n.part.split(": ")[0]).name + (": " + n.part.split(": ", 1)[1] if ": " in n.part else ""),
                   n.status, n.reason) for n in parsed.notes)


def check_schemas(parsed) -> None:
    assert dict(parsed.responses.schema) == {**RESPONSES_SCHEMA, **SETTINGS_SCHEMA}
    assert dict(parsed.scores.schema) == {**SCORES_SCHEMA, **SETTINGS_SCHEMA}
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
    # Changed with issue 8: aggregates that contradict their complete samples are refused (arc: 0.4321 vs
    # mean 0.5; truthfulqa: 0.4111 vs 0.5); mmlu is the unweighted mean of all 57 subjects, so no score
    # from 3 subjects (the group's size-weighted 0.6543 was stored before).
    assert rows(parsed.scores) == sorted([(m, "gsm8k", 0.3333), (m, "my_task", 0.5)])
    results = f"results_{LM_EVAL_DATE_ID}.json"
    assert notes(parsed) == sorted([
        (f"{results}: arc", "refused", "aggregate acc_norm,none = 0.4321 of task arc_challenge contradicts its "
                                       "4 samples (mean 0.5): score not stored"),
        (f"{results}: mmlu", "skipped", "mmlu score needs all 57 subjects' aggregates (3 present): not stored"),
        (f"{results}: truthfulqa", "refused", "aggregate acc,none = 0.4111 of task truthfulqa_mc2 contradicts "
                                              "its 2 samples (mean 0.5): score not stored"),
    ])
    assert parsed.format == "lm-eval-0.4.3+"
    run_at = datetime(2024, 5, 1, 12)
    settings = parsed.responses.select("benchmark", "task", "n_shot", "metric", "filter", "harness",
                                       "harness_version", "limit", "run_at").unique().sort("task").rows()
    assert settings == [
        ("arc", "arc_challenge", 25, "acc_norm", "none", "lm-eval", "git:abc1234", None, run_at),
        ("gsm8k", "gsm8k", 5, "exact_match", "strict-match", "lm-eval", "git:abc1234", None, run_at),
        # a benchmark made of subtasks has one task value per run (the group; the subject is the id prefix)
        ("mmlu", "mmlu", None, "acc", "none", "lm-eval", "git:abc1234", None, run_at),
        ("my_task", "my_task", 0, "exact_match", "none", "lm-eval", "git:abc1234", None, run_at),
        ("truthfulqa", "truthfulqa_mc2", 0, "acc", "none", "lm-eval", "git:abc1234", None, run_at),
    ]
    assert parsed.scores.filter(pl.col("benchmark") == "gsm8k").select("task", "n_shot", "metric", "filter").rows() \
        == [("gsm8k", 5, "exact_match", "strict-match")]
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
    # Changed with issue 8: the unit is (model, task, run), so the later run of arc_challenge supersedes the
    # earlier one as a whole (before, its one document was mixed into the earlier run's four)
    arc = parsed.responses.filter(pl.col("benchmark") == "arc")
    assert arc.select("item_id", "score", "limit").rows() == [("0", 1.0, 4.0)]  # --limit recorded
    # the later run used --limit on arc: its aggregate is no benchmark score, and the older is superseded
    assert parsed.scores.filter(pl.col("benchmark") == "arc").height == 0
    assert ("results_2024-06-01T08-00-00.000000.json: arc", "skipped",
            "run used --limit 4: its aggregate is not a benchmark score (responses kept)") in notes(parsed)
    assert ("samples_arc_challenge_2024-05-01T12-00-00.000000.jsonl", "skipped",
            f"superseded by the newer run {folder / ('results_' + later + '.json')}") in notes(parsed)
    assert parsed.models["submitted_at"].to_list() == [datetime(2024, 5, 1, 12)]  # earliest run


def test_lm_eval_results_file_alone_gives_scores(tmp_path: Path) -> None:
    folder = write_lm_eval_run(tmp_path)
    for p in folder.glob("samples_*.jsonl"):
        p.unlink()
    results = folder / f"results_{LM_EVAL_DATE_ID}.json"
    assert detect_format(results) == "lm-eval"
    parsed = read_source(results)
    assert parsed.responses.height == 0
    # no samples to contradict them; mmlu: 3 of 57 subjects, no score
    assert dict(zip(parsed.scores["benchmark"], parsed.scores["score"], strict=True)) == {
        "arc": 0.4321, "gsm8k": 0.3333, "truthfulqa": 0.4111, "my_task": 0.5}
    assert [n.status for n in parsed.notes] == ["skipped"]


def _samples(folder: Path, task: str) -> Path:
    return folder / f"samples_{task}_{LM_EVAL_DATE_ID}.jsonl"


def test_broken_jsonl_line_names_file_and_line(tmp_path: Path) -> None:
    folder = write_lm_eval_run(tmp_path)
    path = _samples(folder, "arc_challenge")
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:40]  # truncated write
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        read_source(path)  # the file alone: all of it refused
    assert err.value.path == str(path) and err.value.line == 3
    assert f"{path}, line 3" in str(err.value) and "invalid JSON" in str(err.value)
    parsed = read_source(folder)  # the folder: that task alone is refused
    (note,) = [n for n in parsed.refused_parts if n.part == str(path)]
    assert note.part == str(path) and note.reason.startswith("invalid JSON") and note.reason.endswith("(line 3)")
    assert "arc" not in set(parsed.responses["benchmark"]) and parsed.responses.height == 13


def test_missing_doc_id_and_missing_metric(tmp_path: Path) -> None:
    folder = write_lm_eval_run(tmp_path)
    path = _samples(folder, "mmlu_anatomy")
    objs = [json.loads(line) for line in path.read_text().splitlines()]
    del objs[1]["doc_id"]
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    with pytest.raises(InputError, match=r"line 2, column 'doc_id': missing or invalid 'doc_id'"):
        read_lm_eval(path)
    assert [n.reason for n in read_lm_eval(folder).refused_parts if n.part == str(path)] == [
        "missing or invalid 'doc_id' (line 2, column 'doc_id')"]
    objs[1]["doc_id"] = 1
    del objs[0]["acc"]
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    with pytest.raises(InputError) as err:
        read_lm_eval(path)
    assert err.value.line == 1 and err.value.column == "acc" and "metric 'acc' missing" in str(err.value)
    assert err.value.path == str(path)


def test_duplicate_doc_id_and_out_of_range_metric(tmp_path: Path) -> None:
    folder = write_lm_eval_run(tmp_path)
    path = _samples(folder, "my_task")
    objs = [json.loads(line) for line in path.read_text().splitlines()]
    objs[1]["doc_id"] = 0
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    with pytest.raises(InputError, match=r"line 2: doc_id '0' appears twice"):
        read_lm_eval(path)
    objs[1]["doc_id"], objs[1]["exact_match"] = 7, 3.5
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    with pytest.raises(InputError, match=r"line 2, column 'exact_match'.*not a score in \[0, 1\]"):
        read_lm_eval(path)
    parsed = read_lm_eval(folder)
    assert [(n.part, n.status) for n in parsed.notes if n.part == str(path)] == [(str(path), "refused")]
    assert "my_task" not in set(parsed.responses["benchmark"])
    # the folder holds other tasks' rows: a score with no items would refuse it whole, so it is left out, and said
    assert "my_task" not in set(parsed.scores["benchmark"])
    assert any(n.status == "skipped" and n.part.endswith(": my_task") and "not stored" in n.reason
               for n in parsed.notes)


def test_broken_results_json_names_line(tmp_path: Path) -> None:
    folder = write_lm_eval_run(tmp_path)
    results = folder / f"results_{LM_EVAL_DATE_ID}.json"
    text = results.read_text().splitlines()
    results.write_text("\n".join(text[:5]))
    with pytest.raises(InputError) as err:
        read_lm_eval(results)
    assert err.value.path == str(results) and err.value.line is not None
    parsed = read_lm_eval(folder)  # the samples are still read, without their results
    assert [(n.part, n.reason[:12]) for n in parsed.refused_parts] == [(str(results), "invalid JSON")]
    assert parsed.scores.height == 0 and parsed.responses.height == 17


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
    got = {b: round(s, 6) for _, b, s in rows(parsed.scores)}
    # mmlu: the unweighted mean of all 57 subjects or nothing (changed with issue 8: 2 subjects gave 0.6)
    assert got == {"arc": 0.6012, "truthfulqa": 0.4567, "gsm8k": 0.2123}
    assert notes(parsed) == [(f"results_{V1_DATE_ID}.json: mmlu", "skipped",
                              "mmlu score needs all 57 subjects' aggregates (2 present): not stored")]
    assert parsed.format == "leaderboard-details-v1"
    assert parsed.responses.filter(pl.col("benchmark") == "mmlu").select(
        "task", "n_shot", "metric", "harness", "harness_version", "limit", "run_at").unique().sort("task").rows() == [
        ("harness|hendrycksTest-*|5", 5, "acc", "lighteval", "0f318ecf", None, datetime(2023, 9, 3, 10, 57, 4, 203304))]
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
        read_details_v1(path)
    assert err.value.path == str(path) and "cannot read parquet" in str(err.value)
    parsed = read_source(repo)  # that task alone is refused
    assert [(n.part, n.reason[:19]) for n in parsed.refused_parts] == [(str(path), "cannot read parquet")]
    assert "gsm8k" not in set(parsed.responses["benchmark"]) and parsed.responses.height == 9
    write_details_parquet(path, [{"acc": 1.0}, {"acc": None}])
    with pytest.raises(InputError, match=r"gsm8k\|5_.*column 'metrics': row 1: metric 'acc' is None"):
        read_details_v1(path)


def test_leaderboard_results_file_and_folder(tmp_path: Path) -> None:
    repo = write_v1_details(tmp_path)
    results = repo / f"results_{V1_DATE_ID}.json"
    assert detect_format(results) == "leaderboard-results"
    parsed = read_leaderboard_results(results)
    assert parsed.responses.height == 0
    assert {b: round(s, 6) for _, b, s in rows(parsed.scores)} == {
        "arc": 0.6012, "truthfulqa": 0.4567, "gsm8k": 0.2123}
    assert parsed.format == "leaderboard-results"
    only = tmp_path / "results" / "org" / "model-7b"
    only.mkdir(parents=True)
    (only / results.name).write_text(results.read_text())
    assert detect_format(only) == "leaderboard-results"
    assert iter_sources(tmp_path / "results") == [only]
    assert read_source(only).models["model"].to_list() == ["org/model-7b"]
    results.write_text(json.dumps({"config_general": {}, "results": {"harness|gsm8k|5": {"acc": 7.0}}}))
    with pytest.raises(InputError, match=r"every part was refused: .*'harness\|gsm8k\|5' acc = 7.0 is not a score"):
        read_leaderboard_results(results)


# ------------------------------------------------------------------------------------ leaderboard v2


def test_v2_details_groups_subtasks(tmp_path: Path) -> None:
    folder = write_v2_details(tmp_path)
    assert detect_format(folder) == "leaderboard-details-v2"
    parsed = read_source(folder)
    check_schemas(parsed)
    m = "org/model-v2"
    # Changed with issue 8: each v2 group is one base benchmark (bbh, ifeval, mmlu_pro, ...), whatever the
    # harness version called its tasks (before: leaderboard_bbh, leaderboard_ifeval, ...)
    assert rows(parsed.responses) == sorted([
        (m, "bbh", "boolean_expressions.0", 1.0), (m, "bbh", "boolean_expressions.1", 0.0),
        (m, "bbh", "navigate.0", 0.0), (m, "bbh", "navigate.1", 1.0), (m, "bbh", "navigate.2", 1.0),
        (m, "ifeval", "0", 1.0), (m, "ifeval", "1", 0.0),  # prompt_level_strict_acc
        (m, "mmlu_pro", "0", 1.0), (m, "mmlu_pro", "1", 1.0),  # not folded into mmlu
    ])
    # the umbrella "leaderboard" group has an aggregate but no items of its own: no score for it;
    # mmlu_pro's aggregate 0.3567 contradicts its complete samples (mean 1.0): refused
    assert rows(parsed.scores) == sorted([(m, "bbh", 0.6), (m, "ifeval", 0.5)])
    assert [(n.status, n.reason) for n in parsed.notes] == [
        ("refused", "aggregate acc,none = 0.3567 of task leaderboard_mmlu_pro contradicts its 2 samples (mean 1): "
                    "score not stored")]
    assert parsed.format == "leaderboard-details-v2"
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
    # Changed with issue 8: an unrecognised file is a refused note of discover(), not a unit
    assert units == sorted([lm, v1, v2, long_file, long_dir])
    units, found = discover(tmp_path)
    assert sorted((Path(n.part).name, n.status, n.reason) for n in found) == [
        ("README.md", "skipped", "documentation / not a results file"),
        ("README.md", "skipped", "documentation / not a results file"),
        ("odd.xlsx", "refused", "unrecognised file type '.xlsx'")]
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


def test_details_snapshot_folder_reads_each_unit_and_patterns_name_a_benchmarks_files(tmp_path: Path) -> None:
    # a Hub snapshot folder (as hub_sources leaves it) holds one unit per model, read by the folder reader
    write_v1_details(tmp_path / "snap", model="org/a")
    write_v1_details(tmp_path / "snap", model="org/b")
    parsed = [read_source(unit) for unit in iter_sources(tmp_path / "snap")]
    counts = sorted(row for p in parsed for row in p.responses.group_by("model", "benchmark").len().rows())
    assert [r for r in counts if r[1] in ("arc", "mmlu")] == [
        ("org/a", "arc", 3), ("org/a", "mmlu", 4), ("org/b", "arc", 3), ("org/b", "mmlu", 4)]
    assert sorted(m for p in parsed for m in p.models["model"]) == ["org/a", "org/b"]
    assert details_patterns(["arc", "mmlu"]) == [
        "results_*.json", "*/results_*.json", "*details_harness|arc:challenge|25*.parquet",
        "*details_harness|hendrycksTest-*.parquet"]
    from fnmatch import fnmatch  # issue 21: exact task names, not a prefix (math_hard files are math_<sub>_hard)

    math = details_patterns(["math_hard"], layout="v2")
    assert any(fnmatch("org__m/samples_leaderboard_math_algebra_hard_2024-06-01T00-00-00.jsonl", p) for p in math)
    bbh = details_patterns(["leaderboard_bbh"], layout="v2")
    assert len(bbh) == 2 + 24 and not any(fnmatch("samples_leaderboard_bbh_x_2024-06-01T00-00-00.jsonl", p)
                                          for p in bbh)
    assert details_patterns(["mmlu_pro"], layout="v2")[2:] == ["*samples_leaderboard_mmlu_pro_*.jsonl"]


@needs_real_data
def test_real_data_folder_is_one_long_unit() -> None:
    assert iter_sources(DATA) == [DATA]
    assert detect_format(DATA) == "long"


def test_store_ingests_every_format_idempotently(tmp_path: Path) -> None:
    from sparseeval.data.store import Store

    write_lm_eval_run(tmp_path / "src")
    write_v1_details(tmp_path / "src")
    write_v2_details(tmp_path / "src")
    store = Store(tmp_path / "db.duckdb")
    first = store.ingest(tmp_path / "src")
    # partial: the fixtures' arc, truthfulqa and mmlu_pro aggregates contradict their samples (refused parts)
    assert [(Path(f.file).name, f.status, f.n_responses) for f in first.files] == [
        ("README.md", "skipped", 0), ("EleutherAI__pythia-160m", "partial", 17),
        ("details_org__model-7b", "ok", 12), ("org__model-v2", "partial", 9)]
    counts = store.table_counts()
    assert (counts["responses"], counts["scores"], counts["models"]) == (38, 7, 3)
    assert [f.status for f in store.ingest(tmp_path / "src").files] == ["skipped"] * 4
    # (discover's note for the README is recorded again as an ingest row: compare the data tables)
    assert {k: v for k, v in store.table_counts().items() if k != "ingests"} == {
        k: v for k, v in counts.items() if k != "ingests"}
