"""``sparseeval-joint``: one anchor set for several benchmarks, chosen together under one item budget.

A model's answers on one benchmark say a lot about its scores on the others, so every benchmark's
score (and their mean) is predicted from *all* answered anchors, and the anchors are selected for
that multi-output target:

1. **Start**: each benchmark's own SparseEval selection (k-means start + refinement on its own
   items and score) with an even share of the budget, so no benchmark starts uncovered.
2. **Joint refinement**: SparseEval's swap step with a multi-output target. The proxy is a ridge of
   every benchmark's score on all anchors; the Anchor Importance Score of an anchor is the
   (weighted) norm of its coefficients across benchmarks times its spread, the Candidate Importance
   Score of an item the weighted norm of its correlations with every benchmark's residuals, and a
   swap of any anchor for any item *of any benchmark* is accepted only if it lowers the weighted
   sum of the benchmarks' ridge GCV errors. Each benchmark is weighted by the inverse of its own
   starting error, so the criterion is a sum of *relative* errors (GSM8K's larger errors do not
   drown ARC's). Items therefore move to where they predict best: the budget ends up spent
   unevenly when that helps.
3. **Final predictor**: per benchmark, a ridge on all anchors (alpha chosen on validation models)
   with an ensemble of the paper's MLPs stacked on it in logit space and early-stopped on validation
   models; all ``benchmarks x members`` networks train as one batched tensor program.

``fit`` sees training and validation rows only (the protocol never passes test models), like every
other estimator. Columns of the joint matrix are the benchmarks' item pools side by side; ``groups``
says which benchmark each column belongs to. :func:`joint_data` builds that matrix from
per-benchmark :class:`~sparseeval.data.matrix.ResponseMatrix` objects (models that have every benchmark).

The module holds the estimator; the joint matrix is built in :mod:`.joint_matrix` and the multi-output
selection steps live in :mod:`.joint_selection` (both re-exported here, where the rest of the library
imports them from).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from sparseeval.data.benchmarks import JOINT_NAME
from sparseeval.estimate.methods.base import AnchorEstimator, column_means, impute, register
from sparseeval.estimate.methods.device import resolve_device, thread_limit
from sparseeval.estimate.methods.inference import as_array, logit, mlp_logits, mlp_weights, sigmoid
from sparseeval.estimate.methods.joint_matrix import JOINT_SEP, JointData, common_models, joint_data, restrict_models
from sparseeval.estimate.methods.joint_selection import even_shares, forward_order, refine_joint, ridge_gcv_multi
from sparseeval.estimate.methods.sparseeval_method import RIDGE_ALPHAS, _internal_val

if TYPE_CHECKING:
    import torch

#: the estimator's own names, and the joint matrix's and selection's, which importers take from here
__all__ = ["JOINT_METHOD", "JOINT_SEP", "MEAN", "JointData", "JointOutput", "JointSparseEval", "common_models",
           "even_shares", "forward_order", "joint_data", "refine_joint", "restrict_models", "ridge_gcv_multi"]

log = logging.getLogger(__name__)

#: the method name, also the name of the mean-score output and of the joint predictor's registry entry
JOINT_METHOD = JOINT_NAME
MEAN = "mean"
#: predictions remembered by :meth:`JointSparseEval.predict_mean` (every prefix of a long anchor order)
PREDICT_CACHE_SIZE = 1024


# ------------------------------------------------------------------------------------------------
# The estimator
# ------------------------------------------------------------------------------------------------
@register(JOINT_METHOD)
class JointSparseEval(AnchorEstimator):
    """SparseEval over several benchmarks at once (see the module docstring).

    ``k`` is the *total* item budget; ``groups`` (one benchmark index per column of ``Y``) and
    ``benchmarks`` (their names) are required to fit. ``fit`` takes ``S`` of shape (models,
    benchmarks); ``predict`` returns (n, benchmarks) scores in [0, 1] (:meth:`predict_mean` adds
    the mean). ``final="mlp"`` stacks the MLP ensemble on the ridges, ``final="ridge"`` stops there.
    """

    def __init__(self, k: int, *, random_state: int = 0, device: str = "auto",
                 groups: Sequence[int] | np.ndarray | None = None, benchmarks: Sequence[str] | None = None,
                 max_steps: int | None = None, n_weak: int = 8, n_cand: int = 32, alpha: float = 1.0,
                 members: int = 2, max_epochs: int = 2000, lr: float = 1e-2, final: str = "mlp",
                 refine_start: bool = True, threads: int | None = None) -> None:
        super().__init__(k, random_state=random_state, device=device)
        if final not in ("mlp", "ridge"):
            raise ValueError(f"final must be mlp or ridge, got {final!r}")
        self.groups = None if groups is None else np.asarray(groups, dtype=np.int64)
        self.benchmarks = None if benchmarks is None else list(benchmarks)
        self.max_steps = max_steps
        self.n_weak = n_weak
        self.n_cand = n_cand
        self.alpha = alpha
        self.members = members
        self.max_epochs = max_epochs
        self.lr = lr
        self.final = final
        self.refine_start = refine_start
        self.threads = threads  #: CPU threads of this fit (None: $SPARSEEVAL_THREADS, else every available CPU)
        self.selection_: dict[str, Any] = {}
        self.timings_: dict[str, float] = {}
        self.mlp_: dict[str, np.ndarray] | None = None  #: the MLP ensemble's weights (None: ridge only)

    # -- fitted attributes ----------------------------------------------------------------------
    @property
    def n_outputs(self) -> int:
        return len(self.benchmarks_)

    def anchor_groups(self) -> np.ndarray:
        """Benchmark index of every anchor (in anchor order)."""
        return self.anchor_groups_

    def allocation(self) -> dict[str, int]:
        """Anchors per benchmark."""
        counts = np.bincount(self.anchor_groups_, minlength=self.n_outputs)
        return {b: int(c) for b, c in zip(self.benchmarks_, counts, strict=True)}

    # -- fitting --------------------------------------------------------------------------------
    def fit(self, Y: np.ndarray, s: np.ndarray, Y_val: np.ndarray | None = None,
            s_val: np.ndarray | None = None) -> Self:
        """Select ``k`` anchors among all benchmarks' items and fit the per-benchmark predictors."""
        self.__dict__.pop("_predict_cache", None)  # predictions of an earlier fit
        with thread_limit(self.threads):
            return self._fit(Y, s, Y_val, s_val)

    def _fit(self, Y: np.ndarray, s: np.ndarray, Y_val: np.ndarray | None, s_val: np.ndarray | None) -> Self:
        if self.groups is None:
            raise ValueError("sparseeval-joint needs groups (the benchmark of every column) to fit")
        from sparseeval.estimate.methods.selection import kmeans_start, linear_importance, refine

        dev = resolve_device(self.device)
        Y = np.asarray(Y, dtype=np.float32)
        S = np.asarray(s, dtype=np.float32)
        S = S[:, None] if S.ndim == 1 else S
        groups = self.groups
        n_out = int(groups.max()) + 1
        if groups.shape[0] != Y.shape[1] or S.shape[1] != n_out:
            raise ValueError(f"groups ({groups.shape[0]} columns, {n_out} benchmarks) do not match Y "
                             f"({Y.shape[1]} columns) and S ({S.shape[1]} benchmarks)")
        self.benchmarks_ = self.benchmarks or [f"b{b}" for b in range(n_out)]
        self._check_k(Y.shape[1])
        fill = column_means(Y)
        Yi = impute(Y, fill)
        if Y_val is None or s_val is None or len(s_val) == 0:
            tr, va = _internal_val(len(S), self.random_state)
            Yi, Yv, S, Sv = Yi[tr], Yi[va], S[tr], S[va]
        else:
            Yv = impute(np.asarray(Y_val, dtype=np.float32), fill)
            Sv = np.asarray(s_val, dtype=np.float32)
            Sv = Sv[:, None] if Sv.ndim == 1 else Sv

        t0 = time.perf_counter()
        sizes = [int((groups == b).sum()) for b in range(n_out)]
        shares = even_shares(self.k, sizes)
        start: list[np.ndarray] = []
        own_gcv = np.ones(n_out)
        for b in range(n_out):
            cols = np.flatnonzero(groups == b)
            if shares[b] == 0:
                continue
            local = kmeans_start(Yi[:, cols], shares[b], self.random_state + b)
            if self.refine_start and shares[b] < cols.size:
                res = refine(Yi[:, cols], S[:, b], local, linear_importance(Yi[:, cols], S[:, b], self.alpha, dev),
                             max_steps=3 * shares[b], n_weak=self.n_weak, n_cand=self.n_cand, alpha=self.alpha,
                             device=dev)
                local, own_gcv[b] = res.anchors, res.criterion
            else:
                own_gcv[b] = float(np.var(S[:, b]))
            start.append(cols[local])
        initial = np.concatenate(start)
        # weight each benchmark by the inverse of its own (per-benchmark) error: a sum of relative errors
        weights = 1.0 / np.maximum(own_gcv, 1e-8)
        weights = weights / weights.mean()
        t1 = time.perf_counter()
        max_steps = self.max_steps if self.max_steps is not None else 3 * self.k
        anchors, crit, history = refine_joint(Yi, S, initial, weights, max_steps=max_steps, n_weak=self.n_weak,
                                              n_cand=self.n_cand, alpha=self.alpha, device=dev)
        t2 = time.perf_counter()
        self._set_anchors(anchors, Yi)
        self.anchor_fill_ = fill[anchors]
        self.anchor_groups_ = groups[anchors]
        self.weights_ = weights.astype(np.float32)
        self._fit_final(Yi[:, anchors], S, Yv[:, anchors], Sv, dev)
        t3 = time.perf_counter()
        self.selection_ = {"initial_allocation": dict(zip(self.benchmarks_, shares, strict=True)),
                           "allocation": self.allocation(), "swaps": len(history), "criterion": crit,
                           "weights": weights.tolist(), "history": history}
        self.timings_ = {"start": t1 - t0, "refinement": t2 - t1, "final_fit": t3 - t2}
        log.debug("%s k=%d: allocation=%s swaps=%d times=%s", self.method, self.k, self.allocation(),
                  len(history), self.timings_)
        return self

    def _fit_final(self, X: np.ndarray, S: np.ndarray, X_val: np.ndarray, S_val: np.ndarray,
                   dev: torch.device) -> None:
        import torch

        from sparseeval.estimate.methods.proxies import ridge_fit, train_mlp

        n_out = S.shape[1]
        coefs, intercepts, alphas = [], [], []
        Xd, Xvd = torch.as_tensor(X, dtype=torch.float64), torch.as_tensor(X_val, dtype=torch.float64)
        for b in range(n_out):
            sb, svb = torch.as_tensor(S[:, b], dtype=torch.float64), torch.as_tensor(S_val[:, b], dtype=torch.float64)
            errs = [float(((ridge_fit(Xd, sb, a).predict(Xvd).clamp(0, 1) - svb) ** 2).mean()) for a in RIDGE_ALPHAS]
            a = RIDGE_ALPHAS[int(np.argmin(errs))]
            if self.final == "ridge":  # nothing is early-stopped on validation: refit on train + val
                fit = ridge_fit(torch.cat([Xd, Xvd]), torch.cat([sb, svb]), a)
            else:
                fit = ridge_fit(Xd, sb, a)
            coefs.append(as_array(fit.coef).astype(np.float32))
            intercepts.append(as_array(fit.intercept).astype(np.float32))
            alphas.append(a)
        self.coef_ = np.stack(coefs, axis=1)  # (K, B)
        self.intercept_ = np.stack(intercepts)  # (B,)
        self.ridge_alphas_ = alphas
        self.mlp_ = None
        if self.final == "ridge":
            return
        m = self.members
        Xt, Xv = torch.as_tensor(X).float(), torch.as_tensor(X_val).float()
        # member j predicts benchmark j // members: targets and offsets laid out per member
        y = torch.as_tensor(S.T).float().repeat_interleave(m, dim=0)
        yv = torch.as_tensor(S_val.T).float().repeat_interleave(m, dim=0)
        off = torch.as_tensor(self._base_logit(np.asarray(X, dtype=np.float32))).T.repeat_interleave(m, dim=0)
        off_v = torch.as_tensor(self._base_logit(np.asarray(X_val, dtype=np.float32))).T.repeat_interleave(m, dim=0)
        res = train_mlp(Xt.to(dev), y.to(dev), Xv.to(dev), yv.to(dev), members=m * n_out, lr=self.lr,
                        max_epochs=self.max_epochs, patience=10, seed=self.random_state, offset=off.to(dev),
                        offset_val=off_v.to(dev))
        self.members_ = res.model.members
        self.mlp_ = mlp_weights(res.model)
        self.final_epochs_ = res.epochs

    def _base_logit(self, X: np.ndarray) -> np.ndarray:
        """Ridge predictions as logits, (n, B)."""
        return logit(X @ self.coef_ + self.intercept_)

    # -- prediction -----------------------------------------------------------------------------
    def _predict(self, X: np.ndarray) -> np.ndarray:
        base = self._base_logit(np.asarray(X, dtype=np.float32))  # (n, B)
        if self.mlp_ is None:
            return sigmoid(base)
        m = self.members_ // self.n_outputs
        corr = mlp_logits(self.mlp_, 2 * X - 1)  # (B * m, n)
        probs = sigmoid(corr + np.repeat(base.T, m, axis=0))
        return probs.reshape(self.n_outputs, m, -1).mean(1).T

    def predict_mean(self, X: np.ndarray) -> np.ndarray:
        """(n, B + 1): every benchmark's predicted score and, last, their mean.

        The last answers seen are remembered (by content; a result is n x (B + 1) numbers): calibrating
        a joint predictor predicts the same masked answers once per output and per prefix, and every
        output comes from one pass."""
        X = np.ascontiguousarray(np.atleast_2d(np.asarray(X, dtype=np.float32)))
        key = (X.shape, hashlib.blake2b(X.tobytes(), digest_size=16).digest())
        cache = self.__dict__.setdefault("_predict_cache", {})
        if key not in cache:
            pred = self.predict(X)
            if len(cache) >= PREDICT_CACHE_SIZE:
                cache.pop(next(iter(cache)))
            cache[key] = np.concatenate([pred, pred.mean(axis=1, keepdims=True)], axis=1)
        return cache[key].copy()

    def output(self, name: str) -> JointOutput:
        """A single-output view (one benchmark, or ``mean``) following the estimator contract."""
        names = [*self.benchmarks_, MEAN]
        if name not in names:
            raise ValueError(f"no output {name!r}; outputs: {', '.join(names)}")
        return JointOutput(self, names.index(name))

    # -- state ----------------------------------------------------------------------------------
    def _get_params_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"benchmarks": list(self.benchmarks_),
                                 "anchor_groups": np.asarray(self.anchor_groups_, dtype=np.int64),
                                 "coef": self.coef_, "intercept": self.intercept_,
                                 "ridge_alphas": list(self.ridge_alphas_),
                                 "weights": np.asarray(self.weights_, dtype=np.float32), "final": self.final}
        if self.mlp_ is not None:
            state["members"] = self.members_
            state["state_dict"] = self.mlp_
        return state

    def _set_params_state(self, state: dict[str, Any]) -> None:
        self.__dict__.pop("_predict_cache", None)
        self.benchmarks_ = list(state["benchmarks"])
        self.anchor_groups_ = np.asarray(state["anchor_groups"], dtype=np.int64)
        self.coef_ = np.asarray(state["coef"], dtype=np.float32)
        self.intercept_ = np.asarray(state["intercept"], dtype=np.float32)
        self.ridge_alphas_ = [float(a) for a in state["ridge_alphas"]]
        self.weights_ = np.asarray(state["weights"], dtype=np.float32)
        self.final = state["final"]
        self.mlp_ = None
        if "state_dict" in state:
            self.members_ = int(state["members"])
            self.mlp_ = {name: np.asarray(w, dtype=np.float32) for name, w in state["state_dict"].items()}


class JointOutput(AnchorEstimator):
    """One output of a fitted joint estimator (a benchmark's score, or the mean) as a plain estimator.

    Lets the single-output machinery (conformal calibration, intervals, OOD) work unchanged on a joint
    predictor; not registered, never saved on its own.
    """

    method = JOINT_METHOD

    def __init__(self, joint: JointSparseEval, index: int) -> None:
        super().__init__(joint.k, random_state=joint.random_state, device="cpu")
        self.joint = joint
        self.index = index
        self.anchors_ = joint.anchors_
        self.anchor_fill_ = joint.anchor_fill_

    def fit(self, Y: np.ndarray, s: np.ndarray, Y_val: np.ndarray | None = None,
            s_val: np.ndarray | None = None) -> Self:
        raise NotImplementedError("fit the joint estimator instead")

    def _predict(self, X: np.ndarray) -> np.ndarray:
        return self.joint.predict_mean(X)[:, self.index]

    def benchmark_predictions(self, X: np.ndarray) -> np.ndarray:
        """(n, B): every benchmark's predicted score from gap-free answers ``X``: what the mean output
        averages, for a calibration that lifts each benchmark before averaging
        (:func:`sparseeval.estimate.calibration.predict_calibrated`)."""
        X = np.atleast_2d(np.asarray(X, dtype=np.float32))
        return np.clip(self.joint.predict_mean(impute(X, self.anchor_fill_))[:, :-1].astype(np.float64), 0.0, 1.0)

    def _get_params_state(self) -> dict[str, Any]:
        raise NotImplementedError("save the joint estimator instead")

    def _set_params_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError
