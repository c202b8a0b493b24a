"""The forward passes of fitted predictors, in NumPy: what ``predict`` runs, without torch.

Fitting needs torch (batched selection, MLP training); scoring a new model does not: a saved
predictor is a ridge (one dot product), an MLP ensemble (three matrix products per member), or an
IRT ability estimate (a few Newton steps on k anchors). Keeping these here, free of torch, is what
lets ``pip install sparseeval`` (no extras) load a predictor folder and score a model in well under
a second, and it is the one definition both the fitting code and the loaded predictor use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

try:  # SciPy's erf when it is there (the [fit] install); the standard library's, element-wise, when not
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - exercised by the light-install test
    _erf = np.vectorize(math.erf, otypes=[np.float64])


def logit(p: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    """log(p / (1 - p)) with p clipped into [eps, 1 - eps] (scores of exactly 0 or 1 stay finite)."""
    p = np.clip(p, eps, 1 - eps)
    return np.log(p / (1 - p))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def gelu(x: np.ndarray) -> np.ndarray:
    """The exact GELU torch's ``gelu`` computes: ``x * Phi(x)``."""
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))).astype(x.dtype, copy=False)


def as_array(value: Any) -> np.ndarray:
    """A torch tensor (a fitted parameter still on its device) or array-like as a NumPy array, without
    importing torch."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def mlp_weights(model: Any) -> dict[str, np.ndarray]:
    """A trained :class:`~sparseeval.estimate.methods.proxies.BatchedMLP` as plain arrays, named as in its
    ``state_dict`` (``weights.0``, ``biases.0``, ...), which is also how version-1 folders stored it."""
    return {name: as_array(t).astype(np.float32) for name, t in model.state_dict().items()}


def mlp_logits(weights: Mapping[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """The batched MLP's output logits (members, n) for inputs ``X`` (n, K) already mapped to ``2y - 1``:
    per layer ``h @ W + b`` with GELU between layers (dropout is off at inference)."""
    n_layers = sum(1 for name in weights if name.startswith("weights."))
    h = np.asarray(X, dtype=np.float32)
    for i in range(n_layers):
        h = np.matmul(h, weights[f"weights.{i}"]) + weights[f"biases.{i}"]
        if i < n_layers - 1:
            h = gelu(h)
    return h[..., 0]


def estimate_theta(X: np.ndarray, alpha: np.ndarray, beta: np.ndarray, *, n_iter: int = 30) -> np.ndarray:
    """MAP ability of each row of ``X`` (answers to the items ``alpha`` (k, dim) / ``beta`` (k,) describe).

    All models at once: the posterior is a ridge-penalised logistic regression per model, so a
    batched Newton step (one ``dim x dim`` solve per model) converges in a handful of iterations;
    a per-model step-halving keeps every step a descent step. The prior ``N(0, I)`` keeps a model
    that answered every anchor right (or wrong) at a finite ability.
    """
    X = np.asarray(X, dtype=np.float64)
    A = np.asarray(alpha, dtype=np.float64)
    b = np.asarray(beta, dtype=np.float64)
    n, dim = X.shape[0], A.shape[1]
    theta = np.zeros((n, dim))
    eye = np.eye(dim)

    def objective(t: np.ndarray) -> np.ndarray:
        z = t @ A.T - b
        return (np.logaddexp(0.0, z) - X * z).sum(1) + 0.5 * (t * t).sum(1)

    f = objective(theta)
    for _ in range(n_iter):
        p = sigmoid(theta @ A.T - b)
        grad = (p - X) @ A + theta
        hess = np.einsum("nk,kd,ke->nde", p * (1 - p), A, A) + eye
        step = np.linalg.solve(hess, grad[..., None])[..., 0]
        scale = np.ones((n, 1))
        for _ in range(8):  # backtracking, per model
            f_new = objective(theta - scale * step)
            worse = f_new > f + 1e-12
            if not worse.any():
                break
            scale = np.where(worse[:, None], scale * 0.5, scale)
        cand = theta - scale * step
        f_new = objective(cand)
        theta = np.where((f_new <= f)[:, None], cand, theta)
        f = np.minimum(f_new, f)
        if np.abs(grad).max(initial=0.0) < 1e-8:
            break
    return theta
