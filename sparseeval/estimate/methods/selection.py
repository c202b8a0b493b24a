"""SparseEval anchor selection: a k-means or random start, then importance-guided swaps.

Refinement follows the paper's idea (swap a weak anchor, by Anchor Importance Score, for a strong
candidate, by Candidate Importance Score) and fixes the reference's flaws:

* a swap is *accepted only if it improves* the generalised cross-validation error (closed-form
  leave-one-out surrogate) of a ridge proxy on the training
  models (the reference accepts every swap, even harmful ones);
* each step tries the ``n_weak`` weakest anchors against the ``n_cand`` strongest candidates, all
  scored in one batched tensor program, rather than one blind swap;
* it runs until no swap improves (or ``max_steps``), so every anchor can change, not just 10;
* the start (k-means or random) is a parameter and ``auto`` picks by validation error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from sparseeval.estimate.methods.base import column_means
from sparseeval.estimate.methods.baselines import item_embedding, kmeans_anchors
from sparseeval.estimate.methods.proxies import ridge_fit, ridge_gcv_from_gram, ridge_gcv_swaps

#: importance(anchors) -> (AIS per anchor, residuals f(X) - s per training model)
ImportanceFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]

#: above this many cells (training models x items) the big matrices stay float32 on a CPU as well
#: (half the memory and memory traffic); only K x K systems and the small Gram blocks go to float64.
#: Below it (every benchmark of the bundled leaderboard data) everything is float64, as before.
FLOAT32_CELLS = 20_000_000


def work_dtype(device: torch.device, n_cells: int) -> torch.dtype:
    """dtype of the models x items matrices: float64 on a CPU up to ``FLOAT32_CELLS``, else float32."""
    return torch.float64 if device.type == "cpu" and n_cells <= FLOAT32_CELLS else torch.float32


def fast_column_means(Y: np.ndarray) -> tuple[np.ndarray, bool]:
    """(:func:`~sparseeval.estimate.methods.base.column_means`, whether nothing is missing).

    Above ``FLOAT32_CELLS``: one multi-threaded float64 pass of column sums, which also tells whether
    any cell is missing (a NaN makes its column's sum NaN), so the caller skips imputation without
    another pass; the reference computation (with its full-size temporaries) only below.
    """
    if Y.size <= FLOAT32_CELLS:
        return column_means(Y), not np.isnan(Y).any()
    sums = torch.from_numpy(np.ascontiguousarray(Y)).sum(0, dtype=torch.float64).numpy()
    if not np.isnan(sums).any():
        return (sums / Y.shape[0]).astype(np.float32), True
    missing = np.isnan(Y)
    counts = Y.shape[0] - missing.sum(axis=0)
    sums = np.where(missing, np.float32(0), Y).sum(axis=0, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
    return np.where(counts > 0, means, 0.5).astype(np.float32), False


def items_by_row(Y: np.ndarray, device: torch.device) -> torch.Tensor | None:
    """At scale (more than ``FLOAT32_CELLS``), one contiguous float32 (items, models) copy of the
    complete training answers ``Y``, shared read-only by :func:`center`, :func:`linear_importance`
    and :func:`kmeans_start` (one transposition of the matrix instead of one each); None below."""
    if Y.size <= FLOAT32_CELLS:
        return None
    return _items_by_row(Y, torch.float32, device)


@dataclass
class Centered:
    """Training columns centred by their means, stored item by item, and the centred target; shared by
    the refinements of every start (one pass over the matrix instead of one per start).

    Items are rows (``YcT``, contiguous): the columns of a few hundred anchors and candidates are then
    contiguous rows to gather, not a strided walk through the whole matrix (that gather was the
    largest cost of a refinement step at 30,000 items).
    """

    YcT: torch.Tensor  #: (items, models), :func:`work_dtype`
    col_norm: torch.Tensor  #: (items,) norms of the centred item columns, at least 1e-9
    yc: torch.Tensor  #: (models,) centred target, float64 on a CPU
    yty: float


def center(Y: np.ndarray, s: np.ndarray, device: torch.device, *, rows: torch.Tensor | None = None) -> Centered:
    """:class:`Centered` of complete (imputed) training answers ``Y`` and scores ``s`` (``rows``: the
    shared :func:`items_by_row` of ``Y``, left unchanged)."""
    dtype = work_dtype(device, Y.size)
    exact = torch.float64 if device.type == "cpu" else torch.float32
    if rows is not None and rows.dtype == dtype:
        YT = rows - rows.mean(1, keepdim=True)
    else:
        YT = _items_by_row(Y, dtype, device)
        YT -= YT.mean(1, keepdim=True)
    st = torch.as_tensor(s, dtype=exact, device=device)
    yc = st - st.mean()
    return Centered(YcT=YT, col_norm=YT.norm(dim=1).clamp_min(1e-9), yc=yc, yty=float(yc @ yc))


def _items_by_row(Y: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A private (items, models) contiguous copy of ``Y`` in ``dtype``."""
    YT = torch.as_tensor(Y, device=device).T.to(dtype).contiguous()
    if YT.data_ptr() == torch.as_tensor(Y).data_ptr():  # already items x models and that dtype: copy
        YT = YT.clone()
    return YT


def kmeans_start(Y: np.ndarray, k: int, seed: int, *, rows: torch.Tensor | None = None) -> np.ndarray:
    """Initial anchors: the items nearest the k-means centroids of training item vectors.

    The same clustering as the Anchor Points baseline (empty clusters filled at random, seeded),
    with fewer restarts: refinement moves the anchors afterwards anyway. At leaderboard scale the
    item vectors are first reduced to their leading principal components
    (:func:`~sparseeval.estimate.methods.baselines.item_embedding`), which makes k-means seconds, not minutes.
    """
    vectors = item_embedding(Y, k, seed, rows=None if rows is None else rows.cpu())
    # one k-means++ restart on the reduced vectors (refinement moves the anchors anyway); three when exact
    anchors, _ = kmeans_anchors(vectors, k, seed, n_init=3 if vectors.shape[1] == Y.shape[0] else 1)
    return np.sort(anchors)  # item order, independent of how k-means numbers its clusters


@dataclass
class RefineResult:
    """Outcome of refinement: the anchors, the GCV criterion, and one record per accepted swap."""

    anchors: np.ndarray
    criterion: float
    steps: int
    history: list[dict[str, float | int]] = field(default_factory=list)


def candidate_importance(YcT: torch.Tensor, col_norm: torch.Tensor, resid: torch.Tensor) -> torch.Tensor:
    """CIS: |correlation| of each item with the proxy's residuals.

    The reference uses ``|(y_i - 0.5)^T e|``; centring by the item's training mean and normalising
    by its spread makes a rarely-solved item comparable to a coin-flip item, which is what a
    least-squares greedy step needs (the item that best explains what the proxy still gets wrong).
    ``YcT``: centred answers, items x models (:class:`Centered`).
    """
    return (YcT @ resid).abs() / col_norm


def refine(Y: np.ndarray, s: np.ndarray, anchors: np.ndarray, importance: ImportanceFn, *,
           max_steps: int, n_weak: int = 4, n_cand: int = 16, alpha: float = 1.0,
           device: torch.device | None = None, centered: Centered | None = None) -> RefineResult:
    """Swap weak anchors for strong candidates while the ridge GCV error on training models improves.

    Each step: the proxy gives AIS per anchor and residuals; CIS ranks the non-anchors; the
    ``n_weak`` x ``n_cand`` swaps are scored together from one Gram matrix of the anchors and
    candidates (by low-rank updates of one K x K inverse, :func:`ridge_gcv_swaps`); the best is kept
    only if it lowers the criterion. ``centered``: :func:`center` of (``Y``, ``s``), when the caller
    refines several starts on the same data.
    """
    device = device or torch.device("cpu")
    data = centered if centered is not None else center(Y, s, device)
    YcT, col_norm, yc, yty = data.YcT, data.col_norm, data.yc, data.yty
    dtype, exact = YcT.dtype, yc.dtype  # K x K systems and the target in ``exact``
    n = YcT.shape[1]
    anchors = np.array(anchors, dtype=np.int64)
    k = anchors.size
    n_items = Y.shape[1]

    def gram_of(pool: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        Xu = YcT[torch.as_tensor(pool, device=device)].to(exact)  # (pool, models) contiguous rows
        return Xu @ Xu.T, Xu @ yc

    gram, xty = gram_of(anchors)
    current = float(ridge_gcv_from_gram(gram, xty, yty, n, torch.arange(k, device=device)[None, :], alpha)[0])
    history: list[dict[str, float | int]] = []
    steps = 0
    while steps < max_steps:
        steps += 1
        ais, resid = importance(anchors)
        cis = candidate_importance(YcT, col_norm, torch.as_tensor(resid, dtype=dtype, device=device))
        cis[torch.as_tensor(anchors, device=device)] = -1.0
        weak = np.argsort(ais, kind="stable")[: min(n_weak, k)]
        n_c = min(n_cand, n_items - k)
        if n_c < 1:
            break
        cands = torch.topk(cis, n_c).indices.cpu().numpy()
        pool = np.concatenate([anchors, cands])  # local index j < k: anchor j; k + c: candidate c
        gram, xty = gram_of(pool)
        losses = ridge_gcv_swaps(gram, xty, yty, n, k, torch.as_tensor(weak, device=device), alpha).reshape(-1)
        best = int(torch.argmin(losses))
        best_loss = float(losses[best])
        if not best_loss < current * (1 - 1e-6):
            break
        pos = int(weak[best // n_c])
        added = int(cands[best % n_c])
        history.append({"step": steps, "position": pos, "removed": int(anchors[pos]), "added": added,
                        "gcv_mse": best_loss})
        anchors = anchors.copy()
        anchors[pos] = added
        current = best_loss
    return RefineResult(anchors=anchors, criterion=current, steps=steps, history=history)


def linear_importance(Y: np.ndarray, s: np.ndarray, alpha: float, device: torch.device, *,
                      rows: torch.Tensor | None = None) -> ImportanceFn:
    """AIS/residuals from a closed-form ridge proxy.

    For a linear proxy ``dL/dx_j = 2 e w_j``, so the paper's AIS ranks anchors by ``|w_j|``; we
    scale by the anchor's spread over training models (gradient x input scale), so an item almost
    everyone solves is not mistaken for an important one because its weight is large. ``Y`` is
    copied once, item by item (or ``rows``, the shared :func:`items_by_row`), so each call gathers
    the anchors' answers as contiguous rows.
    """
    dtype = work_dtype(device, Y.size)
    exact = torch.float64 if device.type == "cpu" else torch.float32
    YT = rows if rows is not None and rows.dtype == dtype else _items_by_row(Y, dtype, device)  # anchors = rows
    st = torch.as_tensor(s, dtype=exact, device=device)
    std = YT.std(1).to(exact)

    def fn(anchors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = torch.as_tensor(anchors, device=device)
        X = YT[idx].T.to(exact).contiguous()
        fit = ridge_fit(X, st, alpha)
        resid = fit.predict(X) - st
        ais = fit.coef.abs() * std[idx]
        return ais.cpu().numpy(), resid.cpu().numpy()

    return fn


#: at most this share of the training models may answer every anchor right once the ceiling is broken:
#: then "all anchors right" is rare enough to mean "at or beyond the top of the training range"
CEILING_FRAC = 0.02
#: the fewest ceiling models worth splitting (fewer: their covariances are noise)
MIN_CEILING_MODELS = 10
#: a ceiling breaker must be answered wrong by at least this share of the ceiling models (and right by
#: as many): an item almost all of them solve (or none) splits nothing
MIN_SPLIT = 0.1


def _score_covariance(Y: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Covariance of each item with the score over the rows of ``Y``: large when the item splits the
    rows *and* the ones answering it right score higher."""
    return ((Y - Y.mean(0)) * (s - s.mean())[:, None]).mean(0)


def _gcv_without_each(X: np.ndarray, y: np.ndarray, alpha: float) -> np.ndarray:
    """GCV error of a ridge of ``y`` on ``X`` with each column left out in turn (intercept unpenalised)."""
    out = np.empty(X.shape[1])
    for j in range(X.shape[1]):
        Xj = np.delete(X, j, axis=1)
        Xc = Xj - Xj.mean(0)
        yc = y - y.mean()
        gram = Xc.T @ Xc
        coef = np.linalg.solve(gram + alpha * np.eye(gram.shape[0]), Xc.T @ yc)
        dof = np.trace(np.linalg.solve(gram + alpha * np.eye(gram.shape[0]), gram)) + 1.0
        out[j] = float(np.mean((yc - Xc @ coef) ** 2) / (1.0 - dof / len(y)) ** 2)
    return out


def break_ceiling(Y: np.ndarray, s: np.ndarray, anchors: np.ndarray, max_swaps: int, *, alpha: float = 1.0,
                  ceiling: float = CEILING_FRAC) -> tuple[np.ndarray, int]:
    """(``anchors`` with up to ``max_swaps`` of them swapped for items that split the ceiling, swaps made).

    Why: anchors chosen for the error over all training models are mostly items the strong models all
    solve (most models are not strong). A model stronger than every training model then answers them all
    right, which says nothing about *how much* stronger: every predictor saturates at the top of the
    training range, and the interval misses without a word. While more than ``ceiling`` of the training
    models answer every anchor right, the anchor whose loss costs least (ridge GCV without it) is
    replaced by the unused item that best splits those ceiling models by score (largest covariance with
    the score among them, among items that at least ``MIN_SPLIT`` of them get wrong and as many right: an
item nobody solves splits nobody and is never chosen). Afterwards "all
    anchors right" is rare, so the guard can flag it as "at or beyond the top" without flagging ordinary
    models; anchors without a ceiling problem are left exactly as chosen. Training models only.
    """
    Y = np.asarray(Y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    anchors = np.asarray(anchors, dtype=np.int64).copy()
    swaps = 0
    while swaps < max_swaps:
        ceiling_rows = np.all(Y[:, anchors] >= 1.0, axis=1)
        if ceiling_rows.mean() <= ceiling or ceiling_rows.sum() < MIN_CEILING_MODELS:
            break
        unused = np.setdiff1d(np.arange(Y.shape[1]), anchors)
        p = Y[ceiling_rows][:, unused].mean(0)
        cov = np.where((p >= MIN_SPLIT) & (p <= 1.0 - MIN_SPLIT),
                       _score_covariance(Y[ceiling_rows][:, unused], s[ceiling_rows]), -np.inf)
        if unused.size == 0 or cov.max() <= 0:  # the pool cannot split them: said by the guard instead
            break
        # never drop an earlier ceiling breaker: they are the last anchors
        keep = anchors.size - swaps
        drop = int(np.argmin(_gcv_without_each(Y[:, anchors], s, alpha)[:keep]))
        anchors = np.concatenate([np.delete(anchors, drop), [unused[int(np.argmax(cov))]]])
        swaps += 1
    return anchors, swaps
