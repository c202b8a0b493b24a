"""A corpus of bad inputs: each is refused with its file and problem named, and leaves the store unchanged.

Every case is generated in tmp, ingested into a store that already holds a good file, and must (1) be
reported as refused with a reason naming the file and the problem, (2) leave every data table byte-for
-byte as it was (count and row hash), and (3) add exactly one ``refused`` row to ``ingests``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path

import polars as pl
import pytest

from sparseeval.data.readers.base import InputError, ParsedResults
from sparseeval.data.readers.validation import validate_results
from sparseeval.data.store import Store
from sparseeval.interfaces.cli import main as cli_main
from tests.support import make_long_frames

HEADER = "model,benchmark,item_id,correct\n"


def _text(name: str, body: str) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / name
        path.write_text(body, encoding="utf-8")
        return path
    return write


def _bytes(name: str, body: bytes) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(body)
        return path
    return write


def _frame(name: str, frame: pl.DataFrame) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / name
        frame.write_parquet(path) if name.endswith(".parquet") else frame.write_csv(path)
        return path
    return write


def _truncated(folder: Path) -> Path:
    whole = folder / "whole.parquet"
    make_long_frames(seed=3)[0].write_parquet(whole)
    data = whole.read_bytes()
    whole.unlink()
    path = folder / "truncated.parquet"
    path.write_bytes(data[: len(data) // 2])
    return path


def _long_folder(folder: Path) -> Path:
    """A long-table folder unit whose scores name a model that has no responses."""
    unit = folder / "zero_items_unit"
    unit.mkdir()
    (unit / "responses.csv").write_text(HEADER + "x/m1,arc,1,1\n", encoding="utf-8")
    (unit / "scores.csv").write_text("model,benchmark,score\nx/m1,arc,0.5\nx/ghost,arc,0.4\n",
                                     encoding="utf-8")
    return unit


# the good file every case is refused against; the conflict cases contradict it
GOOD = "org0/model-0,arc,0,{v}\n"
_good_resp, _good_scores = make_long_frames(seed=0)
_first = _good_resp.row(0, named=True)  # org0/model-0, arc, item 0
_flip = 1 - _first["correct"]
_first_score = _good_scores.row(0, named=True)

#: name -> (writer, substrings the refusal must contain besides the file name)
CASES: dict[str, tuple[Callable[[Path], Path], tuple[str, ...]]] = {
    "truncated_parquet": (_truncated, ("parquet",)),
    "csv_extra_field": (_text("extra_field.csv", HEADER + "a/b,arc,1,1\na/b,arc,2,0,5\n"),
                        ("line 3", "Expected Number of Columns")),
    "csv_unterminated_quote": (_text("quote.csv", HEADER + 'a/b,arc,1,1\na/b,arc,"2,0\n'),
                               ("line 3", "unterminated quote")),
    "jsonl_broken_line": (_text("broken.jsonl", '{"model": "a/b", "benchmark": "arc", "item_id": "1", '
                                                '"correct": 1}\n{"model": "a/b", "benchmark": \n'),
                          ("Malformed JSON",)),
    "non_numeric_score": (_text("text_score.csv", HEADER + "a/b,arc,1,1\na/b,arc,2,yes please\n"),
                          ("line 3", "'correct'", "not a number", "yes please")),
    "wrong_type_parquet": (_frame("date_score.parquet", pl.DataFrame(
        {"model": ["a/b"], "benchmark": ["arc"], "item_id": ["1"], "score": [date(2024, 1, 1)]})),
                           ("wrong type", "'score'", "expected a number")),
    "missing_item_id": (_text("no_item.csv", "model,benchmark,correct\na/b,arc,1\n"),
                        ("missing column 'item_id'",)),
    "missing_model": (_text("no_model.csv", "name,benchmark,item_id,correct\na/b,arc,1,1\n"),
                      ("missing column 'model'",)),
    "missing_benchmark": (_text("no_bench.csv", "model,item_id,correct\na/b,1,1\n"),
                          ("missing column 'benchmark'",)),
    "duplicate_key": (_text("dupes.csv", HEADER + "a/b,arc,1,1\na/b,arc,2,0\na/b,arc,1,1\n"),
                      ("duplicate key", "item_id='1'", "lines 2, 4")),
    "duplicate_after_alias": (_text("alias_dupes.csv", HEADER + "a/b,arc,1,1\na/b,arc_challenge,1,0\n"),
                              ("duplicate key", "benchmark='arc'")),
    "conflict_across_files": (_text("conflict.csv", HEADER + GOOD.format(v=_flip)),
                              ("conflicting response", "model='org0/model-0'", "good.parquet")),
    "conflicting_score_across_files": (
        _text("conflict_scores.csv", f"model,benchmark,score\n{_first_score['model']},arc,"
                                     f"{round(1 - _first_score['score'], 3)}\n"),
        ("conflicting score", "good_scores.parquet")),
    "score_1_7": (_text("high.csv", HEADER + "a/b,arc,1,1\na/b,arc,2,1.7\n"),
                  ("line 3", "outside [0, 1]", "1.7")),
    "negative_score": (_text("negative.csv", "model,benchmark,item_id,score\na/b,arc,1,-0.5\n"),
                       ("line 2", "outside [0, 1]", "-0.5")),
    "nan_score": (_frame("nan.parquet", pl.DataFrame({"model": ["a/b", "a/b"], "benchmark": ["arc", "arc"],
                                                      "item_id": ["1", "2"], "score": [1.0, float("nan")]})),
                  ("NaN", "row 2")),
    "null_score": (_text("null.csv", HEADER + "a/b,arc,1,\n"), ("line 2", "missing (null)")),
    "empty_file": (_bytes("empty.csv", b""), ("empty file",)),
    "header_only": (_text("header_only.csv", HEADER), ("no rows",)),
    "empty_parquet": (_frame("no_rows.parquet", pl.DataFrame(
        schema={"model": pl.String, "benchmark": pl.String, "item_id": pl.String, "correct": pl.Int8})),
                      ("no rows",)),
    "blank_benchmark": (_text("blank_bench.csv", HEADER + "a/b,arc,1,1\na/b,   ,2,1\n"),
                        ("line 3", "benchmark is empty or blank")),
    "control_char_benchmark": (_text("ctrl_bench.csv", HEADER + "a/b,ar\x07c,1,1\n"),
                               ("line 2", "control characters")),
    "empty_model": (_text("empty_model.csv", HEADER + "a/b,arc,1,1\n,arc,2,1\n"),
                    ("line 3", "model is empty or blank")),
    "model_with_zero_items": (_text("zero_items.csv", HEADER + "a/b,arc,1,1\nc/d,arc,,\n"),
                              ("model 'c/d' has zero items",)),
    "scored_model_without_items": (_long_folder, ("'x/ghost'", "zero items")),
    "huge_id": (_text("huge.csv", HEADER + f"a/b,arc,{'7' * 600},1\n"), ("line 2", "longer than 512")),
    "non_utf8": (_bytes("latin1.csv", (HEADER + "a/b,arc,1,1\nmod\xe8le/x,arc,2,1\n").encode("latin-1")),
                 ("line 3", "not UTF-8")),
    "unknown_extension": (_bytes("results.xlsx", b"PK\x03\x04 not really a spreadsheet"), ("'.xlsx'",)),
    "scores_out_of_range": (_text("scores.csv", "model,benchmark,score\na/b,arc,0.5\nc/d,gsm8k,1.2\n"),
                            ("line 3", "outside [0, 1]", "1.2")),
}


@pytest.fixture(scope="module")
def seeded_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A store holding one good file (``good.parquet``) that every bad case is refused against."""
    root = tmp_path_factory.mktemp("bad_inputs")
    good = root / "good.parquet"
    _good_resp.write_parquet(good)
    scores = root / "good_scores.parquet"
    _good_scores.write_parquet(scores)
    store = Store(root / "store.duckdb")
    assert store.ingest([good, scores]).ok
    return store


def test_corpus_is_big_enough() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.slow  # 30 stores filled and compared: make test runs it, make test-fast leaves it out
def test_bad_input_is_refused_and_changes_nothing(case: str, seeded_store: Store, tmp_path: Path,
                                                  db_fingerprint) -> None:
    writer, expected = CASES[case]
    path = writer(tmp_path)
    store = seeded_store
    before = db_fingerprint(store.path)
    n_ingests = store.table_counts()["ingests"]

    report = store.ingest(path)

    assert [f.status for f in report.files] == ["refused"], report
    reason = report.files[0].reason
    assert path.name in reason
    for text in expected:
        assert text in reason, f"{text!r} not in {reason!r}"
    assert db_fingerprint(store.path) == before
    assert store.table_counts()["ingests"] == n_ingests + 1
    last = store.query("SELECT file, status, reason FROM ingests ORDER BY ingest_id DESC LIMIT 1").row(0)
    assert last == (str(path), "refused", reason)


def test_validation_names_the_file_without_line_numbers() -> None:
    """Other readers give no ``_line``; the message then names the row."""
    parsed = ParsedResults(responses=pl.DataFrame({"model": ["a", "a"], "benchmark": ["arc", "arc"],
                                                   "item_id": ["1", "2"], "score": [0.5, 2.0]}))
    with pytest.raises(InputError, match=r"results\.json.*outside \[0, 1\].*row 2") as info:
        validate_results(parsed, Path("results.json"))
    assert info.value.column == "score" and info.value.line is None
    wrong = ParsedResults(responses=pl.DataFrame({"model": ["a"], "benchmark": ["arc"], "item_id": ["1"],
                                                  "score": ["high"]}))
    with pytest.raises(InputError, match="wrong type"):
        validate_results(wrong, "x.json")
    ok = validate_results(ParsedResults(responses=pl.DataFrame(
        {"model": [" a "], "benchmark": ["mmlu_anatomy"], "item_id": ["1"], "score": [1.0]})), "y")
    # issue 21: a subject folds into mmlu with the subject kept in the item id (never item "1" of mmlu)
    assert ok.responses.row(0) == ("a", "mmlu", "anatomy.1", 1.0)


def _mixed_folder(root: Path) -> tuple[Path, list[str], list[str]]:
    folder = root / "incoming"
    folder.mkdir()
    good_a, _ = make_long_frames(seed=11, prefix="alpha")
    good_b, _ = make_long_frames(seed=12, prefix="beta")
    good_a.write_parquet(folder / "a_good.parquet")
    good_b.write_csv(folder / "b_good.csv")
    (folder / "README.md").write_text("notes, not data\n", encoding="utf-8")
    bad = []
    for case in ("score_1_7", "empty_file", "non_utf8"):
        bad.append(CASES[case][0](folder).name)
    return folder, ["a_good.parquet", "b_good.csv"], sorted(bad)


def test_mixed_folder_ingests_good_files_and_records_bad_ones(tmp_path: Path, tmp_db: Path) -> None:
    folder, good, bad = _mixed_folder(tmp_path)
    store = Store(tmp_db)
    report = store.ingest(folder)
    assert sorted(Path(f.file).name for f in report.by_status("ok")) == good
    assert sorted(Path(f.file).name for f in report.refused) == bad
    assert not report.ok
    counts = store.table_counts()
    assert counts["responses"] == 2 * 12 * 2 * 8
    rows = store.query("SELECT file, status, reason FROM ingests WHERE status = 'refused' ORDER BY file")
    assert sorted(Path(f).name for f in rows.get_column("file")) == bad
    assert all(Path(f).name in r for f, _, r in rows.iter_rows())
    # a second run stores nothing new and still refuses the bad files
    again = store.ingest(folder)
    skipped = sorted(Path(f.file).name for f in again.by_status("skipped"))
    assert skipped == sorted([*good, "README.md"]) and len(again.refused) == 3  # README: listed, with the reason
    assert store.table_counts()["responses"] == counts["responses"]


@pytest.mark.slow
def test_cli_ingest_mixed_folder_exits_nonzero_naming_refused_files(tmp_path: Path, capsys) -> None:
    folder, good, bad = _mixed_folder(tmp_path)
    db = tmp_path / "cli.duckdb"
    code = cli_main(["ingest", str(folder), "--db", str(db)])
    out, err = capsys.readouterr()
    assert code == 1
    for name in bad:
        assert name in err
    assert "REFUSED" in err
    for name in good:
        assert re.search(rf"^stored\s+{re.escape(str(folder / name))}\s+long\s+\d+", out, re.M), out
    assert re.search(r"^skipped\s+\S*README\.md .*\n    documentation", out, re.M), out
    assert "2 stored, 0 partly stored, 1 skipped, 3 refused ->" in out

    env = {**os.environ, "SPARSEEVAL_DB": str(tmp_path / "env.duckdb")}
    proc = subprocess.run([sys.executable, "-m", "sparseeval.interfaces.cli", "ingest", str(folder)], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    for name in bad:
        assert name in proc.stderr
    assert (tmp_path / "env.duckdb").exists()

    assert cli_main(["ingest", str(folder / good[0]), "--db", str(tmp_path / "good_only.duckdb")]) == 0
    assert "1 stored, 0 partly stored, 0 skipped, 0 refused ->" in capsys.readouterr().out
