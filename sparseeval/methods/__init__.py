"""Anchor methods. Importing this package registers every method under its CLI name."""

from sparseeval.methods.base import AnchorEstimator, available_methods, make_estimator

__all__ = ["AnchorEstimator", "available_methods", "make_estimator"]
