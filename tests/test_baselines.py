"""Baseline anchor methods (random, random-linear, anchor-points, irt, p-irt, gp-irt) on planted data.

The data come from a seeded 2PL model, so the truth (item difficulties, discriminations, abilities,
expected scores) is known and the methods can be checked against it, not against themselves.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from scipy import stats
from sklearn.cluster import KMeans

from sparseeval.estimate.methods import AnchorEstimator, make_estimator
from sparseeval.estimate.methods.baselines import fit_linear_map, item_vectors, kmeans_anchors
from sparseeval.estimate.methods.irt import LAMBDA_GRID, estimate_theta, fit_irt
from tests.support import needs_real_data

METHODS = ["random", "random-linear", "anchor-points", "irt", "p-irt", "gp-irt"]
IRT_METHODS = {"irt", "p-irt", "gp-irt"}
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "openllm_v1"
K = 10


def planted_2pl(seed: int = 0, n_models: int = 400, n_items: int = 80) -> dict[str, np.ndarray]:
    """Binary answers from ``P = sigmoid(a_i * theta_m - b_i)``; target = expected pool score."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=n_models)
    a = rng.lognormal(0.0, 0.7, n_items)
    b = rng.normal(0.0, 1.5, n_items)
    P = 1.0 / (1.0 + np.exp(-(np.outer(theta, a) - b)))
    Y = (rng.random((n_models, n_items)) < P).astype(np.float32)
    return {"Y": Y, "s": P.mean(axis=1).astype(np.float32), "a": a, "b": b, "theta": theta}


@pytest.fixture(scope="module")
def data() -> dict[str, np.ndarray]:
    d = planted_2pl()
    d["train"], d["test"] = np.arange(300), np.arange(300, 400)
    return d


def build(method: str, seed: int = 0, k: int = K) -> AnchorEstimator:
    # unidimensional IRT matches the planted model and keeps the tests fast
    extra = {"dim": 1} if method in IRT_METHODS else {}
    return make_estimator(method, k, random_state=seed, **extra)


@pytest.mark.slow
def test_irt_recovers_planted_item_parameters(data):
    Y_tr = data["Y"][data["train"]]
    p1 = fit_irt(Y_tr, dim=1, random_state=0, device="cpu")
    assert stats.spearmanr(p1.beta, data["b"]).statistic > 0.9
    assert np.corrcoef(p1.alpha[:, 0], data["a"])[0, 1] > 0.5
    assert np.corrcoef(p1.theta[:, 0], data["theta"][data["train"]])[0, 1] > 0.9
    p10 = fit_irt(Y_tr, dim=10, random_state=0, device="cpu")  # the tinyBenchmarks default
    assert p10.alpha.shape == (Y_tr.shape[1], 10)
    assert stats.spearmanr(p10.beta, data["b"]).statistic > 0.9


def test_estimate_theta_from_answers(data):
    """Ability from answers alone tracks the planted one; all-right answers stay finite (prior)."""
    a, b = data["a"][:, None], data["b"]
    theta = estimate_theta(data["Y"][:100], a, b)
    assert np.corrcoef(theta[:, 0], data["theta"][:100])[0, 1] > 0.85
    extreme = estimate_theta(np.ones((2, len(b)), np.float32) * np.array([[1.0], [0.0]], np.float32), a, b)
    assert np.isfinite(extreme).all() and extreme[0, 0] > 1.0 > -1.0 > extreme[1, 0]


def test_kmeans_anchor_weights_are_cluster_sizes_aligned_with_anchors(data):
    Y_tr = data["Y"][data["train"]]
    est = build("anchor-points").fit(Y_tr, data["s"][data["train"]])
    n_items = Y_tr.shape[1]
    assert est.weights_.sum() == n_items
    # recompute the clustering independently: each anchor's weight is the size of its own cluster
    km = KMeans(n_clusters=K, n_init=10, random_state=0).fit(item_vectors(Y_tr))
    sizes = np.bincount(km.labels_, minlength=K)
    np.testing.assert_array_equal(est.weights_, sizes[km.labels_[est.anchors_]])
    biggest = np.argmax(sizes)
    assert km.labels_[est.anchors_[np.argmax(est.weights_)]] == biggest
    # and each anchor is the member nearest its centroid
    dist = km.transform(item_vectors(Y_tr))
    for anchor in est.anchors_:
        c = km.labels_[anchor]
        members = np.flatnonzero(km.labels_ == c)
        assert dist[anchor, c] == dist[members, c].min()


def test_kmeans_anchors_fill_empty_clusters_with_unique_items():
    """Many identical item vectors leave clusters empty; anchors stay unique, weights still sum up."""
    vectors = np.repeat(np.eye(3), [10, 5, 1], axis=0)  # 16 items, 3 distinct points, k=6
    anchors, weights = kmeans_anchors(vectors, 6, random_state=3)
    assert len(np.unique(anchors)) == 6
    assert weights.sum() == 16
    assert sorted(weights[weights > 0]) == [1, 5, 10]


@pytest.mark.parametrize("method", METHODS)
def test_method_contract(method, data, tmp_path):
    """K unique anchors, scores in [0, 1] (also with missing answers), seeds, save/load round trip."""
    Y, s = data["Y"].copy(), data["s"]
    tr, te = data["train"], data["test"]
    rng = np.random.default_rng(1)
    Y[rng.random(Y.shape) < 0.05] = np.nan  # missing cells in training and test rows
    est = build(method).fit(Y[tr], s[tr])
    assert len(est.anchors_) == K and len(np.unique(est.anchors_)) == K
    X = Y[te][:, est.anchors_]
    pred = est.predict(X)
    assert pred.shape == (len(te),) and np.all((pred >= 0) & (pred <= 1))
    # missing answers take the training means, which are the means over training rows only
    np.testing.assert_allclose(est.anchor_fill_, np.nanmean(Y[tr][:, est.anchors_], axis=0), rtol=1e-5)
    # the anchors carry information: predictions track the truth
    assert stats.kendalltau(pred, s[te]).statistic > 0.5

    again = build(method).fit(Y[tr], s[tr])
    np.testing.assert_array_equal(again.anchors_, est.anchors_)
    other = build(method, seed=7).fit(Y[tr], s[tr])
    assert set(other.anchors_) != set(est.anchors_)

    path = tmp_path / f"{method}.pt"
    torch.save(est.get_state(), path)
    loaded = AnchorEstimator.from_state(torch.load(path, weights_only=False))
    assert loaded.method == method
    np.testing.assert_array_equal(loaded.anchors_, est.anchors_)
    np.testing.assert_allclose(loaded.predict(X), pred, rtol=0, atol=1e-9)


def test_shared_anchors_across_variants(data):
    Y, s = data["Y"][data["train"]], data["s"][data["train"]]
    np.testing.assert_array_equal(build("random", 4).fit(Y, s).anchors_,
                                  build("random-linear", 4).fit(Y, s).anchors_)
    irt_anchors = [build(m, 4).fit(Y, s).anchors_ for m in ("irt", "p-irt", "gp-irt")]
    for anchors in irt_anchors[1:]:
        np.testing.assert_array_equal(anchors, irt_anchors[0])


def test_validation_rows_only_choose_lambda(data):
    """Validation rows tune gp-irt's mixing weight and nothing else (anchors, item parameters)."""
    tr, te = data["train"], data["test"]
    Y, s = data["Y"], data["s"]
    bogus_val = np.ones((50, Y.shape[1]), np.float32)
    bogus = build("gp-irt").fit(Y[tr], s[tr], bogus_val, np.zeros(50, np.float32))
    good = build("gp-irt").fit(Y[tr], s[tr], Y[te], s[te])
    np.testing.assert_array_equal(good.anchors_, bogus.anchors_)
    np.testing.assert_array_equal(good.beta_, bogus.beta_)
    assert good.lam_ in LAMBDA_GRID and bogus.lam_ in LAMBDA_GRID
    # honest validation rows (held-out models) pick a lambda no worse on them than the extremes
    est_tr = good._estimates(Y[tr][:, good.anchors_])
    est_te = good._estimates(Y[te][:, good.anchors_])
    errors = {}
    for lam in (0.0, good.lam_, 1.0):
        line = fit_linear_map(good._mix(est_tr, lam), s[tr])
        errors[lam] = np.abs(np.clip(line[0] * good._mix(est_te, lam) + line[1], 0, 1) - s[te]).mean()
    assert errors[good.lam_] <= min(errors[0.0], errors[1.0]) + 1e-12


def test_irt_variants_beat_random_on_planted_data(data):
    """With the right model, ability-based estimates beat a plain mean of random items."""
    tr, te = data["train"], data["test"]
    Y, s = data["Y"], data["s"]
    errs: dict[str, list[float]] = {"random": [], "p-irt": [], "gp-irt": []}
    for seed in range(3):
        rand = build("random", seed).fit(Y[tr], s[tr])
        gp = build("gp-irt", seed).fit(Y[tr], s[tr])
        # a gp-irt fit holds everything p-irt needs (same anchors, IRT, p-irt line): reuse it
        state = gp.get_state() | {"method": "p-irt"}
        for name, est in (("random", rand), ("gp-irt", gp), ("p-irt", AnchorEstimator.from_state(state))):
            errs[name].append(np.abs(est.predict(Y[te][:, est.anchors_]) - s[te]).mean())
    mae = {name: float(np.mean(v)) for name, v in errs.items()}
    assert mae["p-irt"] < mae["random"], mae
    assert mae["gp-irt"] < mae["random"], mae


def test_linear_map_handles_flat_input():
    assert fit_linear_map(np.ones(5), np.arange(5.0)) == (0.0, 2.0)
    slope, intercept = fit_linear_map(np.array([0.0, 1.0, 2.0]), np.array([1.0, 3.0, 5.0]))
    assert slope == pytest.approx(2.0) and intercept == pytest.approx(1.0)


def test_k_larger_than_pool_is_rejected(data):
    for method in METHODS:
        with pytest.raises(ValueError, match="exceeds"):
            build(method, k=200).fit(data["Y"], data["s"])


@pytest.mark.slow
@needs_real_data
def test_real_arc_k20_side_by_side():
    """On real ARC results every baseline ranks held-out models well at K=20 (fit on train only)."""
    from sparseeval.data.matrix import build_matrix
    from sparseeval.estimate.metrics import score_metrics
    from sparseeval.estimate.splits import make_split

    resp = pl.read_parquet(DATA / "responses.parquet").rename({"correct": "score"})
    m = build_matrix(resp, pl.read_parquet(DATA / "scores.parquet"), "arc")
    split = make_split(m.models, seed=0, test_frac=0.2, val_frac=0.1)
    Y, s = m.with_nan(), m.scores
    for method in ("random-linear", "anchor-points", "gp-irt"):
        est = make_estimator(method, 20, random_state=0).fit(Y[split.train], s[split.train],
                                                             Y[split.val], s[split.val])
        r = score_metrics(est.predict(Y[split.test][:, est.anchors_]), s[split.test])
        assert r.mae < 5.0 and r.tau > 0.7, (method, r)
