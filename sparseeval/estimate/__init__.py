"""From a matrix to numbers with honest intervals: the anchor methods and their contract
(:mod:`.methods`), splits and the leak-proof evaluation protocol, conformal calibration and the guard
for models beyond the training range, the saved predictor (:mod:`.artifact`), the two stages of a
prediction (:mod:`.predicting`: the anchors, then the design-based probe of :mod:`.probe`) and fitting
them (:mod:`.fitting`, :mod:`.probe_fit`).

May import :mod:`sparseeval.data` and :mod:`sparseeval.core`; no store writes, no MLflow, no Dagster.
:mod:`.predicting`, :mod:`.probe`, :mod:`.artifact` and what they import are the light install's path:
NumPy and Polars, no torch, no fitting code.
"""
