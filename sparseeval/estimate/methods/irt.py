"""tinyBenchmarks baselines (Polo et al., ICML 2024): ``irt``, ``p-irt`` and ``gp-irt``.

A two-parameter IRT model, ``P(correct_mi) = sigmoid(alpha_i . theta_m - beta_i)`` with a
``dim``-dimensional ability ``theta`` (``dim=1`` is the classic 2PL), is fitted on the training
models by maximum a posteriori in torch (full batch, L-BFGS, Bernoulli likelihood on observed
cells only, Gaussian priors that pin down the scale the likelihood leaves free).

* anchors: k-means on the item embeddings ``(alpha_i, beta_i)``, the item nearest each centroid,
  weights = cluster sizes (shared by all three methods for the same seed);
* ``irt``: the weighted anchor mean;
* ``p-irt``: a new model's ability is estimated from its anchor answers alone (batched Newton with
  a standard normal prior), then ``(answers on anchors + expected correctness elsewhere) / n_items``;
* ``gp-irt``: ``lam * irt + (1 - lam) * p-irt`` with ``lam`` picked on a grid to minimise error on
  validation models when given, else on training models.

Each estimate approximates the *pool* mean, so it is finally mapped to the full-benchmark score
with a line fitted on training models (the pool may be a subset of the benchmark).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from sparseeval.estimate.methods.base import AnchorEstimator, impute, register
from sparseeval.estimate.methods.baselines import apply_linear_map, fit_linear_map, kmeans_anchors
from sparseeval.estimate.methods.device import resolve_device
from sparseeval.estimate.methods.inference import estimate_theta

if TYPE_CHECKING:
    import torch

#: grid of mixing weights tried for gp-irt
LAMBDA_GRID = np.linspace(0.0, 1.0, 21)


@dataclass(frozen=True)
class IRTParams:
    """Fitted item parameters (``alpha``: (n_items, dim), ``beta``: (n_items,)) and training abilities."""

    alpha: np.ndarray
    beta: np.ndarray
    theta: np.ndarray


def fit_irt(Y: np.ndarray, dim: int = 10, *, random_state: int = 0, device: str | torch.device = "auto",
            max_iter: int = 300, alpha_scale: float = 1.0, beta_scale: float = 3.0) -> IRTParams:
    """MAP fit of the multidimensional 2PL on ``Y`` (models x items, NaN = unobserved).

    Priors: ``theta ~ N(0, I)`` fixes location and scale of abilities; ``alpha ~ N(0, alpha_scale^2)``
    and ``beta ~ N(0, beta_scale^2)`` keep items answered by everyone (or no one) finite. After
    fitting, each ability dimension is oriented so it correlates positively with the models' mean
    answer (the likelihood cannot tell ``(alpha, theta)`` from ``(-alpha, -theta)``), which makes
    "higher ability = better model" and positive discriminations the norm.
    """
    if dim < 1:
        raise ValueError(f"dim must be at least 1, got {dim}")
    import torch
    from torch.nn.functional import binary_cross_entropy_with_logits

    dev = resolve_device(device)
    Y = np.asarray(Y, dtype=np.float32)
    observed = ~np.isnan(Y)
    n_models, n_items = Y.shape
    y = torch.as_tensor(np.where(observed, Y, 0.0), dtype=torch.float32, device=dev)
    mask = torch.as_tensor(observed, dtype=torch.float32, device=dev)
    n_obs = mask.sum().clamp_min(1.0)

    gen = torch.Generator().manual_seed(int(random_state))
    p_item = ((y * mask).sum(0) + 0.5) / (mask.sum(0) + 1.0)  # smoothed item means
    theta = (0.1 * torch.randn(n_models, dim, generator=gen)).to(dev).requires_grad_()
    alpha = (0.5 + 0.1 * torch.randn(n_items, dim, generator=gen)).to(dev).requires_grad_()
    beta = (-torch.logit(p_item)).detach().clone().requires_grad_()
    opt = torch.optim.LBFGS([theta, alpha, beta], lr=1.0, max_iter=max_iter, history_size=20,
                            tolerance_grad=1e-6, tolerance_change=1e-9, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logits = theta @ alpha.T - beta
        nll = binary_cross_entropy_with_logits(logits, y, weight=mask, reduction="sum")
        prior = 0.5 * (theta.square().sum() + alpha.square().sum() / alpha_scale**2
                       + beta.square().sum() / beta_scale**2)
        loss = (nll + prior) / n_obs
        loss.backward()
        return loss

    opt.step(closure)
    th = theta.detach().cpu().numpy().astype(np.float64)
    al = alpha.detach().cpu().numpy().astype(np.float64)
    be = beta.detach().cpu().numpy().astype(np.float64)
    with np.errstate(invalid="ignore"):
        row_mean = np.nanmean(Y, axis=1)
    row_mean = np.nan_to_num(row_mean, nan=float(np.nanmean(row_mean)) if n_models else 0.0)
    for d in range(dim):
        if np.std(th[:, d]) > 0 and np.corrcoef(th[:, d], row_mean)[0, 1] < 0:
            th[:, d] *= -1
            al[:, d] *= -1
    return IRTParams(alpha=al, beta=be, theta=th)


class _IRTFamily(AnchorEstimator):
    """Shared fit of the three tinyBenchmarks estimators; ``output`` picks which one predicts."""

    output: ClassVar[str] = "irt"
    lifted_at_top = False

    def __init__(self, k: int, *, random_state: int = 0, device: str = "auto", dim: int = 10,
                 max_iter: int = 300, n_init: int = 10) -> None:
        super().__init__(k, random_state=random_state, device=device)
        self.dim = int(dim)
        self.max_iter = int(max_iter)
        self.n_init = int(n_init)

    # -- estimates of the pool mean -----------------------------------------------------------
    def _irt_estimate(self, X: np.ndarray) -> np.ndarray:
        return X.astype(np.float64) @ self.weights_ / self.n_items_

    def _pirt_estimate(self, X: np.ndarray) -> np.ndarray:
        theta = estimate_theta(X, self.alpha_[self.anchors_], self.beta_[self.anchors_])
        rest = np.setdiff1d(np.arange(self.n_items_), self.anchors_)
        expected = 1.0 / (1.0 + np.exp(-(theta @ self.alpha_[rest].T - self.beta_[rest])))
        return (X.astype(np.float64).sum(1) + expected.sum(1)) / self.n_items_

    def _estimates(self, X: np.ndarray) -> dict[str, np.ndarray]:
        out = {"irt": self._irt_estimate(X)}
        if self.output != "irt":
            out["p-irt"] = self._pirt_estimate(X)
        return out

    # -- contract -----------------------------------------------------------------------------
    def fit(self, Y: np.ndarray, s: np.ndarray, Y_val: np.ndarray | None = None,
            s_val: np.ndarray | None = None) -> Self:
        Y = np.asarray(Y, dtype=np.float32)
        s = np.asarray(s, dtype=np.float64)
        self._check_k(Y.shape[1])
        params = fit_irt(Y, self.dim, random_state=self.random_state, device=self.device,
                         max_iter=self.max_iter)
        self.alpha_, self.beta_ = params.alpha, params.beta
        self.n_items_ = int(Y.shape[1])
        embedding = np.concatenate([params.alpha, params.beta[:, None]], axis=1)
        anchors, weights = kmeans_anchors(embedding, self.k, self.random_state, self.n_init)
        self._set_anchors(anchors, Y)
        self.weights_ = weights
        # the lines are fitted on estimates computed exactly as for a new model (anchors only)
        est = self._estimates(impute(Y[:, anchors], self.anchor_fill_))
        self.lines_ = {name: fit_linear_map(x, s) for name, x in est.items()}
        self.lam_ = 1.0
        if self.output == "gp-irt":
            self.lam_ = self._choose_lambda(est, s, Y_val, s_val)
            self.lines_["gp-irt"] = fit_linear_map(self._mix(est, self.lam_), s)
        return self

    @staticmethod
    def _mix(est: dict[str, np.ndarray], lam: float) -> np.ndarray:
        return lam * est["irt"] + (1.0 - lam) * est["p-irt"]

    def _choose_lambda(self, est: dict[str, np.ndarray], s: np.ndarray, Y_val: np.ndarray | None,
                       s_val: np.ndarray | None) -> float:
        """Grid ``lam`` minimising MAE after the training line: on validation rows if given, else training."""
        if Y_val is not None and s_val is not None and len(s_val) > 0:
            est_eval = self._estimates(impute(np.asarray(Y_val, np.float32)[:, self.anchors_],
                                              self.anchor_fill_))
            s_eval = np.asarray(s_val, dtype=np.float64)
        else:
            est_eval, s_eval = est, s
        errors = []
        for lam in LAMBDA_GRID:
            line = fit_linear_map(self._mix(est, lam), s)
            pred = np.clip(apply_linear_map(self._mix(est_eval, lam), line), 0.0, 1.0)
            errors.append(np.abs(pred - s_eval).mean())
        return float(LAMBDA_GRID[int(np.argmin(errors))])

    def _predict(self, X: np.ndarray) -> np.ndarray:
        est = self._estimates(X)
        x = self._mix(est, self.lam_) if self.output == "gp-irt" else est[self.output]
        return apply_linear_map(x, self.lines_[self.output])

    def _get_params_state(self) -> dict[str, Any]:
        return {
            "alpha": np.asarray(self.alpha_), "beta": np.asarray(self.beta_),
            "weights": np.asarray(self.weights_), "n_items": self.n_items_,
            "lines": {name: [float(v) for v in line] for name, line in self.lines_.items()},
            "lambda": self.lam_, "dim": self.dim, "max_iter": self.max_iter, "n_init": self.n_init,
        }

    def _set_params_state(self, state: dict[str, Any]) -> None:
        self.alpha_ = np.asarray(state["alpha"], dtype=np.float64)
        self.beta_ = np.asarray(state["beta"], dtype=np.float64)
        self.weights_ = np.asarray(state["weights"], dtype=np.float64)
        self.n_items_ = int(state["n_items"])
        self.lines_ = {name: (float(line[0]), float(line[1])) for name, line in state["lines"].items()}
        self.lam_ = float(state["lambda"])
        self.dim = int(state["dim"])
        self.max_iter = int(state["max_iter"])
        self.n_init = int(state["n_init"])


@register("irt")
class IRTAnchors(_IRTFamily):
    """tinyBenchmarks ``IRT``: weighted mean of anchors clustered in IRT item space."""

    output = "irt"


@register("p-irt")
class PIRT(_IRTFamily):
    """tinyBenchmarks ``p-IRT``: anchors observed, the rest predicted from the estimated ability."""

    output = "p-irt"


@register("gp-irt")
class GPIRT(_IRTFamily):
    """tinyBenchmarks ``gp-IRT``: the ``irt`` and ``p-irt`` estimates mixed by a tuned ``lambda``."""

    output = "gp-irt"
