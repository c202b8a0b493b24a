"""A hostile corpus: inputs built to make the store silently wrong, one class per test group.

Each case asserts the message a user sees and that the store holds exactly what it held before
(row count and order-independent hash of every data table: ``db_fingerprint``). The classes follow
``docs/reliability.md``; the fault cases (publish failure, kill, Ctrl-C, locks) are in test_faults.py.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from sparseeval.data.access.answers import read_answers
from sparseeval.data.access.sources import read_data
from sparseeval.data.matrix import build_matrix
from sparseeval.data.readers.base import InputError
from sparseeval.data.store import Store
from sparseeval.estimate.splits import make_split


def _long(rows: list[tuple], **extra: list) -> pl.DataFrame:
    frame = pl.DataFrame(rows, schema=["model", "benchmark", "item_id", "score"], orient="row")
    return frame.with_columns(**{k: pl.Series(v) for k, v in extra.items()})


def _current(store: Store, benchmark: str = "arc") -> list[tuple]:
    return store.query("SELECT model, item_id, score FROM responses WHERE benchmark = $b ORDER BY ALL",
                       {"b": benchmark}).rows()


# --- 1. a path is a path ------------------------------------------------------------------------------

def test_glob_characters_in_names_read_exactly_that_file(tmp_path: Path, tmp_db: Path) -> None:
    _long([("m1", "arc", "a", 1.0)]).write_parquet(tmp_path / "run1.parquet")
    _long([("m2", "arc", "a", 0.0)]).write_parquet(tmp_path / "run2.parquet")
    own = tmp_path / "run[12].parquet"
    _long([("mine", "arc", "z", 1.0)]).write_parquet(own)
    store = Store(tmp_db)
    report = store.ingest(own)
    assert [f.status for f in report.files] == ["ok"]
    assert _current(store) == [("mine", "z", 1.0)]  # not run1's and run2's rows

    csv = tmp_path / "x[1].csv"
    csv.write_text("model,benchmark,item_id,score\nmine,arc,z,1\n")
    (tmp_path / "x1.csv").write_text("model,benchmark,item_id,score\nother,arc,z,0\n")
    assert read_data(csv).responses.rows() == [("mine", "arc", "z", 1.0)]
    assert read_answers(csv).select("model", "item_id", "score").rows() == [("mine", "z", 1.0)]
    star = tmp_path / "a*.jsonl"
    star.write_text('{"model": "mine", "benchmark": "arc", "item_id": "q", "score": 1}\n')
    (tmp_path / "ab.jsonl").write_text('{"model": "x", "benchmark": "arc", "item_id": "q", "score": 0}\n')
    assert read_data(star).responses.get_column("model").to_list() == ["mine"]


# --- 2. types are checked before they are trusted -----------------------------------------------------

def test_mixed_json_types_in_a_key_column_are_refused(tmp_path: Path, tmp_db: Path, db_fingerprint) -> None:
    store = Store(tmp_db)
    store.ingest(_write(tmp_path / "good.parquet", _long([("m", "arc", "0", 1.0)])))
    before = db_fingerprint(tmp_db)
    bad = tmp_path / "mixed.jsonl"
    lines = [{"model": "m", "benchmark": "arc", "item_id": str(i), "score": 1} for i in range(5)]
    lines.insert(3, {"model": "m", "benchmark": "arc", "item_id": 99, "score": 0})
    bad.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    entry = store.ingest(bad).files[0]
    assert entry.status == "refused"
    assert "mixed.jsonl, line 4, column 'item_id': column 'item_id' mixes types: ubigint here, varchar" in entry.reason
    assert db_fingerprint(tmp_db) == before
    mixed_model = tmp_path / "model.jsonl"
    mixed_model.write_text('{"model": "m", "benchmark": "arc", "item_id": "1", "score": 1}\n\n'
                           '{"model": 7, "benchmark": "arc", "item_id": "2", "score": 1}\n')
    with pytest.raises(InputError, match=r"model\.jsonl, line 3, column 'model': column 'model' mixes types"):
        read_data(mixed_model)


# --- 3. one truth for conflicts ----------------------------------------------------------------------

def test_read_data_refuses_what_ingest_refuses(tmp_path: Path, tmp_db: Path) -> None:
    folder = tmp_path / "two"
    folder.mkdir()
    _write(folder / "a.parquet", _long([("m", "arc", str(i), 1.0) for i in range(10)]))
    _write(folder / "b.parquet", _long([("m", "arc", str(i), 0.0 if i < 3 else 1.0) for i in range(10)]))
    with pytest.raises(InputError, match=r"b\.parquet: conflicting response .* in already ingested file "
                                         r".*a\.parquet.*3 conflicting row"):
        read_data(folder)
    report = Store(tmp_db).ingest(folder)
    assert [f.status for f in report.files] == ["ok", "refused"]
    assert "3 conflicting row(s)" in report.files[1].reason


# --- 5. validate what you insert ---------------------------------------------------------------------

def test_a_file_rewritten_during_ingest_stores_what_was_validated(tmp_path: Path, tmp_db: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import sparseeval.data.store.ingest as ingest_module

    path = _write(tmp_path / "live.parquet", _long([("m", "arc", str(i), 1.0) for i in range(50)]))
    real_bulk = ingest_module.bulk_long

    def rewrite_then_check(copy: Path):  # a producer rewrites the file while the sensor's ingest runs
        _write(path, _long([("m", "arc", str(i), 0.0) for i in range(60)]))
        return real_bulk(copy)

    monkeypatch.setattr(ingest_module, "bulk_long", rewrite_then_check)
    store = Store(tmp_db)
    entry = store.ingest(path).files[0]
    assert entry.status == "ok" and entry.n_responses == 50
    assert {s for _, _, s in _current(store)} == {1.0}  # the validated bytes, not the rewrite
    monkeypatch.setattr(ingest_module, "bulk_long", real_bulk)
    again = store.ingest(path).files[0]  # the rewrite is a new version of the same file
    assert again.status == "ok" and again.n_superseded == 1
    assert len(_current(store)) == 60 and {s for _, _, s in _current(store)} == {0.0}


# --- 6. removed rows and corrections; re-runs with history ----------------------------------------------

def test_a_changed_file_supersedes_its_previous_version(tmp_path: Path, tmp_db: Path) -> None:
    path = tmp_path / "table.csv"
    path.write_text("model,benchmark,item_id,score\na,arc,1,1\na,arc,2,0\nb,arc,1,1\nb,gsm8k,1,1\n")
    store = Store(tmp_db)
    store.ingest(path)
    path.write_text("model,benchmark,item_id,score\na,arc,1,1\n")  # lost rows and a whole model
    entry = store.ingest(path).files[0]
    assert entry.status == "ok" and entry.n_superseded == 3  # a/arc, b/arc, b/gsm8k
    assert _current(store) == [("a", "1", 1.0)]
    assert store.query("SELECT count(*) FROM responses WHERE benchmark = 'gsm8k'").item() == 0
    history = store.query("SELECT model, item_id, is_current FROM response_history WHERE benchmark = 'arc' "
                          "ORDER BY ALL")
    assert history.rows() == [("a", "1", False), ("a", "1", True), ("a", "2", False), ("b", "1", False)]
    assert store.ingest(path).files[0].status == "skipped"  # unchanged bytes: a no-op


def test_newer_runs_replace_older_ones_and_older_ones_become_history(tmp_path: Path, tmp_db: Path,
                                                                    db_fingerprint) -> None:
    from datetime import datetime

    def run(name: str, when: datetime, score: float) -> Path:
        return _write(tmp_path / name, _long([("m", "arc", str(i), score) for i in range(4)],
                                             run_at=[when] * 4, n_shot=[25] * 4))

    may, june = datetime(2024, 5, 1), datetime(2024, 6, 1)
    store = Store(tmp_db)
    store.ingest(run("may.parquet", may, 0.0))
    entry = store.ingest(run("june.parquet", june, 1.0)).files[0]
    assert entry.n_superseded == 1 and {s for *_, s in _current(store)} == {1.0}
    late = store.ingest(run("april.parquet", datetime(2024, 4, 1), 0.5)).files[0]  # arrives late, is older
    assert late.status == "ok" and late.n_superseded == 0
    assert {s for *_, s in _current(store)} == {1.0}
    runs = store.query("SELECT run_at, superseded_in IS NULL AS current, n_shot FROM runs ORDER BY run_at")
    assert runs.rows() == [(datetime(2024, 4, 1), False, 25), (may, False, 25), (june, True, 25)]
    before = db_fingerprint(tmp_db)
    clash = store.ingest(run("june-again.parquet", june, 0.0)).files[0]  # same run time, other answers
    assert clash.status == "refused"
    assert "june-again.parquet: conflicting response" in clash.reason and "june.parquet" in clash.reason
    assert db_fingerprint(tmp_db) == before


def test_settings_make_variants_never_pooled(tmp_path: Path, tmp_db: Path) -> None:
    zero = _write(tmp_path / "zero.parquet", _long([("m", "arc_challenge", "1", 1.0)], n_shot=[0]))
    leaderboard = _write(tmp_path / "lb.parquet", _long([("m", "arc", "1", 0.0)], n_shot=[25]))
    store = Store(tmp_db)
    assert not store.ingest([zero, leaderboard]).refused  # no conflict: two variants
    assert store.benchmarks() == ["arc", "arc@0shot"]
    limited = tmp_path / "limited.csv"
    limited.write_text("model,benchmark,score,limit\nm,gsm8k,0.5,12\n")
    entry = store.ingest(limited).files[0]
    assert entry.status == "refused" and "a --limit run's aggregate is not a full-benchmark score" in entry.reason
    mixed = _write(tmp_path / "mixed.parquet", _long([("m", "hellaswag", "1", 1.0), ("m", "hellaswag", "2", 1.0)],
                                                     metric=["acc_norm", "acc_norm"], filter=["none", "x"]))
    assert "one run mixes several values of setting 'filter'" in store.ingest(mixed).files[0].reason


# --- 7. targets ---------------------------------------------------------------------------------------

def test_row_mean_is_a_target_only_when_declared(tmp_path: Path) -> None:
    responses = _long([("a", "arc", "1", 1.0), ("a", "arc", "2", 1.0), ("b", "arc", "1", 0.0),
                       ("b", "arc", "2", 1.0)])
    scores = pl.DataFrame({"model": ["a"], "benchmark": ["arc"], "score": [0.4]})
    m = build_matrix(responses, scores, "arc")
    assert m.models == ["a"] and m.dropped_models == ["b"]  # b's subset mean is not its score
    assert build_matrix(responses, scores, "arc", row_mean_is_score=True).models == ["a", "b"]


# --- 14. error messages -------------------------------------------------------------------------------

def test_messages_name_the_real_line_and_the_real_problem(tmp_path: Path) -> None:
    blank = tmp_path / "blank.csv"
    blank.write_text('model,benchmark,item_id,score,comment\nm,arc,1,1,\n\nm,arc,2,1,"two\nlines"\n\nm,arc,3,1.5,\n')
    with pytest.raises(InputError, match=r"blank\.csv, line 7, column 'score': score outside \[0, 1\]"):
        read_data(blank)
    newline_id = tmp_path / "newline.csv"
    newline_id.write_text('model,benchmark,item_id,score\nm,arc,1,1\n\nm,arc,"two\nlines",1\n')
    with pytest.raises(InputError, match=r"^\S*newline\.csv, line 4, column 'item_id': item_id contains a control"):
        read_data(newline_id)
    semicolon = tmp_path / "semi.csv"
    semicolon.write_text("model;benchmark;item_id;score\nm;arc;1;1\n")
    with pytest.raises(InputError, match=r"semi\.csv, line 1: the file is separated by ';', not ','"):
        read_data(semicolon)
    tabbed = tmp_path / "tabs.csv"
    tabbed.write_text("model\tbenchmark\titem_id\tscore\nm\tarc\t1\t1\n")
    with pytest.raises(InputError, match=r"separated by tab, not ','.* or name it \.tsv"):
        read_data(tabbed)
    zipped = tmp_path / "z.csv"
    zipped.write_bytes(gzip.compress(b"model,benchmark,item_id,score\nm,arc,1,1\n"))
    with pytest.raises(InputError, match=r"z\.csv: the file is gzip-compressed but named '\.csv'"):
        read_data(zipped)
    proper = tmp_path / "z.csv.gz"
    proper.write_bytes(zipped.read_bytes())
    assert read_data(proper).responses.rows() == [("m", "arc", "1", 1.0)]
    nul = tmp_path / "nul.csv"
    with nul.open("wb") as fh:  # 8 MB of NUL bytes: refused after the first block, never parsed
        fh.write(b"model,benchmark,item_id,score\n")
        fh.write(b"\0" * (8 << 20))
    with pytest.raises(InputError, match=r"nul\.csv, line 2: binary data: NUL byte at byte 30"):
        read_data(nul)


# --- 15. names ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["evil\nmodel", "nul\0model", "tab\tmodel", "zero\u200bwidth", "bidi\u202emodel"])
def test_control_and_invisible_characters_in_model_names_are_refused(tmp_path: Path, tmp_db: Path,
                                                                     name: str) -> None:
    path = _write(tmp_path / "names.parquet", _long([(name, "arc", "1", 1.0)]))
    entry = Store(tmp_db).ingest(path).files[0]
    assert entry.status == "refused"
    assert "model contains a control or invisible character" in entry.reason


def test_case_only_variants_are_reported_and_kept_on_one_side(tmp_path: Path, tmp_db: Path) -> None:
    store = Store(tmp_db)
    store.ingest(_write(tmp_path / "a.parquet", _long([("Org/Model-7B", "arc", "1", 1.0)])))
    entry = store.ingest(_write(tmp_path / "b.parquet", _long([("org/model-7b", "arc", "1", 1.0)]))).files[0]
    assert entry.status == "ok"
    assert [(n.status, n.part) for n in entry.notes] == [("warning", "model 'org/model-7b'")]
    assert "differs from model 'Org/Model-7B' only by case" in entry.notes[0].reason
    models = [f"m{i}" for i in range(40)] + ["M3", "M7", "m\u00e9", "me\u0301"]  # NFC vs NFD too
    for seed in range(10):
        split = make_split(models, seed=seed)
        sides = {models[i]: side for side, idx in (("train", split.train), ("val", split.val),
                                                    ("test", split.test)) for i in idx}
        assert sides["m3"] == sides["M3"] and sides["m7"] == sides["M7"] and sides["m\u00e9"] == sides["me\u0301"]


def _write(path: Path, frame: pl.DataFrame) -> Path:
    frame.write_parquet(path)
    return path


# --- re-runs of a real lm-eval output folder (issue: a folder that gains a second run) --------------------

REAL_RUN = Path(__file__).parent / "fixtures" / "real_formats" / "lm_eval_0.4.13" / "dummy"
REAL_STAMP = "2026-12-03T06-24-51.465794"


def _rerun(src: Path, dst: Path, stamp: str, flip: bool) -> None:
    """Copy lm-eval's own output under another run timestamp; ``flip`` answers every toy_a doc right."""
    dst.mkdir(parents=True, exist_ok=True)
    for file in src.iterdir():
        text = file.read_text()
        if flip and file.name.startswith("samples_toy_a"):
            lines = [json.loads(line) for line in text.splitlines() if line.strip()]
            text = "".join(json.dumps({**x, "acc": 1.0, "acc_norm": 1.0}) + "\n" for x in lines)
        if flip and file.name.startswith("results_"):
            data = json.loads(text)
            data["results"]["toy_a"].update({"acc,none": 1.0, "acc_norm,none": 1.0})
            data["date"] = data["date"] + 3600
            text = json.dumps(data)
        (dst / file.name.replace(REAL_STAMP, stamp)).write_text(text)


def test_a_model_folder_that_gains_a_run_updates_with_history(tmp_path: Path, tmp_db: Path, db_fingerprint) -> None:
    import shutil

    folder = tmp_path / "out" / "dummy"
    shutil.copytree(REAL_RUN, folder)
    store = Store(tmp_db)
    first = store.ingest(folder).files[0]
    assert first.status in ("ok", "partial"), first.reason
    before = store.query("SELECT benchmark, item_id, score FROM responses ORDER BY ALL").rows()
    _rerun(REAL_RUN, folder, "2026-12-03T07-24-51.465794", flip=True)  # lm-eval writes a 2nd run beside
    second = store.ingest(folder).files[0]
    assert second.status in ("ok", "partial") and second.n_superseded >= 1, second
    assert second.replaced == [(str(folder), second.n_superseded)]  # ingest says what it replaced
    now = store.query("SELECT benchmark, item_id, score FROM responses ORDER BY ALL").rows()
    assert now != before
    toy_a = store.query("SELECT DISTINCT score FROM responses WHERE benchmark = 'toy_group@3shot' "
                        "AND starts_with(item_id, 'toy_a.')")
    assert toy_a.rows() == [(1.0,)]  # the later run's answers are current
    history = store.query("SELECT count(*) FROM response_history WHERE NOT is_current").item()
    assert history > 0  # the first run's rows are kept, not deleted
    assert store.ingest(folder).files[0].status == "skipped"  # unchanged: a no-op
    # a true conflict: another folder with the same run time but other answers
    other = tmp_path / "elsewhere" / "dummy"
    _rerun(REAL_RUN, other, "2026-12-03T07-24-51.465794", flip=False)
    data = json.loads(next(other.glob("results_*.json")).read_text())
    assert data["date"]  # same date as the second run after the edit below
    results = next(other.glob("results_*.json"))
    results.write_text(json.dumps({**data, "date": json.loads(next(folder.glob(
        "results_2026-12-03T07*.json")).read_text())["date"]}))
    snapshot = db_fingerprint(tmp_db)
    clash = store.ingest(other).files[0]
    assert clash.status == "refused" and "conflicting" in clash.reason and str(folder) in clash.reason
    assert db_fingerprint(tmp_db) == snapshot


# --- 12. Ctrl-C stops a folder ingest -------------------------------------------------------------------

@pytest.mark.slow
def test_ctrl_c_stops_the_ingest_and_records_it_as_interrupted(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    import duckdb

    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(40):  # enough units that the interrupt lands in the middle
        _write(folder / f"part{i:02d}.parquet", _long([(f"m{i}", "arc", str(j), 1.0) for j in range(2000)]))
    db = tmp_path / "s.duckdb"
    proc = subprocess.Popen([sys.executable, "-m", "sparseeval.interfaces.cli", "ingest", str(folder), "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Ctrl-C a little after the first unit is stored (its progress line): a few units in, with ~35 to go
    # whatever the load (a unit takes ~60 ms here)
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if not line or "ingest 1:" in line:
            break
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    err = "".join(seen) + err
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err
    with duckdb.connect(str(db), read_only=True) as con:
        statuses = dict(con.execute("SELECT status, count(*) FROM ingests GROUP BY ALL").fetchall())
        stored = con.execute("SELECT count(DISTINCT model) FROM responses").fetchone()[0]
    # the unit being read is rolled back and recorded as interrupted; a Ctrl-C that lands in the instant
    # between two units has no unit in progress to record (the in-read forms are forced in the next test)
    assert statuses.get("interrupted", 0) <= 1 and "refused" not in statuses
    assert statuses.get("ok", 0) == stored < 40  # stopped: no further file was read


@pytest.mark.parametrize("surfaced_as", ["query interrupted", "arrow scan", "keyboard interrupt"])
def test_ctrl_c_inside_a_read_stops_the_ingest_whatever_form_duckdb_gives_it(
        tmp_path: Path, surfaced_as: str) -> None:
    """DuckDB hands a SIGINT back in several forms: a bare "Query interrupted" RuntimeError from a
    read that noticed it, or an error wrapping the KeyboardInterrupt raised in an Arrow scan. Before
    the fix the first two were filed as "refused: RuntimeError ..." and the ingest read every other
    file (measured: 3 of 20 real Ctrl-C's under load). Each form must stop the ingest at that unit."""
    import duckdb

    from sparseeval.data.store.ingest import default_reader

    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(3):
        _write(folder / f"part{i}.parquet", _long([(f"m{i}", "arc", str(j), 1.0) for j in range(5)]))

    def reader(path: Path):  # the real reader, with Ctrl-C landing while the second file is read
        if path.name.startswith("part1"):
            if surfaced_as == "query interrupted":
                raise RuntimeError("Query interrupted")
            if surfaced_as == "arrow scan":
                try:
                    raise KeyboardInterrupt
                except KeyboardInterrupt as exc:
                    raise duckdb.InvalidInputException(
                        "Invalid Input Error: reading the object registered as '_new_models' as Arrow data "
                        "failed: KeyboardInterrupt: ") from exc
            raise KeyboardInterrupt
        return default_reader(path)

    store = Store(tmp_path / "s.duckdb")
    with pytest.raises(KeyboardInterrupt):
        store.ingest(folder, reader=reader)
    statuses = dict(store.query("SELECT status, count(*) FROM ingests GROUP BY ALL").rows())
    assert statuses == {"ok": 1, "interrupted": 1}  # part2 never read, nothing filed as refused
    assert store.query("SELECT DISTINCT model FROM responses").to_series().to_list() == ["m0"]


def test_a_genuine_reader_error_is_still_the_files_fault_and_the_ingest_goes_on(tmp_path: Path) -> None:
    from sparseeval.data.store.ingest import default_reader

    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(3):
        _write(folder / f"part{i}.parquet", _long([(f"m{i}", "arc", str(j), 1.0) for j in range(5)]))

    def reader(path: Path):
        if path.name.startswith("part1"):
            raise RuntimeError("the reader tripped over this file")
        return default_reader(path)

    report = Store(tmp_path / "s.duckdb").ingest(folder, reader=reader)
    assert [f.status for f in report.files] == ["ok", "refused", "ok"]
    assert "part1.parquet: RuntimeError: the reader tripped over this file" in report.files[1].reason


# --- settings travel from the data to the predictor, export and predict -------------------------------

def test_settings_travel_to_the_predictor_export_and_predict(tmp_path: Path) -> None:
    import numpy as np

    from sparseeval.estimate.fitting import fit_predictor
    from sparseeval.interfaces.commands.predict import predict_all
    from sparseeval.interfaces.export import lm_eval_commands

    rng = np.random.default_rng(0)
    ability = rng.normal(size=60)
    rows = [(f"org/m{m}", "arc_challenge", str(i), float(ability[m] + rng.normal() > i / 10 - 0.5))
            for m in range(60) for i in range(12)]
    responses = _long(rows, n_shot=[25] * len(rows), metric=["acc_norm"] * len(rows))
    responses.write_parquet(tmp_path / "responses.parquet")
    frame = responses.group_by("model").agg(score=pl.col("score").mean()).with_columns(benchmark=pl.lit("arc"))
    frame.select("model", "benchmark", "score").write_parquet(tmp_path / "scores.parquet")
    data = read_data(tmp_path)
    assert data.settings["arc"]["n_shot"] == 25 and data.settings["arc"]["metric"] == "acc_norm"
    art = fit_predictor(data.responses, data.scores, "arc", 4, "sparseeval-linear", settings=data.settings["arc"])
    saved = art.save(tmp_path / "pred")
    assert saved.extra["settings"]["n_shot"] == 25
    [command] = lm_eval_commands([saved], "anchors.json")
    assert "--tasks arc_challenge --num_fewshot 25 --samples anchors.json" in command
    zero_shot = pl.DataFrame({"model": "new", "benchmark": "arc@0shot", "item_id": saved.anchor_item_ids,
                              "score": 1.0})
    with pytest.raises(ValueError, match=r"run as 'arc@0shot' \(0-shot\) but the predictor 'arc' was trained "
                                         r"on 25-shot .*--force-settings"):
        predict_all([saved], zero_shot)
    [forced] = predict_all([saved], zero_shot, force_settings=True)
    assert any("forced onto 25-shot" in w for w in forced.warnings)
