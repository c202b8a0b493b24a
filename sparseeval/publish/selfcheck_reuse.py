"""What a refresh reuses instead of computing again: the frontier self-check of the same setup while the models
grew little (:func:`measured_or_stored`), and a fit stored for exactly the same matrix and settings
(:func:`reusable_fit`).

**The self-check stands** until the benchmark's models grew by :data:`SELFCHECK_NEW_SHARE` since it was
measured (as the method comparison does, :mod:`sparseeval.publish.comparison`): it measures the method, K and
seed on the strongest tenth of the fitting models, which a day's few dozen newcomers barely move, and it costs
a second selection; re-measuring it daily would delay every publication by that much.

**A fit depends** on the matrix (named by its data version), the method, K, the seed and the split (its policy
and fractions), nothing else; so a fit already stored for exactly those (a changed alpha, check tolerance or
challenger rule on unchanged data; a refresh retried after a crash) is loaded from its saved predictor instead
of being fitted again. A split by date also depends on model metadata that the data version does not cover, so
under that policy every fit is redone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sparseeval.core.settings import RefreshSettings
from sparseeval.data.store import Store
from sparseeval.estimate.artifact import load_predictor
from sparseeval.estimate.methods.base import AnchorEstimator
from sparseeval.estimate.methods.device import resolve_device
from sparseeval.estimate.selfcheck import SelfCheck

#: the self-check stands until the benchmark's models grew by this share since it was measured
SELFCHECK_NEW_SHARE = 0.1


def selfcheck_setup(s: RefreshSettings, method: str, k: int, **more: Any) -> dict[str, Any]:
    """Everything but the data that the frontier self-check's figures depend on (``k``: the anchor
    set's, all its items; ``more``: what else, such as a joint predictor's benchmarks or a probe's setup)."""
    return {"method": method, "k": k, "seed": s.seed, "alpha": s.alpha, "split": s.split_policy,
            "val_frac": s.val_frac, "test_frac": s.test_frac, "quantile": s.frontier_quantile, **more}


def measured_or_stored(db: Store, name: str, setup: Mapping[str, Any], n_models: int, version: str,
                       measure: Callable[[], SelfCheck]) -> SelfCheck:
    """The frontier self-check of ``name`` (a benchmark, or the joint predictor): the one stored with its
    anchor sets for this ``setup`` while the models grew by less than :data:`SELFCHECK_NEW_SHARE`
    (:func:`stored_selfcheck`), else ``measure()`` now, with what it was measured on (the next refresh's reuse
    reads it)."""
    stored = stored_selfcheck(db, name, setup, n_models)
    if stored is not None:
        return stored
    return measure().with_provenance(setup, version, n_models)


def stored_selfcheck(db: Store, name: str, setup: Mapping[str, Any], n_models: int) -> SelfCheck | None:
    """The newest frontier self-check stored with one of ``name``'s anchor sets for the same ``setup``, while
    the matrix has grown by less than :data:`SELFCHECK_NEW_SHARE` since it was measured; it says so
    (``reused``). None: measure it again."""
    for stored in db.stored_selfchecks(name, method=setup["method"], k=setup["k"], seed=setup["seed"]):
        selfcheck = SelfCheck.from_json(stored, name)
        if selfcheck.setup != setup or selfcheck.matrix_models is None:
            continue
        grown = (n_models - selfcheck.matrix_models) / max(n_models, 1)
        if not 0 <= grown < SELFCHECK_NEW_SHARE:
            return None  # the newest measurement is too old (or from a larger matrix): measure again
        return SelfCheck(**{**selfcheck.__dict__, "reused": (
            f"measured on data version {selfcheck.measured_on} ({selfcheck.matrix_models} models; "
            f"{100 * grown:.1f} % new since, < {100 * SELFCHECK_NEW_SHARE:g} %)")})
    return None


def reusable_fit(db: Store, benchmark: str, version: str, origin: str, items: list[str] | None, k: int,
                 s: RefreshSettings) -> tuple[AnchorEstimator, float] | None:
    """The estimator of a fit stored for exactly this matrix, method, K, seed, split and device (and,
    for a refit, these anchors), with its fit seconds; None when there is none or the split depends on
    model dates (see the module docstring)."""
    if s.split_policy == "date":
        return None
    want = {"split": s.split_policy, "val_frac": s.val_frac, "test_frac": s.test_frac,
            "device": resolve_device(s.device).type}
    for fit in db.stored_fits(benchmark, data_version=version, origin=origin, method=s.method, k=k, seed=s.seed):
        if any(fit.params.get(name) != value for name, value in want.items()):
            continue
        if items is not None and fit.items != list(items):
            continue
        try:
            estimator = load_predictor(fit.artifact_uri).estimator
        except (OSError, ValueError):  # its folder is gone or damaged: fit again
            continue
        return estimator, float(fit.params.get("fit_seconds", 0.0))
    return None
