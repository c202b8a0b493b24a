"""The estimator contract every anchor method follows (scikit-learn style).

An *anchor estimator* chooses ``k`` items from training models' results and fits a predictor of
the full-benchmark score from a model's answers to those items only. ``fit`` sees training (and
optionally validation) models and nothing else, which is what makes the evaluation leak-proof:
the protocol simply never passes test rows to ``fit``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Self

import numpy as np

from sparseeval.core.errors import UsageError

#: name -> estimator class; filled by ``register``
_REGISTRY: dict[str, type[AnchorEstimator]] = {}


def register(name: str) -> Callable[[type[AnchorEstimator]], type[AnchorEstimator]]:
    """Class decorator adding an estimator under its CLI/method name."""

    def deco(cls: type[AnchorEstimator]) -> type[AnchorEstimator]:
        cls.method = name
        _REGISTRY[name] = cls
        return cls

    return deco


def available_methods() -> list[str]:
    """Registered method names (importing :mod:`sparseeval.estimate.methods` registers them all)."""
    return sorted(_REGISTRY)


def make_estimator(method: str, k: int, **params: Any) -> AnchorEstimator:
    """Instantiate the estimator registered as ``method``."""
    try:
        cls = _REGISTRY[method]
    except KeyError:
        raise UsageError(f"unknown method {method!r}; choose from {', '.join(available_methods())}") from None
    return cls(k=k, **params)


def column_means(Y: np.ndarray) -> np.ndarray:
    """Per-item mean over observed (non-NaN) cells; 0.5 for an item nobody answered."""
    with np.errstate(invalid="ignore"):
        means = np.nanmean(np.where(np.isnan(Y), np.nan, Y), axis=0) if Y.size else np.zeros(Y.shape[1])
    return np.nan_to_num(means, nan=0.5).astype(np.float32)


def impute(Y: np.ndarray, fill: np.ndarray) -> np.ndarray:
    """Replace NaN cells of ``Y`` by the per-column ``fill`` (training means), as float32."""
    Y = np.asarray(Y, dtype=np.float32)
    if not np.isnan(Y).any():
        return Y
    return np.where(np.isnan(Y), fill[None, :], Y).astype(np.float32)


class AnchorEstimator(ABC):
    """Chooses ``k`` anchor items and predicts full scores from answers to them.

    After ``fit``: ``anchors_`` (int column indices into the training matrix, length ``k``, unique)
    and whatever the predictor needs. ``predict(X)`` takes answers to ``anchors_`` in that order
    (NaN = not answered) and returns scores in [0, 1].
    """

    method: ClassVar[str] = "abstract"
    #: whether calibration lifts this estimator's predictions at the top of the training range
    #: (:mod:`sparseeval.estimate.beyond`): yes for regression heads on the anchor answers, which shrink toward
    #: the training models; no where the score comes through a line on an item mean or an ability
    #: (``random``, ``anchor-points``, the IRT family): on the strongest models of arc and hellaswag
    #: those already overshoot, and a lift doubles it (docs/results/frontier.md)
    lifted_at_top: ClassVar[bool] = True

    def __init__(self, k: int, *, random_state: int = 0, device: str = "auto") -> None:
        if k < 1:
            raise UsageError(f"k must be at least 1, got {k}")
        self.k = int(k)
        self.random_state = int(random_state)
        self.device = device
        self.anchors_: np.ndarray | None = None
        self.anchor_fill_: np.ndarray | None = None  # training mean of each anchor, for missing answers

    # -- the contract -------------------------------------------------------------------------
    @abstractmethod
    def fit(self, Y: np.ndarray, s: np.ndarray, Y_val: np.ndarray | None = None,
            s_val: np.ndarray | None = None) -> Self:
        """Choose anchors and fit the predictor on training rows ``Y`` (NaN = missing) and scores ``s``."""

    @abstractmethod
    def _predict(self, X: np.ndarray) -> np.ndarray:
        """Predict from complete (imputed) anchor answers ``X`` of shape (n, k).

        NumPy only, never torch: a saved predictor is loaded and run by ``pip install sparseeval``
        without the ``[fit]`` extra (the forward passes live in :mod:`sparseeval.estimate.methods.inference`).
        Fitting code imports torch inside the functions that need it."""

    @abstractmethod
    def _get_params_state(self) -> dict[str, Any]:
        """Fitted parameters beyond anchors for saving: NumPy arrays and plain values (numbers, strings,
        lists, dicts of them), which the predictor folder stores as safetensors and JSON."""

    @abstractmethod
    def _set_params_state(self, state: dict[str, Any]) -> None:
        """Inverse of ``_get_params_state``."""

    # -- shared behaviour ---------------------------------------------------------------------
    def _check_k(self, n_items: int) -> None:
        if self.k > n_items:
            raise UsageError(f"k={self.k} exceeds the number of items ({n_items})")

    def _set_anchors(self, anchors: np.ndarray, Y: np.ndarray | None, *, fill: np.ndarray | None = None) -> None:
        """Fix the anchors; their fill values are the training means of ``Y``'s anchor columns, or
        ``fill`` when the caller read only those columns (a refit on fixed anchors)."""
        anchors = np.asarray(anchors, dtype=np.int64)
        if len(np.unique(anchors)) != len(anchors) or len(anchors) != self.k:
            raise AssertionError(f"{self.method}: anchors must be {self.k} unique items, got {anchors}")
        self.anchors_ = anchors
        self.anchor_fill_ = column_means(Y[:, anchors]) if fill is None else np.asarray(fill, dtype=np.float32)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Scores in [0, 1] from anchor answers ``X`` (n, k); NaN answers take the training mean."""
        if self.anchors_ is None or self.anchor_fill_ is None:
            raise RuntimeError(f"{self.method} estimator is not fitted")
        X = np.atleast_2d(np.asarray(X, dtype=np.float32))
        if X.shape[1] != self.k:
            raise ValueError(f"expected answers to {self.k} anchors, got {X.shape[1]} columns")
        pred = self._predict(impute(X, self.anchor_fill_))
        return np.clip(np.asarray(pred, dtype=np.float64), 0.0, 1.0)

    def get_state(self) -> dict[str, Any]:
        """Everything needed to rebuild the fitted estimator (arrays and plain values; see
        :mod:`sparseeval.estimate.artifact` for how a folder stores them)."""
        if self.anchors_ is None:
            raise RuntimeError("cannot save an unfitted estimator")
        return {
            "method": self.method,
            "k": self.k,
            "random_state": self.random_state,
            "anchors": np.asarray(self.anchors_, dtype=np.int64),
            "anchor_fill": np.asarray(self.anchor_fill_, dtype=np.float32),
            "params": self._get_params_state(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> AnchorEstimator:
        """Rebuild a fitted estimator from :meth:`get_state` output (any registered method)."""
        est = make_estimator(state["method"], state["k"], random_state=state["random_state"], device="cpu")
        est.anchors_ = np.asarray(state["anchors"], dtype=np.int64)
        est.anchor_fill_ = np.asarray(state["anchor_fill"], dtype=np.float32)
        est._set_params_state(state["params"])
        return est
