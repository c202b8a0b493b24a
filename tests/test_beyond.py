"""The lift at the top of the training range (sparseeval/estimate/beyond.py, issue 29): predictions pulled
toward the best training model are moved up by what the calibration models' errors allow, inside the
range nothing moves, and a predictor calibrated before the lift existed predicts exactly as it did."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from sparseeval.core.settings import DEFAULT_BEYOND_PRIOR, DEFAULT_K, DEFAULT_METHOD
from sparseeval.data.matrix import build_matrix
from sparseeval.data.synthetic import generate_leaderboard
from sparseeval.estimate import calibrate
from sparseeval.estimate import calibration as cal
from sparseeval.estimate.beyond import TAIL_SIGMAS, fit_beyond, shift
from sparseeval.estimate.evaluation import ProtocolConfig, calibration_split, fit_on_split, split_for_seed
from sparseeval.estimate.frontier import guarded_predictions, interval_figures


def _truncated_board(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Scores of training and calibration models cut at 0.7 (the strongest kept out), and a
    regressor's predictions of the calibration models: the truth plus noise of 3 points."""
    rng = np.random.default_rng(seed)
    s_train = rng.beta(4, 3, 3000)
    s_train = s_train[s_train <= 0.7]
    s_cal = rng.beta(4, 3, 1500)
    s_cal = s_cal[s_cal <= 0.7]
    return s_train, s_cal, s_cal + rng.normal(0, 0.03, s_cal.size), rng.normal(0, 0.03, 1000)


def test_inside_the_range_nothing_moves_and_at_the_top_predictions_rise_within_the_tail() -> None:
    s_train, s_cal, pred_cal, _ = _truncated_board()
    beyond = fit_beyond(pred_cal, s_cal, s_train, DEFAULT_BEYOND_PRIOR)
    assert beyond["top"] == pytest.approx(s_train.max()) and 0.02 < beyond["sigma"] < 0.04
    grid = np.linspace(0.2, 0.9, 141)
    moved = shift(grid, beyond) - grid
    interior = grid < s_train.max() - 3 * beyond["sigma"]
    assert np.abs(moved[interior]).max() < 1e-3
    top = grid >= s_train.max()
    assert (moved[top] > 0.005).all() and moved.max() <= TAIL_SIGMAS * beyond["sigma"]
    # above the best training score the lift stays what it is there (it does not grow with the prediction)
    np.testing.assert_allclose(moved[top], (shift(np.array([s_train.max()]), beyond) - s_train.max())[0], atol=1e-12)
    assert (np.diff(shift(grid, beyond)) > 0).all()  # a higher prediction is never moved below a lower one


def test_models_beyond_the_cut_are_predicted_closer_with_the_lift() -> None:
    """Known truth: the strongest models (0.7-0.8) get the same noisy predictions a saturating regressor
    gives them (pulled to the cut); the lift removes part of the bias, never all of it."""
    s_train, s_cal, pred_cal, noise = _truncated_board(1)
    truth = np.linspace(0.7, 0.8, noise.size)
    saturated = np.minimum(truth, 0.7) + noise  # what a regressor that cannot see past the cut predicts
    lifted = shift(saturated, fit_beyond(pred_cal, s_cal, s_train, DEFAULT_BEYOND_PRIOR))
    bias_before, bias_after = np.mean(saturated - truth), np.mean(lifted - truth)
    assert bias_before < bias_after < 0 and bias_after - bias_before > 0.005  # 0.8 of 5 points measured


def test_the_error_model_is_the_prediction_given_the_score() -> None:
    """Classical calibration: ``pred = a + b * score + noise`` is fitted with the score as the regressor,
    so a regressor that compresses the range (b < 1) is read as such; fitted the other way round (the
    score given the prediction) it would come out as b > 1 and the lift would be computed for a
    predictor that does not exist."""
    rng = np.random.default_rng(2)
    s_cal = rng.uniform(0.3, 0.7, 2000)
    pred_cal = 0.1 + 0.8 * s_cal + rng.normal(0, 0.03, s_cal.size)
    beyond = fit_beyond(pred_cal, s_cal, rng.uniform(0.3, 0.7, 2000), DEFAULT_BEYOND_PRIOR)
    assert beyond["b"] == pytest.approx(0.8, abs=0.02) and beyond["a"] == pytest.approx(0.1, abs=0.01)
    assert beyond["sigma"] == pytest.approx(0.03, abs=0.003)


def test_no_tail_no_data_or_no_signal_means_no_lift() -> None:
    s_train, s_cal, pred_cal, _ = _truncated_board()
    assert fit_beyond(pred_cal, s_cal, s_train, 0.0) == {}
    assert fit_beyond(pred_cal[:5], s_cal[:5], s_train, 0.1) == {}  # too few calibration models
    assert fit_beyond(-pred_cal, s_cal, s_train, 0.1) == {}  # predictions falling with the score: nothing to invert
    x = np.array([0.1, 0.5, 0.99])
    assert np.array_equal(shift(x, {}), x) and np.array_equal(shift(x, None), x)
    at_the_top = fit_beyond(pred_cal, s_cal, np.append(s_train, 1.0), 0.1)
    assert np.array_equal(shift(x, at_the_top), x)  # the best training model has 100 %: nothing lies beyond


@pytest.mark.slow
def test_on_the_real_leaderboard_the_lift_cuts_the_frontier_bias_and_leaves_the_random_split_alone(
        openllm_parsed) -> None:  # type: ignore[no-untyped-def]
    """arc, the default method and K: trained on the weakest 90 %, the strongest 10 % are predicted too
    low; the lift (through ``calibrate`` and ``guarded_predictions``, as ``predict`` scores) takes at
    least a tenth of that bias away (a quarter to a third measured, docs/results/frontier.md), while on
    a random split no prediction moves by more than a tenth of a point on average. A calibration
    without the lift (an older predictor) predicts exactly as before."""
    m = build_matrix(openllm_parsed.responses, openllm_parsed.scores, "arc")
    s = m.scores.astype(np.float64)
    figures = {}
    for policy in ("frontier", "random"):
        split = split_for_seed(m, 0, ProtocolConfig(split_policy=policy))
        split, cal_rows = calibration_split(m.models, split, 0.2, 0)
        est = fit_on_split(m, split, DEFAULT_METHOD, DEFAULT_K, 0, device="cpu")
        X = m.with_nan()[:, est.anchors_]
        for lift in (0.0, DEFAULT_BEYOND_PRIOR):
            c = calibrate.calibrate(est, X[cal_rows], s[cal_rows], X[split.train], s_train=s[split.train],
                                    beyond_prior=lift)
            assert ("beyond" in c) == (lift > 0)
            g = guarded_predictions(est, c, X[split.test])
            figures[policy, lift] = (interval_figures(g, s[split.test]), g.pred)
        raw = est.predict(cal.conditional_impute(X[split.test], c["ood"]))
        assert np.array_equal(figures[policy, 0.0][1], raw)
    before, after = figures["frontier", 0.0][0], figures["frontier", DEFAULT_BEYOND_PRIOR][0]
    assert before.bias < -1.0, before  # the saturation the lift is for
    assert after.bias > before.bias + 0.1 * abs(before.bias) and after.mae < before.mae, (before, after)
    moved = np.abs(figures["random", DEFAULT_BEYOND_PRIOR][1] - figures["random", 0.0][1]).mean() * 100
    assert moved < 0.1, moved
    rnd_before, rnd_after = figures["random", 0.0][0], figures["random", DEFAULT_BEYOND_PRIOR][0]
    assert abs(rnd_after.mae - rnd_before.mae) < 0.05 and abs(rnd_after.coverage - rnd_before.coverage) < 0.02


def test_only_regression_heads_are_lifted() -> None:
    """``random`` and ``anchor-points`` map a line on an item mean, the IRT family an ability: on the
    strongest models they overshoot already (arc, hellaswag), so their calibration stores no lift and
    they predict as the estimator does; a ridge head on the same items is lifted."""
    lb = generate_leaderboard(n_families=20, models_per_family=10, benchmarks={"arc": 60}, seed=3, written_frac=0.8)
    responses = lb.responses.rename({"correct": "score"}).with_columns(pl.col("score").cast(pl.Float64))
    m = build_matrix(responses, lb.scores, "arc")
    split = split_for_seed(m, 0, ProtocolConfig(split_policy="frontier"))
    split, cal_rows = calibration_split(m.models, split, 0.2, 0)
    s = m.scores.astype(np.float64)
    stored = {}
    for method in ("random", "anchor-points", "irt", "random-linear"):
        est = fit_on_split(m, split, method, 8, 0, device="cpu")
        X = m.with_nan()[:, est.anchors_]
        c = calibrate.calibrate(est, X[cal_rows], s[cal_rows], X[split.train], s_train=s[split.train])
        stored[method] = "beyond" in c
        if not est.lifted_at_top:
            raw = est.predict(cal.conditional_impute(X[split.test], c["ood"]))
            assert np.array_equal(guarded_predictions(est, c, X[split.test]).pred, raw)
    assert stored == {"random": False, "anchor-points": False, "irt": False, "random-linear": True}, stored
