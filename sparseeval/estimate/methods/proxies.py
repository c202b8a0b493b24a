"""Proxy predictors of the full score from anchor answers: closed-form ridge and a batched MLP.

Both are written for *batches*: the ridge scores many candidate anchor sets in one tensor program
(leave-one-out error in closed form), and the MLP trains an ensemble of independent networks as
one program of batched matrix products. That is what makes refinement cheap on a CPU and
saturates a GPU when there is one.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


# ------------------------------------------------------------------------------------------------
# Ridge
# ------------------------------------------------------------------------------------------------
@dataclass
class RidgeFit:
    """``y ~ X @ coef + intercept`` fitted by ridge on centred inputs (the intercept is not shrunk)."""

    coef: torch.Tensor  # (..., K)
    intercept: torch.Tensor  # (...)

    def predict(self, X: torch.Tensor) -> torch.Tensor:
        return (X @ self.coef.unsqueeze(-1)).squeeze(-1) + self.intercept.unsqueeze(-1)


def ridge_fit(X: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> RidgeFit:
    """Ridge fit for one design (n, K) or a batch (B, n, K) sharing ``y`` (n,)."""
    mu = X.mean(dim=-2, keepdim=True)
    Xc = X - mu
    yc = y - y.mean()
    k = X.shape[-1]
    gram = Xc.transpose(-1, -2) @ Xc + alpha * torch.eye(k, dtype=X.dtype, device=X.device)
    coef = torch.linalg.solve(gram, (Xc.transpose(-1, -2) @ yc.unsqueeze(-1))).squeeze(-1)
    intercept = y.mean() - (mu.squeeze(-2) * coef).sum(-1)
    return RidgeFit(coef, intercept)


def ridge_loo_mse(X: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """Leave-one-out mean squared error of ridge, in closed form, for a batch (B, n, K) of designs.

    PRESS residuals ``r_i / (1 - h_ii)`` give the exact LOO error of the (centred) ridge without
    refitting. Used as the swap criterion: it judges an anchor set on all training models, which
    is far less noisy than a few hundred validation models and never touches them.
    """
    n, k = X.shape[-2], X.shape[-1]
    mu = X.mean(dim=-2, keepdim=True)
    Xc = X - mu
    yc = (y - y.mean()).unsqueeze(-1)
    gram = Xc.transpose(-1, -2) @ Xc + alpha * torch.eye(k, dtype=X.dtype, device=X.device)
    chol = torch.linalg.cholesky(gram)
    # Z = Xc G^-1  (via two triangular solves on the transposed system)
    Z = torch.cholesky_solve(Xc.transpose(-1, -2), chol).transpose(-1, -2)
    coef = Z.transpose(-1, -2) @ yc
    resid = (yc - Xc @ coef).squeeze(-1)
    lev = (Z * Xc).sum(-1) + 1.0 / n
    return ((resid / (1.0 - lev).clamp_min(1e-6)) ** 2).mean(-1)


def ridge_gcv_from_gram(gram: torch.Tensor, xty: torch.Tensor, yty: float, n: int, sets: torch.Tensor,
                        alpha: float = 1.0) -> torch.Tensor:
    """Generalised cross-validation error of ridge for many anchor sets, from one Gram matrix.

    ``gram`` = Yc_U^T Yc_U and ``xty`` = Yc_U^T yc over a pool U of items (centred columns, centred
    target); ``sets`` (B, K) index into U. Everything GCV needs (RSS and the trace of the hat
    matrix) follows from K x K blocks, so scoring a candidate costs O(K^3) and not O(n K^2): the
    number of training models drops out of the inner loop. GCV is the rotation-invariant version
    of the exact leave-one-out error and ranks anchor sets the same way in practice.
    """
    k = sets.shape[-1]
    G = gram[sets.unsqueeze(-1), sets.unsqueeze(-2)]  # (B, K, K)
    b = xty[sets].unsqueeze(-1)  # (B, K, 1)
    eye = torch.eye(k, dtype=gram.dtype, device=gram.device)
    chol = torch.linalg.cholesky(G + alpha * eye)
    w = torch.cholesky_solve(b, chol)  # (B, K, 1)
    rss = yty - 2 * (w * b).sum((-1, -2)) + (w.transpose(-1, -2) @ G @ w).squeeze(-1).squeeze(-1)
    inv = torch.cholesky_inverse(chol)
    dof = k - alpha * inv.diagonal(dim1=-2, dim2=-1).sum(-1) + 1.0  # + intercept
    return (rss / n) / (1.0 - dof / n).clamp_min(1e-6) ** 2


def ridge_gcv_swaps(gram: torch.Tensor, xty: torch.Tensor, yty: float, n: int, k: int, positions: torch.Tensor,
                    alpha: float = 1.0) -> torch.Tensor:
    """GCV error of every single swap of an anchor set, by low-rank updates of one K x K inverse.

    The pool is ordered anchors first: ``gram``/``xty`` as in :func:`ridge_gcv_from_gram` over a pool
    whose first ``k`` entries are the current anchors and the rest ``C`` candidates. Returns the
    (P, C) GCV errors of the sets "anchor ``positions[p]`` replaced by candidate ``c``", equal to
    ``ridge_gcv_from_gram`` on those sets (to rounding) at O(K^3 + C K^2 + P C K) instead of
    O(P C K^3): one Cholesky of the current system, then per swap a removal (downdate of the
    inverse by the anchor's row) and an addition (bordering by the candidate's column), each of
    which changes the solution, the residual sum of squares and the trace of the inverse in closed
    form. All quantities are kept in the pool's dtype (float64 on a CPU).

    With ``M = G_A + alpha I``, ``H = M^-1``, ``w = H b``: removing anchor ``j`` gives
    ``w_R = w - H[:, j] w_j / H_jj`` and ``tr(H_R) = tr(H) - |H[:, j]|^2 / H_jj``; adding candidate
    ``c`` with cross-products ``g`` gives ``u = H_R g = z - H[:, j] z_j / H_jj`` (``z = H g``), Schur
    complement ``sigma = M_cc - g^T u``, new weight ``t = (b_c - b^T u) / sigma``, and
    ``w^T b`` += ``t^2 sigma``, ``|w|^2`` = ``|w_R - t u|^2 + t^2``, ``tr`` += ``(|u|^2 + 1) / sigma``;
    RSS = ``y^T y - w^T b - alpha |w|^2`` (since ``M w = b``).
    """
    eye = torch.eye(k, dtype=gram.dtype, device=gram.device)
    M = gram[:k, :k] + alpha * eye
    b = xty[:k]
    chol = torch.linalg.cholesky(M)
    H = torch.cholesky_inverse(chol)
    H = 0.5 * (H + H.T)
    w = H @ b  # (K,)
    trace = H.diagonal().sum()
    Gac = gram[:k, k:]  # (K, C) anchors x candidates
    Z = H @ Gac  # (K, C): z_c = H g_c
    cand_diag = gram.diagonal()[k:] + alpha  # (C,)
    b_c = xty[k:]  # (C,)

    hj = H[:, positions].T  # (P, K): column j of H
    hjj = H[positions, positions]  # (P,)
    # removal of anchor j (component j of every vector below is exactly zero by construction)
    w_r = w[None, :] - hj * (w[positions] / hjj)[:, None]  # (P, K)
    tr_r = trace - (hj * hj).sum(-1) / hjj  # (P,)
    wb_r = w_r @ b  # (P,) = b_R^T H_R b_R
    ww_r = (w_r * w_r).sum(-1)  # (P,)
    # addition of candidate c: u = z_c - H[:, j] z_c[j] / H_jj  -> (P, C, K)
    zj = Z[positions, :]  # (P, C)
    U = Z.T[None, :, :] - hj[:, None, :] * (zj / hjj[:, None])[:, :, None]
    U = U.clone()
    U[torch.arange(len(positions), device=U.device), :, positions] = 0.0  # exact zero at the removed slot
    gu = (U * Gac.T[None, :, :]).sum(-1)  # (P, C) g^T u (g's component j meets u_j = 0)
    sigma = (cand_diag[None, :] - gu).clamp_min(1e-12)
    bu = U @ b  # (P, C)
    t = (b_c[None, :] - bu) / sigma
    uu = (U * U).sum(-1)
    uw = (U * w_r[:, None, :]).sum(-1)
    wb = wb_r[:, None] + t * t * sigma
    ww = ww_r[:, None] - 2 * t * uw + t * t * (uu + 1.0)
    tr = tr_r[:, None] + (uu + 1.0) / sigma
    rss = yty - wb - alpha * ww
    dof = k - alpha * tr + 1.0  # + intercept
    return (rss / n) / (1.0 - dof / n).clamp_min(1e-6) ** 2


# ------------------------------------------------------------------------------------------------
# Batched MLP
# ------------------------------------------------------------------------------------------------
class BatchedMLP(nn.Module):
    """``members`` independent MLPs ``K -> 128 -> 64 -> 32 -> 1`` (GELU, dropout, sigmoid output).

    Weights carry a leading member dimension so a forward pass over all members is a handful of
    batched matmuls. Inputs are anchor answers mapped to ``2y - 1`` (centred at 0).
    """

    def __init__(self, members: int, k: int, hidden: tuple[int, ...] = (128, 64, 32),
                 dropout: float = 0.1, generator: torch.Generator | None = None) -> None:
        super().__init__()
        sizes = (k, *hidden, 1)
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes):
            bound = 1.0 / math.sqrt(fan_in)
            w = (torch.rand(members, fan_in, fan_out, generator=generator) * 2 - 1) * bound
            b = (torch.rand(members, 1, fan_out, generator=generator) * 2 - 1) * bound
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(b))
        self.dropout = dropout
        self.members = members

    def logits(self, X: torch.Tensor) -> torch.Tensor:
        """X: (n, K) shared by all members or (members, n, K); returns (members, n)."""
        h = X
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.matmul(h, w) + b
            if i < last:
                h = nn.functional.gelu(h)
                if self.training and self.dropout > 0 and i < last - 1:
                    h = nn.functional.dropout(h, self.dropout, training=True)
        return h.squeeze(-1)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logits(X))


@dataclass
class MLPTrainResult:
    model: BatchedMLP
    best_val_mse: torch.Tensor  # (members,)
    epochs: int


def _as_inputs(X: torch.Tensor) -> torch.Tensor:
    return 2.0 * X - 1.0


def train_mlp(X: torch.Tensor, y: torch.Tensor, X_val: torch.Tensor, y_val: torch.Tensor, *,
              members: int = 1, lr: float = 3e-3, weight_decay: float = 1e-4, max_epochs: int = 3000,
              check_every: int = 10, patience: int = 20, dropout: float = 0.1, seed: int = 0,
              init: BatchedMLP | None = None, offset: torch.Tensor | None = None,
              offset_val: torch.Tensor | None = None) -> MLPTrainResult:
    """Train an ensemble of MLPs full-batch with Adam; early stopping on validation MSE per member.

    Each member keeps the state of its own best validation check (a masked copy; the state before
    the first step counts as a check), and training ends when no member improved for ``patience``
    checks. ``X``/``X_val`` are (n, K) shared by all members or (members, n, K) for a batch of
    different anchor sets. ``init`` warm-starts from a previous model (refinement steps change one
    anchor at a time, so most weights stay useful).

    ``offset``/``offset_val``: per-model logits added to the network's output before the sigmoid.
    With the last layer zero-initialised the ensemble starts *exactly* at the offset predictor
    (the ridge fit) and early stopping can only keep what improves on it on validation models.
    """
    device = X.device
    gen = torch.Generator().manual_seed(seed)
    k = X.shape[-1]
    model = BatchedMLP(members, k, dropout=dropout, generator=gen).to(device)
    off = torch.zeros((), device=device) if offset is None else offset
    off_val = torch.zeros((), device=device) if offset_val is None else offset_val
    if init is not None:
        model.load_state_dict(init.state_dict())
    elif offset is not None:
        with torch.no_grad():
            model.weights[-1].zero_()
            model.biases[-1].zero_()
    else:
        with torch.no_grad():  # start at the mean score: the sigmoid output begins where the data is
            mean = y.mean().clamp(1e-3, 1 - 1e-3)
            model.biases[-1].fill_(float(torch.log(mean / (1 - mean))))
    Xi, Xvi = _as_inputs(X), _as_inputs(X_val)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    best_state = [p.detach().clone() for p in model.parameters()]

    def val_mse() -> torch.Tensor:
        model.eval()
        with torch.no_grad():
            return ((torch.sigmoid(model.logits(Xvi) + off_val) - y_val) ** 2).mean(-1)

    best = val_mse()
    stale = 0
    epoch = 0
    torch.manual_seed(seed)  # dropout masks
    for epoch in range(1, max_epochs + 1):
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = ((torch.sigmoid(model.logits(Xi) + off) - y) ** 2).mean(-1).sum()
        loss.backward()
        opt.step()
        if epoch % check_every and epoch != max_epochs:
            continue
        val = val_mse()
        improved = val < best - 1e-7
        if improved.any():
            best = torch.where(improved, val, best)
            with torch.no_grad():
                for saved, p in zip(best_state, model.parameters(), strict=True):
                    mask = improved.view(-1, *([1] * (p.dim() - 1)))
                    saved.copy_(torch.where(mask, p.detach(), saved))
            stale = 0
        else:
            stale += 1
            if stale >= patience:
                break
    with torch.no_grad():
        for saved, p in zip(best_state, model.parameters(), strict=True):
            p.copy_(saved)
    model.eval()
    return MLPTrainResult(model, best, epoch)


def logit(p: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """log(p / (1 - p)) with p clipped into [eps, 1 - eps] (scores of exactly 0 or 1 stay finite)."""
    p = p.clamp(eps, 1 - eps)
    return torch.log(p / (1 - p))


def input_gradient_importance(model: BatchedMLP, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Anchor Importance Score of the MLP: mean over models of |dL/dx_j| (members averaged)."""
    model.eval()
    Xi = _as_inputs(X).detach().clone().requires_grad_(True)
    loss = ((model(Xi) - y) ** 2).sum()
    (grad,) = torch.autograd.grad(loss, Xi)
    return grad.abs().mean(dim=-2) if grad.dim() == 2 else grad.abs().mean(dim=(0, 1))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()
