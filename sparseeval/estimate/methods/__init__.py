"""Anchor methods. Importing this package registers every method under its CLI name."""

from sparseeval.estimate.methods import baselines, irt, joint, sparseeval_method  # noqa: F401  (registers every method)
from sparseeval.estimate.methods.base import AnchorEstimator, available_methods, make_estimator

__all__ = ["AnchorEstimator", "available_methods", "make_estimator"]
