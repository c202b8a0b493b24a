"""SparseEval selection and predictors: math of the swap criterion, behaviour, leakage, persistence."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from sparseeval.data.matrix import ResponseMatrix
from sparseeval.estimate.evaluation import ProtocolConfig, fit_on_split, score_on_split, split_for_seed
from sparseeval.estimate.methods import AnchorEstimator, make_estimator
from sparseeval.estimate.methods.proxies import ridge_fit, ridge_gcv_from_gram, ridge_loo_mse, train_mlp
from sparseeval.estimate.methods.selection import CEILING_FRAC, break_ceiling, kmeans_start
from sparseeval.estimate.metrics import score_metrics


def test_ridge_loo_matches_brute_force_refits() -> None:
    rng = np.random.default_rng(0)
    X = torch.as_tensor(rng.integers(0, 2, (40, 5)), dtype=torch.float64)
    y = torch.as_tensor(rng.random(40), dtype=torch.float64)
    errors = []
    for i in range(40):
        keep = torch.arange(40) != i
        fit = ridge_fit(X[keep], y[keep], alpha=2.0)
        errors.append(float(fit.predict(X[i:i + 1])[0] - y[i]) ** 2)
    assert float(ridge_loo_mse(X.unsqueeze(0), y, alpha=2.0)[0]) == pytest.approx(np.mean(errors), rel=1e-9)


def test_gcv_from_gram_matches_its_definition() -> None:
    rng = np.random.default_rng(1)
    Y = torch.as_tensor(rng.integers(0, 2, (60, 12)), dtype=torch.float64)
    y = torch.as_tensor(rng.random(60), dtype=torch.float64)
    Yc, yc = Y - Y.mean(0), y - y.mean()
    sets = torch.tensor([[0, 3, 5], [1, 2, 11]])
    got = ridge_gcv_from_gram(Yc.T @ Yc, Yc.T @ yc, float(yc @ yc), 60, sets, alpha=1.5)
    for b, cols in enumerate(sets):
        X = Yc[:, cols]
        H = X @ torch.linalg.solve(X.T @ X + 1.5 * torch.eye(3, dtype=torch.float64), X.T) + 1.0 / 60
        rss = float(((yc - (H - 1.0 / 60) @ yc) ** 2).sum())  # the intercept absorbs the centred mean
        expected = (rss / 60) / (1 - float(torch.trace(H)) / 60) ** 2
        assert float(got[b]) == pytest.approx(expected, rel=1e-9)


def test_kmeans_start_gives_k_distinct_items(synthetic_matrix: ResponseMatrix) -> None:
    anchors = kmeans_start(synthetic_matrix.values, 15, seed=0)
    assert len(set(anchors.tolist())) == 15


@pytest.mark.parametrize("method", ["sparseeval-linear", "sparseeval-mlp"])
def test_fit_predict_save_load(method: str, synthetic_matrix: ResponseMatrix) -> None:
    m = synthetic_matrix
    split = split_for_seed(m, 0, ProtocolConfig())
    params = {"max_epochs": 200, "members": 2} if method.endswith("mlp") else None
    est = fit_on_split(m, split, method, 10, seed=0, params=params)
    assert est.anchors_ is not None and len(set(est.anchors_.tolist())) == 10
    pred = score_on_split(m, split, est)
    assert np.all((pred >= 0) & (pred <= 1))
    metrics = score_metrics(pred, m.scores[split.test])
    assert metrics.tau > 0.5, metrics
    # every accepted swap lowered the criterion (the reference accepts harmful swaps)
    history = est.selection_["history"]
    assert all(b["gcv_mse"] < a["gcv_mse"] for a, b in itertools.pairwise(history))
    assert set(est.timings_) == {"start", "refinement", "final_fit"}
    clone = AnchorEstimator.from_state(est.get_state())
    X = m.with_nan()[split.test][:, est.anchors_]
    np.testing.assert_allclose(clone.predict(X), est.predict(X), atol=1e-6)
    # a missing answer is imputed, not fatal
    X[0, 0] = np.nan
    assert np.isfinite(est.predict(X)).all()


def test_refinement_beats_its_own_start(synthetic_matrix: ResponseMatrix) -> None:
    """Refined anchors predict held-out models better than the k-means start they came from."""
    m = synthetic_matrix
    maes = {"start": [], "refined": []}
    for seed in range(3):
        split = split_for_seed(m, seed, ProtocolConfig())
        refined = fit_on_split(m, split, "sparseeval-linear", 8, seed, params={"start": "kmeans"})
        frozen = fit_on_split(m, split, "sparseeval-linear", 8, seed, params={"start": "kmeans", "max_steps": 0})
        maes["refined"].append(score_metrics(score_on_split(m, split, refined), m.scores[split.test]).mae)
        maes["start"].append(score_metrics(score_on_split(m, split, frozen), m.scores[split.test]).mae)
    assert np.mean(maes["refined"]) < np.mean(maes["start"])


def test_no_leakage_test_models_do_not_change_anchors(synthetic_matrix: ResponseMatrix) -> None:
    m = synthetic_matrix
    split = split_for_seed(m, 4, ProtocolConfig())
    before = fit_on_split(m, split, "sparseeval-linear", 10, seed=4)
    values = m.values.copy()
    rng = np.random.default_rng(0)
    values[split.test] = rng.integers(0, 2, values[split.test].shape)  # scramble only the test models
    scores = m.scores.copy()
    scores[split.test] = rng.random(len(split.test))
    tampered = ResponseMatrix(m.benchmark, m.models, m.items, values, m.observed, scores, m.score_source)
    after = fit_on_split(tampered, split, "sparseeval-linear", 10, seed=4)
    assert before.anchors_.tolist() == after.anchors_.tolist()


def test_seeds_reproduce_and_differ(synthetic_matrix: ResponseMatrix) -> None:
    m = synthetic_matrix
    runs = {}
    for seed in (0, 0, 1):
        split = split_for_seed(m, seed, ProtocolConfig())
        est = fit_on_split(m, split, "sparseeval-linear", 10, seed)
        runs.setdefault(seed, []).append((split.test.tolist(), sorted(est.anchors_.tolist())))
    assert runs[0][0] == runs[0][1]
    assert runs[0][0][0] != runs[1][0][0]


def test_bad_parameters_are_refused(synthetic_matrix: ResponseMatrix) -> None:
    with pytest.raises(ValueError, match="exceeds"):
        make_estimator("sparseeval-linear", 10_000).fit(synthetic_matrix.values, synthetic_matrix.scores)
    with pytest.raises(ValueError, match="start"):
        make_estimator("sparseeval-linear", 5, start="magic")
    with pytest.raises(ValueError, match="unknown method"):
        make_estimator("sparseeval-quantum", 5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_path_matches_cpu(synthetic_matrix: ResponseMatrix) -> None:
    m = synthetic_matrix
    split = split_for_seed(m, 0, ProtocolConfig())
    cpu = fit_on_split(m, split, "sparseeval-linear", 10, 0, device="cpu")
    gpu = fit_on_split(m, split, "sparseeval-linear", 10, 0, device="cuda")
    assert len(set(gpu.anchors_.tolist()) & set(cpu.anchors_.tolist())) >= 8
    X = torch.rand(50, 10, device="cuda").round()
    res = train_mlp(X, X.mean(1), X, X.mean(1), members=4, max_epochs=50)
    assert res.best_val_mse.device.type == "cuda"


def test_break_ceiling_swaps_until_all_right_is_rare_and_no_further() -> None:
    """Anchors the strong models all solve: swaps (each for an item that splits those ceiling models)
    continue while more than CEILING_FRAC of the models answer every anchor right, up to the cap; anchors
    without a ceiling are left exactly as they are. The default cap is half of K: a quarter ran out on
    real winogrande data with 9.8 % of the models still at the ceiling (docs/results/frontier.md)."""
    rng = np.random.default_rng(7)
    theta = rng.normal(0.0, 1.0, 1500)
    difficulty = np.sort(rng.normal(0.0, 1.5, 200))  # item 0 easiest
    p = 0.3 + 0.7 / (1.0 + np.exp(-1.7 * (theta[:, None] - difficulty)))  # guessing floor: hard to break
    Y = (rng.random(p.shape) < p).astype(np.float64)
    s = p.mean(axis=1)

    def all_right(anchors: np.ndarray) -> float:
        return float(np.all(Y[:, anchors] >= 1.0, axis=1).mean())

    easy = np.arange(20)
    assert all_right(easy) > 0.2
    quarter, n_quarter = break_ceiling(Y, s, easy, 5)
    half, n_half = break_ceiling(Y, s, easy, 10)
    assert n_quarter == 5 and all_right(quarter) > 0.05  # the quarter cap runs out: too common to flag
    assert n_quarter < n_half < 10 and all_right(half) <= CEILING_FRAC
    # and it stops as soon as the ceiling is rare: one swap fewer was not enough
    assert all_right(break_ceiling(Y, s, easy, n_half - 1)[0]) > CEILING_FRAC
    assert all_right(half) < all_right(quarter) < all_right(easy)
    # each swap keeps K anchors, adds items the ceiling models do not all solve, never drops a breaker
    assert len(set(half.tolist())) == 20 and set(quarter[-5:].tolist()) <= set(half.tolist())
    assert np.all(Y[np.all(Y[:, easy] >= 1.0, axis=1)][:, half[-n_half:]].mean(axis=0) < 1.0)
    # no ceiling, no swap
    hard = np.arange(180, 200)
    same, n_same = break_ceiling(Y, s, hard, 10)
    assert n_same == 0 and np.array_equal(same, hard)
    assert make_estimator("sparseeval-headroom", 20).headroom == 10
    assert make_estimator("sparseeval-headroom", 20, headroom=3).headroom == 3
