"""Models stronger than every training model: the frontier split, the guard's flags, the frontier check.

On the synthetic generator (known truth, seconds): a frontier split never lets a test model into
training, validation or calibration; an answer sheet with every anchor right is flagged, says why in
words, and the flag reaches ``predict --json``, ``compare`` and ``next``; the publishing check fails a
predictor whose misses on the stronger models are silent and carries its numbers.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sparseeval.core.settings import DEFAULT_BEYOND_PRIOR
from sparseeval.data.matrix import ResponseMatrix, build_matrix
from sparseeval.data.synthetic import generate_leaderboard
from sparseeval.estimate.adaptive import next_anchors
from sparseeval.estimate.evaluation import (
    ProtocolConfig,
    calibration_split,
    evaluate_method,
    frontier_selfcheck,
    split_for_seed,
)
from sparseeval.estimate.fitting import fit_predictor
from sparseeval.estimate.frontier import (
    ALL_RIGHT,
    ALL_WRONG,
    AT_TOP,
    STRONGER,
    UNLIKE,
    WEAKER,
    Guarded,
    direction,
    interval_figures,
    open_upward,
    reasons,
)
from sparseeval.estimate.predicting import Prediction, open_for_extrapolation, predict
from sparseeval.estimate.selfcheck import CutFigures, SelfCheck
from sparseeval.estimate.splits import frontier_cut, make_split
from sparseeval.interfaces.cli import main
from sparseeval.publish.refresh import publishing_checks
from tests.support import OPENLLM_DIR


def _matrix(lb, bench: str) -> ResponseMatrix:
    responses = lb.responses.rename({"correct": "score"}).with_columns(pl.col("score").cast(pl.Float64))
    return build_matrix(responses, lb.scores, bench)


def test_frontier_split_keeps_every_stronger_model_out_of_fitting_and_calibration(
        synthetic_matrix: ResponseMatrix) -> None:
    m = synthetic_matrix
    # a second spelling of the strongest model, scored just below the cut: it must not train on its twin
    best = int(np.argmax(m.scores))
    cut, _ = frontier_cut(m.scores, 0.9)
    twin = m.models[best].upper()
    models = [*m.models, twin]
    scores = np.append(m.scores, cut)
    for policy, beyond in (("frontier", scores > cut), ("frontier-low", scores < frontier_cut(scores, 0.9,
                                                                                              low=True)[0])):
        sp = make_split(models, policy=policy, val_frac=0.1, seed=4, scores=scores, frontier_quantile=0.9)
        fitting, cal = calibration_split(models, sp, 0.2, seed=4)
        seen = np.concatenate([fitting.train, fitting.val, cal])
        assert len(np.intersect1d(seen, sp.test)) == 0
        assert np.isin(np.flatnonzero(beyond), sp.test).all()  # every model beyond the cut is new
        assert len(seen) + len(sp.test) == len(models) and len(np.unique(seen)) == len(seen)
        assert len(cal) > 0 and len(fitting.val) > 0
    sp = make_split(models, policy="frontier", val_frac=0.1, seed=4, scores=scores)
    assert len(models) - 1 in sp.test  # the twin goes with the model it spells
    # the protocol runs on exactly these sides: counts add up to every model, none twice
    config = ProtocolConfig(split_policy="frontier", calibration_frac=0.2)
    split = split_for_seed(m, 0, config)
    result, _ = evaluate_method(m, split, "random-linear", 5, 0, config=config)
    assert result.n_train + result.n_val + result.n_cal + result.n_test == len(m.models)
    assert result.n_test == len(split.test) and (m.scores[split.test] > np.quantile(m.scores, 0.9)).all()
    assert result.coverage is not None and result.silent_misses is not None and result.bias is not None
    assert result.bias < 0  # fitted below the cut, the stronger models are predicted too low


def test_models_tied_at_the_cut_stay_on_the_training_side() -> None:
    scores = np.array([0.1, 0.2, 0.3, 0.4, 0.4, 0.4, 0.9])
    cut, beyond = frontier_cut(scores, 0.5)
    assert cut == 0.4 and beyond.tolist() == [False] * 6 + [True]
    cut, below = frontier_cut(scores, 0.5, low=True)
    assert cut == 0.4 and below.tolist() == [True] * 3 + [False] * 4


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A default-method predictor fitted on synthetic data, saved as ``sparseeval fit`` would."""
    lb = generate_leaderboard(n_families=40, models_per_family=10, benchmarks={"arc": 120}, seed=5)
    responses = lb.responses.rename({"correct": "score"}).with_columns(pl.col("score").cast(pl.Float64))
    art = fit_predictor(responses, lb.scores, "arc", 10, "sparseeval-headroom", seed=0, device="cpu",
                        method_params={"max_epochs": 100})  # a short MLP fit: the anchors are the point
    folder = tmp_path_factory.mktemp("pred") / "arc"
    art.save(folder)
    return art, folder, responses


def _sheet(art, model: str, values: list[float]) -> pl.DataFrame:
    return pl.DataFrame({"model": model, "benchmark": art.benchmark, "item_id": art.anchor_item_ids,
                         "score": values})


def test_every_anchor_right_is_flagged_with_its_reason_everywhere(published, tmp_path: Path, capsys) -> None:
    art, folder, responses = published
    guard = art.calibration["frontier"]
    assert guard["all_right_frac"] <= 0.05  # headroom anchors: all right is rare among training models
    typical = responses.filter(pl.col("model") == responses.get_column("model")[0])
    answers = pl.concat([_sheet(art, "ace/top", [1.0] * art.k), typical.select(_sheet(art, "x", [0.0] * art.k)
                                                                                .columns)])
    preds = {p.model: p for p in predict(art, answers)}
    ace = preds["ace/top"]
    assert ace.ood and ace.beyond == 1 and any(r.startswith(ALL_RIGHT) for r in ace.ood_reasons)
    # the anchors cannot bound it from above: its interval is one-sided (the lower side stays conformal)
    assert ace.upper == 1.0 and ace.lower < ace.predicted
    assert f"{100 * guard['all_right_frac']:.1f} % of the training models" in " ".join(ace.ood_reasons)
    # predict prints the reason and --json carries it
    csv = tmp_path / "ace.csv"
    pl.DataFrame({"item_id": art.anchor_item_ids, "correct": [1] * art.k}).write_csv(csv)
    out = tmp_path / "p.json"
    assert main(["predict", "--predictor", str(folder), "--answers", str(csv), "--model", "ace/top",
                 "--json", str(out)]) == 0
    assert ALL_RIGHT in capsys.readouterr().out
    row = json.loads(out.read_text())[0]
    assert row["ood"] is True and any(r.startswith(ALL_RIGHT) for r in row["ood_reasons"])
    # next never calls a flagged model done, however narrow its interval
    X = np.ones((1, art.k), dtype=np.float32)
    X[0, -1] = np.nan
    step = next_anchors(art, ["ace/top"], X, np.array([0.001]), np.array([0.9]), batch=1, target_width=0.5,
                        flags=[ace.ood_reasons])[0]
    assert not step.done and "flagged" in step.reason


def test_predict_opens_the_upper_side_of_a_model_flagged_stronger(published) -> None:
    """The same answer sheet scored twice: as an ordinary model (conformal interval), then with the
    guard's best training score set just below its prediction, so it is "stronger than every training
    model": the point and the lower side stay, the upper side goes to the top of the scale."""
    art, _, responses = published
    sheets = responses.filter(pl.col("item_id").is_in(art.anchor_item_ids))
    ordinary = [p for p in predict(art, sheets) if not p.ood and p.upper < 0.95]
    assert ordinary
    plain = ordinary[len(ordinary) // 2]
    guard = {**art.calibration["frontier"], "score_max": plain.predicted - 0.01}
    lowered = replace(art, calibration={**art.calibration, "frontier": guard})
    opened = predict(lowered, sheets.filter(pl.col("model") == plain.model))[0]
    assert any(r.startswith(STRONGER) for r in opened.ood_reasons)
    assert (opened.predicted, opened.lower) == pytest.approx((plain.predicted, plain.lower), abs=1e-6)
    assert opened.upper == 1.0


def test_predict_says_how_far_off_the_predictor_was_on_its_own_stronger_models(published, tmp_path: Path,
                                                                                capsys) -> None:
    """A published predictor carries its frontier self-check; where a model may lie above the training
    range, `predict` says how far off it was on stronger models (the error bar a one-sided interval cannot
    give), on stderr so `--json -` stays JSON. No flagged model, or no self-check: no note."""
    art, folder, _ = published
    figures = {"measured": True, "mae": 4.2, "bias": -4.0, "coverage": 0.8, "flagged": 0.6,
               "silent_misses": 0.12, "n": 40, "quantile": 0.9}
    checked = tmp_path / "checked" / "arc"
    replace(art, extra={**art.extra, "frontier": figures}).save(checked)
    ace = tmp_path / "ace.csv"
    pl.DataFrame({"item_id": art.anchor_item_ids, "correct": [1] * art.k}).write_csv(ace)
    assert main(["predict", "--predictor", str(checked), "--answers", str(ace), "--model", "ace/top", "--json", "-",
                 "--no-db"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)[0]["ood"] is True
    assert ("note: 1 arc prediction(s) may lie above the training range: refitted on the weakest 90 % of its own "
            "fitting models, this predictor's method was off by 4.2 points on average on the strongest 10 % "
            "(40 models; bias -4.0: too low), and 12 % of them fell outside their interval unflagged") in err
    plain = tmp_path / "plain.csv"
    pl.DataFrame({"item_id": art.anchor_item_ids, "correct": [1, 0] * (art.k // 2)}).write_csv(plain)
    for predictor, answers in ((folder, ace), (checked, plain)):  # no self-check stored; nothing flagged upward
        assert main(["predict", "--predictor", str(predictor), "--answers", str(answers), "--no-db"]) == 0
        assert "note:" not in capsys.readouterr().err
    assert SelfCheck.of_benchmark("arc", CutFigures(measured=False, n=7)).notes({"arc": 3}) == []


def test_only_reasons_that_cannot_bound_a_model_from_above_open_its_interval() -> None:
    upper = np.array([0.7, 0.8, 0.9, 0.6, 0.5])
    why = [(f"{ALL_RIGHT} (1.0 %)",), (f"{STRONGER} (predicted 80.0 > 79.0)",), (f"{AT_TOP} (predicted 90.0)",),
           (f"{UNLIKE} (distance 9.9 > 5.0)",), ()]
    np.testing.assert_array_equal(open_upward(upper, why), [1.0, 1.0, 0.9, 0.6, 0.5])


def test_each_reason_is_given_exactly_when_its_condition_holds() -> None:
    """The guard's rules one by one on hand-made answer sheets (NaN = not answered): every state at the
    edge of what the anchors can tell is named, an unanswered anchor does not hide it, a state common
    among the training models is not flagged, and an ordinary model gets no reason."""
    guard = {"score_min": 0.30, "score_max": 0.80, "top_prediction": 0.75, "edge_frac": 0.02,
             "all_right_frac": 0.01, "all_right_max": 0.78, "all_wrong_frac": 0.02, "all_wrong_min": 0.31}
    ood = {"threshold": 5.0, "percentile": 99.0}
    nan = np.nan
    X = np.array([[1, 0, 1, 0], [1, 1, nan, 1], [0, nan, 0, 0], [1, 0, 1, 0], [1, 0, 1, 0], [1, 0, 0, 1],
                  [nan, nan, nan, nan]], dtype=np.float64)
    pred = np.array([0.55, 0.79, 0.35, 0.25, 0.85, 0.77, 0.50])
    d2 = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 9.0])
    why = reasons(X, pred, d2, ood, guard)
    assert why[0] == ()  # inside the range, answers like the training models'
    assert [r.split(" (")[0] for r in why[1]] == [ALL_RIGHT] and "1.0 % of the training models" in why[1][0]
    assert [r.split(" (")[0] for r in why[2]] == [ALL_WRONG]
    assert [r.split(" (")[0] for r in why[3]] == [WEAKER] and direction(why[3]) == -1
    assert [r.split(" (")[0] for r in why[4]] == [STRONGER] and direction(why[4]) == 1
    assert [r.split(" (")[0] for r in why[5]] == [AT_TOP] and direction(why[5]) == 1
    assert [r.split(" (")[0] for r in why[6]] == [UNLIKE] and direction(why[6]) == 0  # nothing answered: no edge
    # the same sheets when every-anchor-right (wrong) is common among the training models: that state is
    # not flagged (the all-right sheet is still "at the top" by its prediction, the all-wrong one nothing)
    common = reasons(X, pred, d2, ood, {**guard, "all_right_frac": 0.2, "all_wrong_frac": 0.2})
    assert [r.split(" (")[0] for r in common[1]] == [AT_TOP] and common[2] == ()
    assert reasons(X, pred, d2, ood, None)[1:6] == [()] * 5  # predictors calibrated before the guard: distance only


def test_a_miss_is_silent_only_when_outside_its_interval_and_not_flagged() -> None:
    """Four models, one of each kind: inside or outside the interval, flagged or not."""
    g = Guarded(pred=np.array([0.50, 0.60, 0.70, 0.80]), halfwidth=np.full(4, 0.02),
                lower=np.array([0.48, 0.58, 0.68, 0.78]), upper=np.array([0.52, 0.62, 0.72, 1.00]),
                d2=np.zeros(4), reasons=[(), (f"{STRONGER} (x)",), (), (f"{ALL_RIGHT} (x)",)])
    f = interval_figures(g, np.array([0.51, 0.70, 0.60, 0.90]))
    assert f.coverage == 0.5 and f.flagged == 0.5 and f.silent_misses == 0.25 and f.n == 4
    assert f.mae == pytest.approx(100 * (0.01 + 0.10 + 0.10 + 0.10) / 4)
    assert f.bias == pytest.approx(100 * (-0.01 - 0.10 + 0.10 - 0.10) / 4)
    assert f.halfwidth == pytest.approx(50 * (0.04 * 3 + 0.22) / 4)


def test_compare_opens_the_side_of_a_model_beyond_the_range() -> None:
    base = Prediction(model="a", benchmark="b", predicted=0.8, lower=0.75, upper=0.85, n_anchors=10, k=10,
                      ood=False, ood_score=1.0)
    strong = replace(base, model="s", ood=True, ood_reasons=(f"{STRONGER} (predicted 91.0 > best 90.0)",))
    lower, upper, why = open_for_extrapolation(-0.02, 0.04, strong, base)
    assert (lower, upper) == (-0.02, 1.0) and "upper side open: s may be stronger" in why[0]
    lower, upper, _ = open_for_extrapolation(-0.02, 0.04, base, strong)
    assert (lower, upper) == (-1.0, 0.04)
    lower, upper, why = open_for_extrapolation(0.01, 0.04, strong, replace(strong, model="t"))
    assert (lower, upper) == (-1.0, 1.0) and len(why) == 2  # two models beyond the top: never ordered


def _figures(silent: float) -> CutFigures:
    return CutFigures(measured=True, mae=4.2, bias=-4.0, coverage=0.55, flagged=0.3, silent_misses=silent, n=40)


def test_frontier_check_fails_silent_misses_above_the_threshold_and_says_the_numbers() -> None:
    common = {"mae": {"b": 1.0}, "baseline": {"b": 2.0}, "mean_guess": {"b": 10.0}, "coverage": {"b": 0.9},
              "nominal": 0.9, "tolerance": 0.1, "items": ["1", "2"], "expected_k": 2, "known_items": {"1", "2"}}
    passed = {c.name: c for c in publishing_checks(**common, frontier={"b": _figures(0.05)}, frontier_silent_max=0.1)}
    failed = {c.name: c for c in publishing_checks(**common, frontier={"b": _figures(0.25)}, frontier_silent_max=0.1)}
    assert passed["frontier_misses_flagged"].passed and not failed["frontier_misses_flagged"].passed
    message = failed["frontier_misses_flagged"].metadata["message"]
    assert "25.0 % of 40 stronger models missed silently (max 10 %)" in message and "MAE 4.20" in message
    unmeasured = {c.name: c for c in publishing_checks(**common)}["frontier_misses_flagged"]
    assert unmeasured.passed and "not measured" in unmeasured.metadata["note"]
    few = CutFigures(measured=False, n=7, note="only 7 of 70 fitting models above the 0.9 quantile: too few")
    few_check = {c.name: c for c in publishing_checks(**common, frontier={"b": few})}["frontier_misses_flagged"]
    assert few_check.passed and "only 7 of 70" in few_check.metadata["note"]


@pytest.mark.slow
def test_a_saturating_predictor_fails_the_frontier_check_and_the_default_passes() -> None:
    """Strongest decile of the candidate's own models held out: anchors every strong model solves,
    with predictions left where the training range ends (no lift), saturate silently and fail; the
    default (anchors with headroom, predictions lifted at the top: sparseeval/estimate/beyond.py) passes. The
    lift alone also shrinks the saturating predictor's frontier error and its silent misses. At the
    strict bar of the nominal miscoverage (10 % silent misses): on 30-odd stronger models of a small
    synthetic board the methods sit a few models apart, so the default bar (0.15) would not tell them
    apart here; on the real leaderboard it does on mmlu (docs/results/frontier.md)."""
    lb = generate_leaderboard(n_families=40, models_per_family=10, benchmarks={"hellaswag": 100}, seed=1,
                              written_frac=0.8)
    m = _matrix(lb, "hellaswag")
    rows = np.arange(len(m.models))
    figures = {(method, lift): frontier_selfcheck(m, rows, method, 10, 1, device="cpu", beyond_prior=lift)
               for method, lift in (("sparseeval-mlp", 0.0), ("sparseeval-mlp", DEFAULT_BEYOND_PRIOR),
                                    ("sparseeval-headroom", DEFAULT_BEYOND_PRIOR))}
    assert all(f.measured and f.n >= 20 for f in figures.values()), figures
    verdict = {key: publishing_checks(mae={"h": 1.0}, baseline={"h": 2.0}, mean_guess={"h": 10.0},
                                      coverage={"h": 0.9}, nominal=0.9, tolerance=0.1, items=["1"], expected_k=1,
                                      known_items={"1"}, frontier={"h": f}, frontier_silent_max=0.1)[-1]
               for key, f in figures.items()}
    assert not verdict[("sparseeval-mlp", 0.0)].passed, figures
    assert verdict[("sparseeval-headroom", DEFAULT_BEYOND_PRIOR)].passed, figures
    saturated, lifted = figures[("sparseeval-mlp", 0.0)], figures[("sparseeval-mlp", DEFAULT_BEYOND_PRIOR)]
    assert saturated.bias < lifted.bias < 0 and lifted.mae < saturated.mae - 0.5, figures
    assert lifted.silent_misses < saturated.silent_misses, figures


def test_fit_warns_when_every_anchor_right_is_too_common_to_flag(tmp_path: Path, capsys) -> None:
    """A pool of easy items: many training models answer every anchor right, the guard cannot flag that
    state without flagging ordinary models, and `fit` says so (the silent miss seen on real winogrande
    data when the ceiling-breaking swaps ran out). A pool with hard items gets no warning."""
    rng = np.random.default_rng(3)
    n_models, n_items = 300, 40
    theta = rng.normal(0.0, 1.0, n_models)
    models = [f"org{i % 11}/m{i}" for i in range(n_models)]
    for name, centre in (("easy", -3.0), ("hard", 0.5)):
        difficulty = rng.normal(centre, 0.3, n_items)
        p = 1.0 / (1.0 + np.exp(-1.5 * (theta[:, None] - difficulty)))
        Y = (rng.random(p.shape) < p).astype(np.float64)
        data = tmp_path / name
        data.mkdir()
        pl.DataFrame({"model": np.repeat(models, n_items), "benchmark": "toy",
                      "item_id": np.tile([f"q{j}" for j in range(n_items)], n_models),
                      "score": Y.ravel()}).write_parquet(data / "responses.parquet")
        pl.DataFrame({"model": models, "benchmark": "toy", "score": p.mean(axis=1)}).write_parquet(
            data / "scores.parquet")
        capsys.readouterr()
        assert main(["fit", "--data", str(data), "--benchmark", "toy", "-k", "8", "--method", "random-linear",
                     "--frontier-quantile", "off", "--out", str(tmp_path / f"{name}-predictor")]) == 0
        printed = capsys.readouterr().out
        guard = json.loads((tmp_path / f"{name}-predictor" / "predictor.json").read_text())["calibration"]["frontier"]
        if name == "easy":
            assert guard["all_right_frac"] > 0.05
            assert "warning:" in printed and f"{100 * guard['all_right_frac']:.1f} % of the training models answer " \
                "every anchor right" in printed and "no flag" in printed
        else:
            assert guard["all_right_frac"] <= 0.05 and "warning:" not in printed
        # --frontier-quantile off: no self-check run, none published
        assert "frontier self-check" not in printed
        assert "frontier" not in json.loads((tmp_path / f"{name}-predictor" / "predictor.json").read_text())["extra"]


@pytest.mark.slow
def test_fit_runs_the_frontier_selfcheck_and_predict_warns_above_the_cut_it_failed(
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real mmlu (the shared Open LLM Leaderboard data), where the default method's anchors alone (``--probe
    0``: no second stage, which tests/test_probe*.py cover) miss the strongest models silently: ``fit``
    runs the pipeline's frontier self-check on its fitting models, prints the
    figures and warns that the pipeline would not publish it; the predictor and its model card carry
    them; ``predict`` warns exactly on the predictions above the cut it failed (the strongest model's),
    not on the others, in ``--json`` too; and still does where ``$SPARSEEVAL_FRONTIER_SILENT_MAX`` was
    raised to publish such a predictor knowingly."""
    out = tmp_path / "mmlu"
    capsys.readouterr()
    assert main(["fit", "--data", str(OPENLLM_DIR), "--benchmark", "mmlu", "--probe", "0", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    extra = json.loads((out / "predictor.json").read_text())["extra"]
    assert "frontier" in extra, "fit saved the predictor without its frontier self-check"
    f = extra["frontier"]
    assert f["measured"] and f["quantile"] == 0.9 and f["silent_misses"] > 0.15, f  # this benchmark's truth
    assert (f"frontier self-check, mmlu: refitted on the weakest 90 % of the fitting models, on the {f['n']} stronger "
            f"ones MAE {f['mae']:.2f} points, bias {f['bias']:+.2f}") in printed
    assert (f"warning: missed silently more than 15.0 % of the models stronger than its fitting models: mmlu "
            f"({100 * f['silent_misses']:.1f} % above a score of {100 * f['cut_score']:.1f})") in printed
    assert main(["export", "--predictor", str(out), "--format", "model-card", "--out", str(tmp_path / "card.md")]) == 0
    assert f"| silent_misses | {f['silent_misses']} |" in (tmp_path / "card.md").read_text()
    # answers of the strongest mmlu model and of a median one to the anchors
    anchors = [a["item_id"] for a in json.loads((out / "predictor.json").read_text())["anchors"]]
    scores = pl.read_parquet(OPENLLM_DIR / "scores.parquet").filter(pl.col("benchmark") == "mmlu").sort("score")
    pick = [scores["model"][-1], scores["model"][scores.height // 2]]
    sheet = tmp_path / "answers.csv"
    (pl.read_parquet(OPENLLM_DIR / "responses.parquet")
     .filter((pl.col("benchmark") == "mmlu") & pl.col("model").is_in(pick) & pl.col("item_id").is_in(anchors))
     .write_csv(sheet))
    capsys.readouterr()
    assert main(["predict", "--predictor", str(out), "--answers", str(sheet), "--no-db", "--json", "-"]) == 0
    records = {r["model"]: r for r in json.loads(capsys.readouterr().out)}
    warned = {m: any("frontier self-check missed" in w for w in r["warnings"]) for m, r in records.items()}
    assert warned == {m: r["predicted"] > f["cut_score"] for m, r in records.items()}
    assert warned == {pick[0]: True, pick[1]: False}
    assert (f"predicted above {100 * f['cut_score']:.1f}, where this predictor's frontier self-check missed "
            f"{100 * f['silent_misses']:.1f} % of its stronger fitting models silently") in " ".join(
                records[pick[0]]["warnings"])
    monkeypatch.setenv("SPARSEEVAL_FRONTIER_SILENT_MAX", "0.95")  # the bar raised to publish it anyway
    assert main(["predict", "--predictor", str(out), "--answers", str(sheet), "--no-db", "--json", "-"]) == 0
    assert {r["model"]: r["warnings"] for r in json.loads(capsys.readouterr().out)} == {
        m: r["warnings"] for m, r in records.items()}
