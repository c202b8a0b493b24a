"""Leaderboard-scale optimisations give the reference computation's results (small sizes only;
timings live in ``bench/scale.py``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from sparseeval.data.matrix import ResponseMatrix, build_matrix
from sparseeval.estimate.budget import ALWAYS, comparison_plan
from sparseeval.estimate.evaluation import ProtocolConfig, fit_on_split, split_for_seed
from sparseeval.estimate.methods import device as device_mod
from sparseeval.estimate.methods import selection
from sparseeval.estimate.methods.baselines import item_embedding, item_vectors
from sparseeval.estimate.methods.proxies import ridge_gcv_from_gram, ridge_gcv_swaps


def _local_sets(k: int, positions: np.ndarray, n_c: int) -> np.ndarray:
    local = np.repeat(np.arange(k)[None, :], positions.size * n_c, axis=0)
    local[np.arange(local.shape[0]), np.repeat(positions, n_c)] = k + np.tile(np.arange(n_c), positions.size)
    return local


def _reference_swaps(gram: torch.Tensor, xty: torch.Tensor, yty: float, n: int, k: int, positions: torch.Tensor,
                     alpha: float = 1.0) -> torch.Tensor:
    """The full computation: one Cholesky and one inverse per candidate set."""
    n_c = gram.shape[0] - k
    sets = torch.as_tensor(_local_sets(k, positions.cpu().numpy(), n_c))
    return ridge_gcv_from_gram(gram, xty, yty, n, sets, alpha).reshape(len(positions), n_c)


@pytest.mark.parametrize("alpha", [0.1, 1.0, 30.0])
@pytest.mark.parametrize(("n", "k", "n_c"), [(200, 5, 7), (80, 20, 16), (40, 30, 9)])
def test_gcv_swap_update_equals_full_computation(alpha: float, n: int, k: int, n_c: int) -> None:
    rng = np.random.default_rng(k + n_c)
    Y = torch.as_tensor(rng.integers(0, 2, (n, k + n_c)), dtype=torch.float64)
    Y[:, 3] = Y[:, 2]  # an anchor duplicated by another: still a proper (regularised) system
    s = Y.mean(1) + 0.05 * torch.as_tensor(rng.standard_normal(n))
    Yc, yc = Y - Y.mean(0), s - s.mean()
    gram, xty, yty = Yc.T @ Yc, Yc.T @ yc, float(yc @ yc)
    positions = torch.as_tensor(rng.permutation(k)[: min(k, 6)])
    fast = ridge_gcv_swaps(gram, xty, yty, n, k, positions, alpha)
    ref = _reference_swaps(gram, xty, yty, n, k, positions, alpha)
    np.testing.assert_allclose(fast.numpy(), ref.numpy(), rtol=1e-6, atol=0)


def test_refinement_with_swap_updates_matches_full_gcv(synthetic_matrix: ResponseMatrix,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    m = synthetic_matrix
    split = split_for_seed(m, 0, ProtocolConfig())
    fast = fit_on_split(m, split, "sparseeval-linear", 10, 0)
    monkeypatch.setattr(selection, "ridge_gcv_swaps", _reference_swaps)
    ref = fit_on_split(m, split, "sparseeval-linear", 10, 0)
    assert fast.anchors_.tolist() == ref.anchors_.tolist()
    assert [h["added"] for h in fast.selection_["history"]] == [h["added"] for h in ref.selection_["history"]]
    np.testing.assert_allclose([h["gcv_mse"] for h in fast.selection_["history"]],
                               [h["gcv_mse"] for h in ref.selection_["history"]], rtol=1e-9)


def test_float32_working_matrix_refines_like_float64(synthetic_matrix: ResponseMatrix,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Above FLOAT32_CELLS the big matrices are float32; the selection is the same up to rounding."""
    m = synthetic_matrix
    split = split_for_seed(m, 1, ProtocolConfig())
    exact = fit_on_split(m, split, "sparseeval-linear", 10, 1)
    monkeypatch.setattr(selection, "FLOAT32_CELLS", 0)
    assert selection.work_dtype(torch.device("cpu"), 10) == torch.float32
    single = fit_on_split(m, split, "sparseeval-linear", 10, 1)
    assert single.selection_["start"] == exact.selection_["start"]
    assert single.anchors_.tolist() == exact.anchors_.tolist()
    assert single.selection_["loo_mse"] == pytest.approx(exact.selection_["loo_mse"], rel=1e-4)


def test_item_embedding_is_exact_below_scale_and_keeps_distances_above(synthetic_matrix: ResponseMatrix) -> None:
    Y = synthetic_matrix.values
    np.testing.assert_array_equal(item_embedding(Y, 10, 0), item_vectors(Y))
    reduced = item_embedding(Y, 10, 0, dim=16, exact_work=0)
    assert reduced.shape == (Y.shape[1], 16) and reduced.dtype == np.float32
    assert np.array_equal(reduced, item_embedding(Y, 10, 0, dim=16, exact_work=0))  # seeded
    exact = item_vectors(Y)
    iu = np.triu_indices(Y.shape[1], 1)
    d_exact = ((exact[:, None, :] - exact[None, :, :]) ** 2).sum(-1)[iu]
    d_red = ((reduced[:, None, :] - reduced[None, :, :]) ** 2).sum(-1)[iu]
    assert np.all(d_red <= d_exact + 1e-4)  # a projection never stretches a distance
    assert np.corrcoef(d_exact, d_red)[0, 1] > 0.8  # 16 of ~100 dimensions keep most of the geometry
    assert Y.dtype == np.float32 and np.isfinite(Y).all()  # the caller's matrix is untouched


def test_kmeans_start_at_scale_gives_k_distinct_items(synthetic_matrix: ResponseMatrix,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from sparseeval.estimate.methods import baselines

    defaults = baselines.item_embedding.__kwdefaults__
    monkeypatch.setitem(defaults, "dim", 16)
    monkeypatch.setitem(defaults, "exact_work", 0)
    anchors = selection.kmeans_start(synthetic_matrix.values, 15, seed=0)
    assert len(set(anchors.tolist())) == 15
    est = fit_on_split(synthetic_matrix, split_for_seed(synthetic_matrix, 0, ProtocolConfig()), "anchor-points", 12, 0)
    assert len(set(est.anchors_.tolist())) == 12 and est.weights_.sum() == synthetic_matrix.shape[1]


def test_thread_limit_respects_env_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    monkeypatch.setenv(device_mod.THREADS_ENV, "1")
    with device_mod.thread_limit() as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    assert device_mod.cpu_threads(10_000) == device_mod.available_cpus()
    monkeypatch.setenv(device_mod.THREADS_ENV, "many")
    with pytest.raises(ValueError, match="SPARSEEVAL_THREADS"):
        device_mod.cpu_threads()
    monkeypatch.delenv(device_mod.THREADS_ENV)
    assert device_mod.cpu_threads() == device_mod.available_cpus()


def test_the_default_thread_count_does_not_follow_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread count changes floating-point sums and so, through near-ties, the anchors: a default
    taken from the load average made the same seed give different anchors on a busy machine."""
    monkeypatch.delenv(device_mod.THREADS_ENV, raising=False)
    monkeypatch.setattr(device_mod, "available_cpus", lambda: 8)
    quiet = device_mod.cpu_threads()
    monkeypatch.setattr(device_mod.os, "getloadavg", lambda: (50.0, 50.0, 50.0))
    assert device_mod.cpu_threads() == quiet == 8


def test_comparison_plan_is_reduced_only_above_budget() -> None:
    small = comparison_plan(5041, 249, budget_s=600)
    assert not small.reduced and small.seeds == (0, 1, 2) and small.ks == (10, 20)
    assert "as requested" in small.describe()
    big = comparison_plan(7000, 30000, budget_s=300)
    assert big.reduced and "REDUCED" in big.describe()
    assert set(ALWAYS) <= set(big.methods)
    assert big.estimated_s <= 300 or "still over budget" in big.dropped[-1]
    unlimited = comparison_plan(7000, 30000, budget_s=0)
    assert not unlimited.reduced and unlimited.fits == len(unlimited.methods) * 2 * 3
    assert comparison_plan(100, 15, ks=(10, 20, 50)).ks == (10,)


def test_bench_generator_writes_a_unit_the_matrix_reads(tmp_path: Path) -> None:
    path = Path(__file__).resolve().parents[1] / "bench" / "scale.py"
    spec = importlib.util.spec_from_file_location("bench_scale", path)
    assert spec and spec.loader
    scale = importlib.util.module_from_spec(spec)
    sys.modules["bench_scale"] = scale
    spec.loader.exec_module(scale)
    scale.generate(tmp_path, 60, 45, seed=1)
    unit = tmp_path / "unit"
    matrix = build_matrix(pl.scan_parquet(unit / "responses.parquet"), pl.read_parquet(unit / "scores.parquet"),
                          scale.BENCHMARK)
    assert matrix.shape == (60, 45) and matrix.observed.all()
    np.testing.assert_allclose(matrix.scores, matrix.values.mean(1), atol=1e-6)
    assert 0.2 < matrix.values.mean() < 0.8
    assert scale._generated(tmp_path, 60, 45, 1)


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
def test_fast_column_means_equal_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparseeval.estimate.methods.base import column_means

    rng = np.random.default_rng(5)
    Y = rng.integers(0, 2, (50, 30)).astype(np.float32)
    monkeypatch.setattr(selection, "FLOAT32_CELLS", 0)
    means, complete = selection.fast_column_means(Y)
    assert complete
    np.testing.assert_allclose(means, column_means(Y), atol=1e-6)
    Y[rng.random(Y.shape) < 0.2] = np.nan
    Y[:, 4] = np.nan  # nobody answered: 0.5, as the reference
    means, complete = selection.fast_column_means(Y)
    assert not complete
    np.testing.assert_allclose(means, column_means(Y), atol=1e-6)
