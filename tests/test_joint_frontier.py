"""The joint predictor on models stronger than every model it learned from (issue 29): its frontier
self-check, cut on the mean score and measured output by output, and cut on each benchmark's own score
for that benchmark's output, gates its publication like a benchmark's, and its figures reach the refresh
result, DuckDB, MLflow, predictor.json and ``predict``.

Real DuckDB, real MLflow (local store), real fits on synthetic leaderboards with known truth; nothing
is mocked.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from mlflow import MlflowClient

from sparseeval.core.settings import RefreshSettings
from sparseeval.data.access.matrix_store import MatrixStore
from sparseeval.data.matrix import build_matrix
from sparseeval.data.store import Store
from sparseeval.data.synthetic import generate_leaderboard, write_leaderboard
from sparseeval.estimate.artifact import load_predictor
from sparseeval.estimate.evaluation import (
    MIN_FRONTIER_MODELS,
    ProtocolConfig,
    joint_frontier_selfcheck,
    joint_own_cut_selfcheck,
)
from sparseeval.estimate.frontier import (
    ALL_RIGHT,
    AT_TOP,
    ON_THE_MEAN,
    STRONGER,
    UNLIKE,
    Guarded,
    carry_overall,
    direction,
    opens_upward,
)
from sparseeval.estimate.methods.joint import JOINT_METHOD, MEAN, JointData, joint_data
from sparseeval.estimate.predicting import predict
from sparseeval.estimate.selfcheck import own_cut_label
from sparseeval.estimate.splits import frontier_cut, make_split
from sparseeval.interfaces.cli import main as cli_main
from sparseeval.interfaces.commands.next import plan
from sparseeval.publish.publishing import published_path
from sparseeval.publish.refresh import frontier_check
from sparseeval.publish.refresh_joint import refresh_joint
from sparseeval.publish.tracking import TrackingConfig, ensure_experiment

pytestmark = pytest.mark.slow

BENCHES = {"arc": 60, "mmlu": 70}
K = 5


@pytest.fixture(scope="module")
def board():
    return generate_leaderboard(n_families=30, models_per_family=10, benchmarks=BENCHES, seed=7)


@pytest.fixture(scope="module")
def data(board) -> JointData:
    responses = board.responses.rename({"correct": "score"}).with_columns(pl.col("score").cast(pl.Float64))
    return joint_data([build_matrix(responses.filter(pl.col("benchmark") == b),
                                    board.scores.filter(pl.col("benchmark") == b), b) for b in BENCHES])


def test_the_joint_selfcheck_cuts_on_the_mean_score_and_reads_only_its_rows(data: JointData) -> None:
    """Every output is scored on the same models: the rows' models above the 90th percentile of *their*
    mean score. Models outside ``rows`` (the candidate's held-out models) cannot change a figure: scramble
    their answers and scores and the figures stay the same."""
    split = make_split(data.models, policy="random", val_frac=0.1, test_frac=0.2, seed=0)
    rows = np.concatenate([split.train, split.val])
    figures = joint_frontier_selfcheck(data, rows, K, 0, device="cpu")
    assert list(figures) == [*BENCHES, MEAN]
    cut, beyond = frontier_cut(data.S[rows].mean(axis=1), 0.9)
    above = int(beyond.sum())
    assert above >= MIN_FRONTIER_MODELS
    for output, f in figures.items():
        assert f.measured and f.n == above and f.cut_on == MEAN and f.quantile == 0.9, (output, f)
        assert f.cut_score == pytest.approx(cut)  # the mean score's cut, not one benchmark's
        assert 0 <= f.silent_misses <= 1 - f.coverage + 1e-9 and f.mae > 0
    assert joint_frontier_selfcheck(_scrambled(data, split.test), rows, K, 0, device="cpu") == figures


def _scrambled(data: JointData, rows: np.ndarray) -> JointData:
    """``data`` with the models of ``rows`` (held out) scrambled: answers flipped, scores reversed."""
    Y, S = data.Y.copy(), data.S.copy()
    Y[rows] = 1.0 - Y[rows]
    S[rows] = 1.0 - S[rows]
    return JointData(data.benchmarks, data.models, data.columns, data.groups, Y, S)


def test_the_own_cut_selfcheck_scores_each_benchmark_above_its_own_cut_and_reads_only_its_rows(
        data: JointData) -> None:
    """Each benchmark output is scored on the rows' models above the 90th percentile of *that
    benchmark's* score (not the mean's); held-out models change nothing."""
    split = make_split(data.models, policy="random", val_frac=0.1, test_frac=0.2, seed=1)
    rows = np.concatenate([split.train, split.val])
    own = joint_own_cut_selfcheck(data, rows, K, 0, device="cpu")
    assert list(own) == list(BENCHES)
    for j, (bench, f) in enumerate(own.items()):
        cut, beyond = frontier_cut(data.S[rows, j], 0.9)
        assert f.measured and (f.cut_on, f.n, f.cut_score) == (bench, int(beyond.sum()), pytest.approx(cut))
        assert 0 <= f.silent_misses <= 1 - f.coverage + 1e-9 and f.mae > 0
    assert joint_own_cut_selfcheck(_scrambled(data, split.test), rows, K, 0, device="cpu") == own


def test_too_few_models_above_the_cut_measure_nothing_and_say_so(data: JointData) -> None:
    rows = np.arange(60)  # 6 models above the cut
    figures = joint_frontier_selfcheck(data, rows, K, 0, device="cpu")
    assert {o: f.measured for o, f in figures.items()} == {"arc": False, "mmlu": False, MEAN: False}
    assert "only 6 of 60 fitting models above the 0.9 quantile of the mean score" in figures[MEAN].note
    check = frontier_check(figures, 0.15)
    assert check.passed and "too few to measure" in check.metadata["note"]
    own = joint_own_cut_selfcheck(data, rows, K, 0, device="cpu")
    assert not any(f.measured for f in own.values())
    assert "above the 0.9 quantile of the mmlu score" in own["mmlu"].note


@pytest.fixture(scope="module")
def world(board, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("joint_frontier")
    write_leaderboard(board, root / "src")
    store = Store(root / "sparseeval.duckdb")
    store.ingest(root / "src")
    matrices = {b: MatrixStore.beside(store).update(store, b).matrix for b in BENCHES}
    return {"root": root, "store": store, "matrices": matrices, "tracking": TrackingConfig(data_dir=root),
            "board": board}


def _refresh(world: dict, silent_max: float):
    return refresh_joint(world["matrices"], world["store"], world["tracking"], world["root"] / "predictors",
                         RefreshSettings(k=K, method="sparseeval-linear", frontier_silent_max=silent_max), publish=True)


def test_the_joint_selfcheck_gates_publication_output_by_output_and_reaches_every_surface(
        world: dict, data: JointData, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No silent miss allowed: the joint candidate is rejected, the message naming each output's figures,
    and nothing is published. A bar between the worst output's share and the others' still rejects it,
    naming that output alone (every output gates, not only the mean). At a bar it meets it is published
    with the same figures (measured once, reused) in the result, DuckDB, MLflow and predictor.json, and
    ``predict`` reports them for an output that may lie above the training range."""
    store, root = world["store"], world["root"]
    strict = _refresh(world, 0.0)
    check = {c.name: c for c in strict.checks}["frontier_misses_flagged"]
    figures = check.metadata["figures"]
    own_labels = {own_cut_label(b): b for b in BENCHES}
    assert set(figures) == {*BENCHES, MEAN, *own_labels} and all(f["measured"] for f in figures.values())
    assert not check.passed and store.champion(JOINT_METHOD) is None and not strict.published
    assert not (root / "predictors" / JOINT_METHOD).exists()
    # measured on the joint split's fitting models only: its held-out models never enter the self-check
    config = ProtocolConfig.of(RefreshSettings())
    split = make_split(data.models, policy=config.split_policy, val_frac=config.val_frac, test_frac=config.test_frac,
                       seed=0)
    fitting = np.concatenate([split.train, split.val])
    above_mean_cut = int(frontier_cut(data.S[fitting].mean(axis=1), 0.9)[1].sum())
    assert {figures[o]["n"] for o in [*BENCHES, MEAN]} == {above_mean_cut}
    for label, b in own_labels.items():  # each benchmark output also above its own score's cut
        cut, beyond = frontier_cut(data.S[fitting, list(BENCHES).index(b)], 0.9)
        f = figures[label]
        assert (f["cut_on"], f["n"], f["cut_score"]) == (b, int(beyond.sum()), pytest.approx(cut, abs=1e-4))
    for output, f in figures.items():
        assert (f"{output}: {100 * f['silent_misses']:.1f} % of {f['n']} stronger models missed silently (max 0 %)"
                in check.metadata["message"])
    # every output gates: a bar only the worst output misses rejects the candidate for that output
    silent = {o: f["silent_misses"] for o, f in figures.items()}
    worst = max(silent, key=silent.get)
    assert worst != MEAN and sorted(silent.values())[-2] < silent[worst], silent  # this board's truth
    between = (sorted(silent.values())[-2] + silent[worst]) / 2
    mid = {c.name: c for c in _refresh(world, between).checks}["frontier_misses_flagged"]
    assert not mid.passed and mid.metadata["silent"] == [worst]
    assert store.champion(JOINT_METHOD) is None

    lenient = _refresh(world, 0.9)
    mean_cut = {o: silent[o] for o in [*BENCHES, MEAN]}
    own_cut = {b: silent[label] for label, b in own_labels.items()}
    assert lenient.passed and lenient.published
    assert store.champion(JOINT_METHOD)["anchor_set_id"] == lenient.proposed
    assert "measured on data version" in lenient.report.selfcheck.note()  # not measured a second time
    # the asset's metadata: one row per output
    table = lenient.report.outputs.to_dicts()
    assert {r["output"]: r["frontier_silent_misses"] for r in table} == pytest.approx(mean_cut, abs=1e-4)
    assert {r["output"]: r["frontier_own_cut_silent_misses"] for r in table} == pytest.approx(
        {**own_cut, MEAN: None}, abs=1e-4)
    # DuckDB: output by output in joint_frontier_selfcheck, the mean's in frontier_selfcheck's columns
    view = store.query("SELECT output, cut_on, frontier_silent, frontier_models, frontier_check_passed "
                       "FROM joint_frontier_selfcheck WHERE anchor_set_id = $i", {"i": lenient.proposed}).to_dicts()
    assert {r["output"]: r["frontier_silent"] for r in view if r["cut_on"] == MEAN} == pytest.approx(mean_cut, abs=1e-4)
    assert {r["output"]: r["frontier_silent"] for r in view if r["cut_on"] != MEAN} == pytest.approx(own_cut, abs=1e-4)
    assert all(r["cut_on"] in (MEAN, r["output"]) for r in view) and len(view) == len(silent)
    assert all(r["frontier_check_passed"] and r["frontier_models"] == figures[MEAN]["n"] for r in view
               if r["cut_on"] == MEAN)
    row = store.query("SELECT frontier_silent FROM frontier_selfcheck WHERE anchor_set_id = $i",
                      {"i": lenient.proposed}).to_dicts()[0]
    assert row["frontier_silent"] == pytest.approx(mean_cut[MEAN], abs=1e-4)
    # MLflow: every output's figures, on each candidate run
    client = MlflowClient(world["tracking"].resolved_tracking_uri)
    runs = client.search_runs([ensure_experiment(world["tracking"], client)],
                              f"tags.`sparseeval.step` = 'candidate' and params.method = '{JOINT_METHOD}'")
    assert len(runs) == 3
    for run in runs:
        assert {o: run.data.metrics[f"frontier/{o}/silent_misses"] for o in mean_cut} == pytest.approx(
            mean_cut, abs=1e-4)
        assert {b: run.data.metrics[f"frontier_own_cut/{b}/silent_misses"] for b in own_cut} == pytest.approx(
            own_cut, abs=1e-4)
    # the published predictor carries them, and predict reports them for an output above the range
    path = published_path(root / "predictors", JOINT_METHOD)
    published = load_predictor(path)
    stored = published.extra["frontier"]["outputs"]
    assert {o: stored[o]["silent_misses"] for o in mean_cut} == pytest.approx(mean_cut, abs=1e-4)
    stored_own = published.extra["frontier"]["own_cut"]
    assert {b: stored_own[b]["silent_misses"] for b in own_cut} == pytest.approx(own_cut, abs=1e-4)
    # a model stronger overall than every training model: the mean output's best training score set just
    # below the board's strongest model's predicted mean (as a newer, stronger model would be predicted)
    sheet = tmp_path / "answers.csv"
    top = world["board"].scores.group_by("model").agg(pl.col("score").mean()).sort("score").row(-1)[0]
    answers = world["board"].responses.filter(pl.col("model") == top).join(
        pl.DataFrame(published.anchors).select("benchmark", "item_id"), on=["benchmark", "item_id"])
    answers.write_csv(sheet)
    own = {p.benchmark: p for p in predict(published, answers.rename({"correct": "score"}))}
    outputs = published.calibration["outputs"]
    lowered = {**outputs[MEAN], "frontier": {**outputs[MEAN]["frontier"], "score_max": own[MEAN].predicted - 0.01}}
    stronger = replace(published, calibration={**published.calibration, "outputs": {**outputs, MEAN: lowered}})
    stronger.save(tmp_path / "stronger")
    capsys.readouterr()
    assert cli_main(["predict", "--predictor", str(tmp_path / "stronger"), "--answers", str(sheet), "--no-db",
                     "--json", "-"]) == 0
    out, err = capsys.readouterr()
    records = {r["benchmark"]: r for r in json.loads(out)}
    assert all(direction(tuple(r["ood_reasons"])) > 0 for r in records.values()), records  # every output
    for bench in BENCHES:  # each benchmark carries the mean's reason, upper side opened, point and lower kept
        if not opens_upward(own[bench].ood_reasons):
            assert records[bench]["ood_reasons"][-1].startswith(STRONGER)
            assert records[bench]["ood_reasons"][-1].endswith(ON_THE_MEAN)
            assert records[bench]["upper"] == 1.0
            assert (records[bench]["predicted"], records[bench]["lower"]) == pytest.approx(
                (own[bench].predicted, own[bench].lower))
    for output in records:  # one note per output concerned, with that output's figures
        f = stored[output]
        assert (f"1 {output} prediction(s) may lie above the training range: refitted on the weakest 90 % of its "
                f"own fitting models (by their mean score over its benchmarks), this predictor's method was off by "
                f"{f['mae']:.1f} points on average on the strongest 10 % ({f['n']} models; bias "
                f"{f['bias']:+.1f}") in err
    for bench in BENCHES:  # a benchmark output's note also gives its own score's cut
        f = stored_own[bench]
        assert (f"% of them fell outside their interval unflagged; cut on their {bench} score instead, off by "
                f"{f['mae']:.1f} points ({f['n']} models; bias {f['bias']:+.1f}") in err
    assert err.count("note: ") == len(records)
    # next flags a benchmark output as predict does (its mean's reason carried)
    step = plan(stronger, answers.rename({"correct": "score"}), output="arc")[0]
    assert step.reason == f"all anchors answered; flagged: {records['arc']['ood_reasons'][0]}"
    # the model card a Hub upload carries: the self-check output by output
    assert cli_main(["export", "--predictor", str(path), "--format", "model-card", "--repo", "team/joint",
                     "--out", str(tmp_path / "README.md")]) == 0
    card = (tmp_path / "README.md").read_text()
    assert "at or below the 0.9 quantile of their mean score" in card
    assert "at or below the 0.9 quantile of that benchmark's own score" in card
    for output, f in [*stored.items(), *stored_own.items()]:
        assert (f"| {output} | {f['mae']:.3f} | {f['bias']:.3f} | {f['coverage']:.3f} | {f['flagged']:.3f} | "
                f"{f['silent_misses']:.3f} | {f['n']} |") in card


def test_the_mean_outputs_upward_reasons_are_carried_to_benchmarks_without_their_own() -> None:
    """Row 0 stronger on the mean: carried and opened on a benchmark with no reason; row 1 at the top on the
    mean: carried, not opened (as at the top never opens); row 2 nothing on the mean: nothing carried; a
    benchmark with its own reason that opens keeps it alone; one with another reason gets the mean's beside
    it. Row 3 stronger on the mean, at the top on a benchmark: the mean's reason added and the side opened;
    row 4 at the top on both: the benchmark's own reason is not repeated."""
    def guarded(reasons: list[tuple[str, ...]]) -> Guarded:
        n = len(reasons)
        return Guarded(np.full(n, 0.5), np.full(n, 0.1), np.full(n, 0.4), np.full(n, 0.6), np.zeros(n), reasons)

    strong, top = f"{STRONGER} (predicted 90.0 > best training score 88.0)", AT_TOP
    outputs = {"arc": guarded([(), (), (), (top,), (top,)]),
               "mmlu": guarded([(ALL_RIGHT,), (UNLIKE,), (), (strong,), (UNLIKE,)]),
               MEAN: guarded([(strong,), (top,), (), (strong, top), (top,)])}
    carried = carry_overall(outputs, MEAN)
    assert carried[MEAN] is outputs[MEAN]
    assert carried["arc"].reasons == [(f"{strong}, {ON_THE_MEAN}",), (f"{top}, {ON_THE_MEAN}",), (),
                                      (top, f"{strong}, {ON_THE_MEAN}"), (top,)]
    assert list(carried["arc"].upper) == [1.0, 0.6, 0.6, 1.0, 0.6] and list(carried["arc"].pred) == [0.5] * 5
    assert carried["mmlu"].reasons == [(ALL_RIGHT,), (UNLIKE, f"{top}, {ON_THE_MEAN}"), (), (strong,),
                                       (UNLIKE, f"{top}, {ON_THE_MEAN}")]
    assert list(carried["mmlu"].upper) == [1.0, 0.6, 0.6, 1.0, 0.6]  # rows 0, 3 opened by their own reasons
