"""User input never ends in a traceback (issue 21, item 4).

One table: every CLI command crossed with the bad values a user really types or points at. Each row
must exit non-zero with exactly one line on stderr that names the argument and says the problem (each
row names the reason its line must give: a line that names the argument but gives a wrong reason,
such as "locked by another writer" for a folder, fails), print no traceback, and leave every file it
was given byte-for-byte unchanged (and write nothing beside them). The commands run in-process
through :func:`sparseeval.interfaces.cli.main`, the function the console script calls, so an exception escaping
it is exactly the traceback a user would see; a few rows also go through a real subprocess.

Accepted rather than refused, on purpose (and asserted below):

* ``fit --seed 0`` is a seed like any other (it fits, and differs from ``--seed 1``);
* ``ingest --db NEW`` creates a store at a path that does not exist yet (that is how a store starts);
* ``ingest`` of a bad result file records the refusal in the store's audit table (``ingests``):
  the refused file itself is untouched, and the store keeps why it was refused.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import polars as pl
import pytest

from sparseeval.interfaces.cli import main
from tests.support import make_long_frames

N_ITEMS = 10
K_OK = 3


def _digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` and its sha256 (folders by their listing)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of good and bad inputs, shared by every row (each row checks it is unchanged)."""
    root = tmp_path_factory.mktemp("inputs")
    responses, scores = make_long_frames(seed=3, n_models=60, n_items=N_ITEMS, benchmarks=("toy",))
    (root / "data").mkdir()
    responses.write_parquet(root / "data" / "responses.parquet")
    scores.write_parquet(root / "data" / "scores.parquet")
    # the same responses without any score: the benchmark is empty once unscored models are dropped
    (root / "unscored").mkdir()
    responses.write_parquet(root / "unscored" / "responses.parquet")
    scores.filter(pl.col("benchmark") == "none").write_parquet(root / "unscored" / "scores.parquet")
    responses.filter(pl.col("model").is_in(["org0/model-0", "org1/model-1"])).write_parquet(root / "answers.parquet")
    # files of other kinds
    (root / "empty.txt").write_bytes(b"")
    (root / "emptydir").mkdir()
    (root / "table.csv").write_text("name,value\na,1\nb,2\n")
    (root / "other.json").write_text(json.dumps({"hello": [1, 2, 3]}))
    (root / "not.duckdb").write_text("this is not a database\n")
    scores.write_parquet(root / "other.parquet")
    with sqlite3.connect(root / "mlflow.db") as con:  # the tables an MLflow SQLite store starts with
        con.execute("CREATE TABLE experiments (experiment_id INTEGER PRIMARY KEY, name TEXT)")
        con.execute("CREATE TABLE alembic_version (version_num TEXT)")
    con.close()
    shutil.copy(Path(__file__).resolve().parents[1] / "pipelines" / "dagster.yaml", root / "dagster.yaml")
    with duckdb.connect(str(root / "foreign.duckdb")) as dcon:
        dcon.execute("CREATE TABLE runs (a INT)")
    # a real store and a real predictor
    assert main(["-q", "ingest", "--db", str(root / "store.duckdb"), str(root / "data")]) == 0
    assert main(["-q", "fit", "--data", str(root / "data"), "--benchmark", "toy", "-k", str(K_OK),
                 "--method", "sparseeval-linear", "--out", str(root / "predictor"), "--device", "cpu"]) == 0
    return root


#: paths that are not what the argument wants: (label, path relative to the inputs folder)
NOT_A_STORE = [("missing", "nowhere.duckdb"), ("empty", "empty.txt"), ("directory", "emptydir"),
               ("parquet", "other.parquet"), ("csv", "table.csv"), ("json", "other.json"),
               ("text", "not.duckdb"), ("mlflow", "mlflow.db"), ("dagster", "dagster.yaml"),
               ("foreign-duckdb", "foreign.duckdb")]
NOT_A_PREDICTOR = [("missing", "nowhere"), ("empty", "empty.txt"), ("directory", "emptydir"),
                   ("parquet", "other.parquet"), ("json", "other.json"), ("mlflow", "mlflow.db"),
                   ("dagster", "dagster.yaml"), ("data-folder", "data")]
NOT_ANSWERS = [("missing", "nowhere.csv"), ("empty", "empty.txt"), ("directory", "emptydir"), ("device", "/dev/null"),
               ("parquet", "other.parquet"), ("csv", "table.csv"), ("json", "other.json"),
               ("mlflow", "mlflow.db"), ("dagster", "dagster.yaml")]
NOT_DATA = [("missing", "nowhere"), ("empty", "empty.txt"), ("directory", "emptydir"), ("device", "/dev/null"),
            ("csv", "table.csv"), ("json", "other.json"), ("mlflow", "mlflow.db"), ("dagster", "dagster.yaml")]

#: what the line must say (a regular expression, searched case-insensitively) for each kind of bad path
STORE_REASONS = {"missing": "no store at", "empty": "an empty file", "directory": "a folder, not a DuckDB store",
                 "foreign-duckdb": "a DuckDB database but not a sparseeval store",
                 **dict.fromkeys(["parquet", "csv", "json", "text", "mlflow", "dagster"], "not a DuckDB database file")}
#: doctor reports a bad store as problems (its report says which), a folder as not a file
DOCTOR_REASONS = {"directory": "is a directory, not a DuckDB file"}
ANSWERS_REASONS = {"missing": "no such file or folder", "directory": "no lm-eval samples_.* files found",
                   "device": "not a regular file or folder", "parquet": "missing column 'item_id'",
                   "csv": "missing column 'item_id'",
                   **dict.fromkeys(["empty", "json", "mlflow", "dagster"], "unknown format '\\.[a-z]+'")}
DATA_REASONS = {"missing": "no such file or folder", "directory": "empty folder", "device": "not a regular file",
                "csv": "missing column 'model'", "json": "neither lm-eval nor lighteval",
                **dict.fromkeys(["empty", "mlflow", "dagster"], "unrecognised file type '\\.[a-z]+'")}
NOT_A_PREDICTOR_REASON = "not a predictor folder"
FEWER_THAN_ITEMS, POSITIVE, FRACTION, SEED = ("anchors must be fewer than the benchmark's items",
                                              "expected a positive integer", "strictly between 0 and 1",
                                              "expected an integer seed")
#: (label, argv from the inputs folder, the argument the line names, the reason it gives)
Row = tuple[str, Callable[[Path], list[str]], str, str]


def _predictor_rows() -> list[Row]:
    rows: list[Row] = []
    for label, bad in NOT_A_PREDICTOR:
        rows += [
            (f"export --predictor {label}", lambda r, b=bad: ["export", "--predictor", str(r / b),
                                                                "--out", str(r / "out" / "a.json")],
             "--predictor", NOT_A_PREDICTOR_REASON),
            (f"predict --predictor {label}", lambda r, b=bad: ["predict", "--predictor", str(r / b),
                                                                 "--answers", str(r / "answers.parquet")],
             "--predictor", NOT_A_PREDICTOR_REASON),
            (f"next --predictor {label}", lambda r, b=bad: ["next", "--predictor", str(r / b),
                                                              "--answers", str(r / "answers.parquet")],
             "--predictor", NOT_A_PREDICTOR_REASON),
            (f"compare --predictor {label}", lambda r, b=bad: ["compare", "org0/model-0", "org1/model-1",
                                                                 "--predictor", str(r / b),
                                                                 "--answers", str(r / "answers.parquet")],
             "--predictor", NOT_A_PREDICTOR_REASON),
        ]
    return rows


def _answers_rows() -> list[Row]:
    rows: list[Row] = []
    for label, bad in NOT_ANSWERS:
        rows += [
            (f"predict --answers {label}", lambda r, b=bad: ["predict", "--predictor", str(r / "predictor"),
                                                               "--answers", str(r / b)],
             "--answers", ANSWERS_REASONS[label]),
            (f"next --answers {label}", lambda r, b=bad: ["next", "--predictor", str(r / "predictor"),
                                                            "--answers", str(r / b)],
             "--answers", ANSWERS_REASONS[label]),
            (f"compare --answers {label}", lambda r, b=bad: ["compare", "org0/model-0", "org1/model-1",
                                                               "--predictor", str(r / "predictor"),
                                                               "--answers", str(r / b)],
             "--answers", ANSWERS_REASONS[label]),
        ]
    return rows


def _db_rows() -> list[Row]:
    rows: list[Row] = []
    for label, bad in NOT_A_STORE:
        if label != "missing":  # ingest --db NEW starts a store: accepted (see the module docstring)
            rows.append((f"ingest --db {label}", lambda r, b=bad: ["ingest", "--db", str(r / b),
                                                                     str(r / "data")], "--db",
                         STORE_REASONS[label]))
        rows += [
            (f"refresh --db {label}", lambda r, b=bad: ["refresh", "--db", str(r / b)], "--db",
             STORE_REASONS[label]),
            (f"sql --db {label}", lambda r, b=bad: ["sql", "--db", str(r / b), "SELECT 1"],
             "--db", STORE_REASONS[label]),
            (f"doctor --db {label}", lambda r, b=bad: ["doctor", "--db", str(r / b)], "--db",
             DOCTOR_REASONS.get(label, r"\d+ problem\(s\)")),
        ]
    return rows


def _data_rows() -> list[Row]:
    rows: list[Row] = []
    for label, bad in NOT_DATA:
        rows += [
            (f"evaluate --data {label}", lambda r, b=bad: ["evaluate", "--data", str(r / b), "-k", "3",
                                                             "--seeds", "1"], "--data", DATA_REASONS[label]),
            (f"fit --data {label}", lambda r, b=bad: ["fit", "--data", str(r / b), "--benchmark", "toy",
                                                        "-k", "3", "--out", str(r / "out" / "p")],
             "--data", DATA_REASONS[label]),
        ]
    return rows


def _fit(*extra: str) -> Callable[[Path], list[str]]:
    return lambda r: ["fit", "--data", str(r / "data"), "--benchmark", "toy", "-k", str(K_OK),
                      "--method", "sparseeval-linear", "--out", str(r / "out" / "p"), *extra]


def _evaluate(*extra: str) -> Callable[[Path], list[str]]:
    return lambda r: ["evaluate", "--data", str(r / "data"), "--method", "sparseeval-linear", "--seeds", "1",
                      "--no-progress", *extra]


VALUE_ROWS: list[Row] = [
    # K
    ("fit -k 0", _fit("-k", "0"), "-k", POSITIVE),
    ("fit -k -2", _fit("-k", "-2"), "-k", POSITIVE),
    ("fit -k items", _fit("-k", str(N_ITEMS)), "-k", FEWER_THAN_ITEMS),
    ("fit -k above items", _fit("-k", str(N_ITEMS + 5)), "-k", FEWER_THAN_ITEMS),
    ("fit -k not a number", _fit("-k", "ten"), "-k", POSITIVE),
    ("evaluate -k 0", _evaluate("-k", "0"), "-k", "expected positive integers"),
    ("evaluate -k -1", _evaluate("-k", "-1"), "-k", "expected positive integers"),
    ("evaluate -k items", _evaluate("-k", str(N_ITEMS)), "-k", FEWER_THAN_ITEMS),
    ("evaluate -k list with items", _evaluate("-k", f"3,{N_ITEMS + 1}"), "-k", FEWER_THAN_ITEMS),
    ("export --first 0", lambda r: ["export", "--predictor", str(r / "predictor"), "--first", "0",
                                    "--out", str(r / "out" / "a.json")], "--first", POSITIVE),
    ("next --batch 0", lambda r: ["next", "--predictor", str(r / "predictor"), "--answers",
                                  str(r / "answers.parquet"), "--batch", "0"], "--batch", POSITIVE),
    # seeds
    ("evaluate --seeds 0", _evaluate("-k", "3", "--seeds", "0"), "--seeds", POSITIVE),
    ("evaluate --seeds -1", _evaluate("-k", "3", "--seeds", "-1"), "--seeds", POSITIVE),
    ("evaluate --seed-offset -1", _evaluate("-k", "3", "--seed-offset", "-1"), "--seed-offset", SEED),
    ("fit --seed -1", _fit("--seed", "-1"), "--seed", SEED),
    # fractions
    ("evaluate --test-frac 0", _evaluate("-k", "3", "--test-frac", "0"), "--test-frac", FRACTION),
    ("evaluate --test-frac 1", _evaluate("-k", "3", "--test-frac", "1"), "--test-frac", FRACTION),
    ("evaluate --val-frac 1", _evaluate("-k", "3", "--val-frac", "1"), "--val-frac", FRACTION),
    ("evaluate --test-frac + --val-frac 1", _evaluate("-k", "3", "--test-frac", "0.5", "--val-frac", "0.5"),
     "--val-frac", r"val_frac \+ test_frac < 1"),
    ("fit --calibration-frac 0", _fit("--calibration-frac", "0"), "--calibration-frac", FRACTION),
    ("fit --calibration-frac 1", _fit("--calibration-frac", "1"), "--calibration-frac", FRACTION),
    ("fit --alpha 0", _fit("--alpha", "0"), "--alpha", FRACTION),
    ("fit --alpha 1", _fit("--alpha", "1"), "--alpha", FRACTION),
    ("next --target-width -1", lambda r: ["next", "--predictor", str(r / "predictor"), "--answers",
                                          str(r / "answers.parquet"), "--target-width", "-1"],
     "--target-width", "expected a number >= 0"),
    # a device is not a store (doctor reports it as a PROBLEM in its own report instead)
    ("ingest --db device", lambda r: ["ingest", "--db", "/dev/null", str(r / "data")], "--db", "not a regular file"),
    ("sql --db device", lambda r: ["sql", "--db", "/dev/null", "SELECT 1"], "--db", "not a regular file"),
    ("doctor --wait -1", lambda r: ["doctor", "--db", str(r / "store.duckdb"), "--wait", "-1"],
     "--wait", "expected a number >= 0"),
    ("sql --max-rows -1", lambda r: ["sql", "--db", str(r / "store.duckdb"), "--max-rows", "-1", "SELECT 1"],
     "--max-rows", POSITIVE),
    # unknown methods, benchmarks, devices
    ("evaluate --method unknown", _evaluate("-k", "3", "--method", "no-such-method"), "--method", "unknown method"),
    ("fit --method unknown", _fit("--method", "no-such-method"), "--method", "unknown method"),
    ("evaluate --benchmark unknown", _evaluate("-k", "3", "--benchmark", "no-such-bench"), "--benchmark",
     "no benchmark"),
    ("evaluate --benchmark empty list", _evaluate("-k", "3", "--benchmark", ","), "--benchmark",
     "expected benchmark names"),
    ("fit --benchmark unknown", lambda r: ["fit", "--data", str(r / "data"), "--benchmark", "nope", "-k", "3",
                                           "--out", str(r / "out" / "p")], "--benchmark", "no benchmark"),
    ("predict --benchmark unpublished", lambda r: ["predict", "--benchmark", "nope", "--registry",
                                                   str(r / "emptydir"), "--answers", str(r / "answers.parquet")],
     "--benchmark", "not a predictor folder"),
    ("export --benchmark unpublished", lambda r: ["export", "--benchmark", "nope", "--registry",
                                                  str(r / "emptydir"), "--out", str(r / "out" / "a.json")],
     "--benchmark", "not a predictor folder"),
    ("fit --device unknown", _fit("--device", "tpu9"), "--device", "expected auto, cpu, cuda"),
    ("evaluate --device unknown", _evaluate("-k", "3", "--device", "tpu9"), "--device", "expected auto, cpu, cuda"),
    # empty after filtering: every model of the benchmark lacks a score
    ("fit unscored benchmark", lambda r: ["fit", "--data", str(r / "unscored"), "--benchmark", "toy", "-k", "3",
                                          "--out", str(r / "out" / "p")],
     "--benchmark", "no model has a reported score"),
    ("evaluate unscored benchmark", lambda r: ["evaluate", "--data", str(r / "unscored"), "-k", "3",
                                               "--seeds", "1", "--no-progress"],
     "'toy'", "no model has a reported score"),
    ("predict answers of another benchmark", lambda r: ["predict", "--predictor", str(r / "predictor"),
                                                        "--answers", str(r / "other.parquet")],
     "--answers", "missing column 'item_id'"),
    ("compare unknown model", lambda r: ["compare", "org0/model-0", "nobody/none", "--predictor",
                                         str(r / "predictor"), "--answers", str(r / "answers.parquet")],
     "nobody/none", "has no answers for benchmark"),
    ("refresh --benchmark unknown", lambda r: ["refresh", "--db", str(r / "store.duckdb"), "--benchmark", "nope"],
     "--benchmark", "the store holds no 'nope'"),
    ("sql syntax error", lambda r: ["sql", "--db", str(r / "store.duckdb"), "SELEC 1"], "SELEC", "syntax error"),
    ("sql write refused", lambda r: ["sql", "--db", str(r / "store.duckdb"), "DROP TABLE responses"],
     "read-only", "read-only"),
    ("missing required argument", lambda r: ["fit", "--data", str(r / "data"), "-k", "3"],
     "--benchmark", "arguments are required"),
    ("unknown option", lambda r: ["predict", "--predictor", str(r / "predictor"), "--answers",
                                  str(r / "answers.parquet"), "--no-such-option"],
     "--no-such-option", "unrecognized arguments"),
]

ROWS: list[Row] = _db_rows() + _predictor_rows() + _answers_rows() + _data_rows() + VALUE_ROWS


@pytest.mark.parametrize(("argv", "names", "reason"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_bad_input_gets_one_line_and_changes_nothing(inputs: Path, argv: Callable[[Path], list[str]], names: str,
                                                     reason: str, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.rmtree(inputs / "out", ignore_errors=True)
    before = _digest(inputs)
    capsys.readouterr()
    args = argv(inputs)
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own exit: no traceback either
        code = exc.code if isinstance(exc.code, int) else 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code not in (0, None), err
    assert "Traceback" not in err
    assert len(lines) == 1, err
    # the line names the argument: by its flag, or by the value given to it (a path names the file)
    given = args[args.index(names) + 1] if names in args[:-1] else None
    assert names in lines[0] or (given is not None and given in lines[0]), lines[0]
    assert re.search(reason, lines[0], re.IGNORECASE), f"the line does not say {reason!r}: {lines[0]}"
    assert _digest(inputs) == before  # nothing changed, nothing written beside the inputs


def test_table_covers_every_command() -> None:
    from sparseeval.interfaces.cli import COMMANDS

    covered = {row[1](Path("/x"))[0] for row in ROWS}
    assert covered == set(COMMANDS)
    assert len(ROWS) >= 140


def test_ingest_of_a_bad_file_refuses_it_and_records_why(inputs: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Accepted case: the store (a new one here) keeps an audit row of the refusal; the file is untouched."""
    before = _digest(inputs)
    db = tmp_path / "new.duckdb"
    capsys.readouterr()
    assert main(["ingest", "--db", str(db), str(inputs / "table.csv")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(inputs / "table.csv") in err[0], err
    assert _digest(inputs) == before
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT status FROM ingests").fetchall() == [("refused",)]
        assert con.execute("SELECT count(*) FROM responses").fetchone() == (0,)


def test_seed_zero_is_a_seed(inputs: Path, tmp_path: Path) -> None:
    """Accepted case: ``--seed 0`` fits, and another seed gives another split."""
    fitted = {}
    for seed in ("0", "1"):
        out = tmp_path / f"p{seed}"
        assert main(["-q", "fit", "--data", str(inputs / "data"), "--benchmark", "toy", "-k", str(K_OK),
                     "--method", "sparseeval-linear", "--seed", seed, "--out", str(out), "--device", "cpu"]) == 0
        fitted[seed] = json.loads((out / "predictor.json").read_text())
    assert fitted["0"]["calibration"] != fitted["1"]["calibration"]  # another split, other held-out models


def test_the_console_script_prints_one_line_for_a_foreign_duckdb(inputs: Path) -> None:
    """The same refusal through a real process: exit 2, one line, no traceback, the file unchanged."""
    other = inputs / "foreign.duckdb"
    before = hashlib.sha256(other.read_bytes()).hexdigest()
    done = subprocess.run([sys.executable, "-m", "sparseeval.interfaces.cli", "ingest", "--db", str(other),
                           str(inputs / "data")], capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(lines) == 1 and str(other) in lines[0] and "not a sparseeval store" in lines[0]
    assert hashlib.sha256(other.read_bytes()).hexdigest() == before


def test_the_console_script_prints_one_line_for_a_bad_option() -> None:
    done = subprocess.run([sys.executable, "-m", "sparseeval.interfaces.cli", "evaluate", "--data", ".", "-k", "0"],
                          capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "-k" in lines[0] and "Traceback" not in done.stderr
