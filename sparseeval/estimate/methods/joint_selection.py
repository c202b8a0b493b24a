"""Choosing anchors for several outputs at once: the multi-output ridge GCV criterion and the moves built on it.

:func:`refine_joint` is SparseEval's swap step with every benchmark's score as the target (the
criterion, weights and importance scores are described in :mod:`sparseeval.estimate.methods.joint`);
:func:`forward_order` ranks items greedily by the same criterion for adaptive anchors; :func:`even_shares`
splits a budget for the per-benchmark start. They are tensor code with no state, used by the joint
estimator and by :mod:`sparseeval.estimate.adaptive`, so they are kept out of the estimator's module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from sparseeval.core.errors import UsageError

if TYPE_CHECKING:
    import torch


def ridge_gcv_multi(gram: torch.Tensor, xty: torch.Tensor, yty: torch.Tensor, n: int, sets: torch.Tensor,
                    weights: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """Weighted sum over outputs of ridge GCV errors for many anchor sets, from one Gram matrix.

    ``gram`` (U, U) and ``xty`` (U, B) over a pool U of centred items, ``yty`` (B,) the centred
    targets' sums of squares; ``sets`` (S, K) index the pool. All outputs share the hat matrix (same
    inputs), so the degrees of freedom are computed once per set.
    """
    k = sets.shape[-1]
    G = gram[sets.unsqueeze(-1), sets.unsqueeze(-2)]  # (S, K, K)
    b = xty[sets]  # (S, K, B)
    import torch

    eye = torch.eye(k, dtype=gram.dtype, device=gram.device)
    chol = torch.linalg.cholesky(G + alpha * eye)
    w = torch.cholesky_solve(b, chol)  # (S, K, B)
    rss = yty - 2 * (w * b).sum(-2) + (w * (G @ w)).sum(-2)  # (S, B)
    inv = torch.cholesky_inverse(chol)
    dof = k - alpha * inv.diagonal(dim1=-2, dim2=-1).sum(-1) + 1.0  # (S,)
    gcv = (rss / n) / (1.0 - dof / n).clamp_min(1e-6).unsqueeze(-1) ** 2
    return (gcv * weights).sum(-1)


def refine_joint(Y: np.ndarray, S: np.ndarray, anchors: np.ndarray, weights: np.ndarray, *, max_steps: int,
                 n_weak: int = 8, n_cand: int = 32, alpha: float = 1.0,
                 device: torch.device | None = None) -> tuple[np.ndarray, float, list[dict[str, Any]]]:
    """SparseEval refinement with a multi-output target (see the module docstring).

    Returns the anchors, the final weighted GCV criterion and one record per accepted swap.
    """
    import torch

    device = device or torch.device("cpu")
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    Yt = torch.as_tensor(Y, dtype=dtype, device=device)
    St = torch.as_tensor(S, dtype=dtype, device=device)
    Yc = Yt - Yt.mean(0, keepdim=True)
    Sc = St - St.mean(0, keepdim=True)
    yty = (Sc * Sc).sum(0)
    n = Yt.shape[0]
    w = torch.as_tensor(weights, dtype=dtype, device=device)
    sqrt_w = w.sqrt()
    std = Yt.std(0)
    col_norm = Yc.norm(dim=0).clamp_min(1e-9)
    anchors = np.array(anchors, dtype=np.int64)
    k, n_items = anchors.size, Y.shape[1]

    def criterion(pool: np.ndarray, local_sets: np.ndarray) -> torch.Tensor:
        Xu = Yc[:, torch.as_tensor(pool, device=device)]
        return ridge_gcv_multi(Xu.T @ Xu, Xu.T @ Sc, yty, n, torch.as_tensor(local_sets, device=device), w, alpha)

    current = float(criterion(anchors, np.arange(k)[None, :])[0])
    history: list[dict[str, Any]] = []
    steps = 0
    while steps < max_steps:
        steps += 1
        idx = torch.as_tensor(anchors, device=device)
        X = Yc[:, idx]
        gram = X.T @ X + alpha * torch.eye(k, dtype=dtype, device=device)
        coef = torch.linalg.solve(gram, X.T @ Sc)  # (K, B)
        resid = X @ coef - Sc  # (n, B)
        ais = ((coef ** 2) * w).sum(-1).sqrt() * std[idx]
        cis = ((Yc.T @ resid) * sqrt_w).norm(dim=-1) / col_norm
        cis[idx] = -1.0
        weak = np.argsort(ais.cpu().numpy(), kind="stable")[: min(n_weak, k)]
        n_c = min(n_cand, n_items - k)
        if n_c < 1:
            break
        cands = torch.topk(cis, n_c).indices.cpu().numpy()
        pool = np.concatenate([anchors, cands])
        local = np.repeat(np.arange(k)[None, :], weak.size * n_c, axis=0)
        positions = np.repeat(weak, n_c)
        local[np.arange(local.shape[0]), positions] = k + np.tile(np.arange(n_c), weak.size)
        losses = criterion(pool, local)
        best = int(torch.argmin(losses))
        best_loss = float(losses[best])
        if not best_loss < current * (1 - 1e-6):
            break
        pos = int(positions[best])
        added = int(pool[local[best, pos]])
        history.append({"step": steps, "position": pos, "removed": int(anchors[pos]), "added": added,
                        "criterion": best_loss})
        anchors = anchors.copy()
        anchors[pos] = added
        current = best_loss
    return anchors, current, history


def even_shares(k: int, sizes: Sequence[int]) -> list[int]:
    """``k`` items spread as evenly as possible over groups of ``sizes`` items (none over its size)."""
    if k > sum(sizes):
        raise UsageError(f"k={k} exceeds the {sum(sizes)} items of all benchmarks together")
    shares = [0] * len(sizes)
    left = k
    while left:
        open_ = [g for g, s in enumerate(sizes) if shares[g] < s]
        for g in open_[:left] if left < len(open_) else open_:
            shares[g] += 1
            left -= 1
    return shares


def forward_order(Y: np.ndarray, S: np.ndarray, weights: np.ndarray | None = None, *, alpha: float = 1.0,
                  device: torch.device | None = None) -> np.ndarray:
    """Greedy forward order of the columns of ``Y``: each next column is the one that most lowers the
    (weighted multi-output) ridge GCV error of the prefix. Used for adaptive anchors: the first
    ``p`` of the order are the ``p`` anchors worth asking first."""
    import torch

    device = device or torch.device("cpu")
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    S = np.asarray(S, dtype=np.float64)
    S = S[:, None] if S.ndim == 1 else S
    Yt = torch.as_tensor(np.asarray(Y, dtype=np.float64), dtype=dtype, device=device)
    St = torch.as_tensor(S, dtype=dtype, device=device)
    Yc = Yt - Yt.mean(0, keepdim=True)
    Sc = St - St.mean(0, keepdim=True)
    gram, xty, yty = Yc.T @ Yc, Yc.T @ Sc, (Sc * Sc).sum(0)
    w = torch.as_tensor(np.ones(S.shape[1]) if weights is None else weights, dtype=dtype, device=device)
    k = Y.shape[1]
    order: list[int] = []
    rest = list(range(k))
    while rest:
        sets = torch.as_tensor([[*order, j] for j in rest], device=device)
        losses = ridge_gcv_multi(gram, xty, yty, Y.shape[0], sets, w, alpha)
        j = rest[int(torch.argmin(losses))]
        order.append(j)
        rest.remove(j)
    return np.asarray(order, dtype=np.int64)
