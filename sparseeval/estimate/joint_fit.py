"""Fitting and calibrating a joint estimator (``sparseeval-joint``) on a split: shared by ``fit``, the
refresh and the evaluation protocol (which imports it without the rest of fitting)."""

from __future__ import annotations

from typing import Any

import numpy as np

from sparseeval.core import settings as defaults
from sparseeval.estimate import calibrate
from sparseeval.estimate.methods import make_estimator
from sparseeval.estimate.methods.joint import JOINT_METHOD, MEAN, JointData, JointSparseEval
from sparseeval.estimate.splits import Split


def fit_joint(data: JointData, split: Split, k: int, seed: int, *, device: str = defaults.DEFAULT_DEVICE,
              method_params: dict[str, Any] | None = None) -> JointSparseEval:
    """Fit ``sparseeval-joint`` with ``k`` items *per benchmark* on ``split.train`` (``split.val``
    for early stopping and alphas); test rows are never touched."""
    est = make_estimator(JOINT_METHOD, k * len(data.benchmarks), random_state=seed, device=device,
                         groups=data.groups, benchmarks=data.benchmarks, **(method_params or {}))
    assert isinstance(est, JointSparseEval)
    has_val = len(split.val) > 0
    return est.fit(data.Y[split.train], data.S[split.train], data.Y[split.val] if has_val else None,
                   data.S[split.val] if has_val else None)


def joint_calibration(data: JointData, split: Split, est: JointSparseEval, *,
                      alpha: float = defaults.DEFAULT_ALPHA, seed: int = defaults.DEFAULT_SEED,
                      missing_up_to: int | None = None) -> dict[str, Any]:
    """The calibration of a joint estimator fitted on ``split.train`` (+ ``split.val``), on the held-out
    ``split.test`` models, per output (every benchmark and the mean): what its predictions, intervals
    and flags read (the frontier self-check needs no more; a published artifact adds its anchor order).

    Each benchmark output is lifted at the top of its training range by its own correction
    (:mod:`sparseeval.estimate.beyond`); the mean output averages those lifted predictions, so it stays their
    mean. ``missing_up_to``: as for :func:`sparseeval.estimate.calibrate.calibrate`."""
    assert est.anchors_ is not None
    S = np.concatenate([data.S, data.S.mean(axis=1, keepdims=True)], axis=1).astype(np.float64)
    X_cal, X_train = data.Y[split.test][:, est.anchors_], data.Y[split.train][:, est.anchors_]
    outputs: dict[str, dict[str, Any]] = {}
    shared: dict[str, Any] = {}
    cache: dict[bytes, np.ndarray] = {}  # every output hides the same anchors: impute once
    for o, name in enumerate([*data.benchmarks, MEAN]):
        lifts = None if name != MEAN else [outputs[b].get("beyond", {}) for b in data.benchmarks]
        c = calibrate.calibrate(est.output(name), X_cal, S[split.test, o], X_train, alpha=alpha, seed=seed, cache=cache,
                          s_train=S[split.train, o], beyond_outputs=lifts, missing_up_to=missing_up_to)
        shared = {key: c.pop(key) for key in ("alpha", "ood", "cal_answers", "seed", "n_calibration")}
        outputs[name] = c
    return shared | {"outputs": outputs, "split_seed": seed}


