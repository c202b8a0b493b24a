"""sparseeval: estimate a language model's full-benchmark scores from a few anchor items.

The public API is re-exported lazily (``import sparseeval`` stays cheap; torch is imported only to fit)::

    import sparseeval
    art = sparseeval.load_predictor("data/predictors/arc")
    preds = sparseeval.predict(art, sparseeval.read_answers("lm_eval_out/"))
"""

from importlib import import_module
from typing import Any

from sparseeval.core import __version__

#: public name -> module that defines it
_EXPORTS = {
    "predict": "sparseeval.estimate.predicting",
    "compare": "sparseeval.estimate.predicting",
    "fit_predictor": "sparseeval.estimate.fitting",
    "Prediction": "sparseeval.estimate.predicting",
    "Comparison": "sparseeval.estimate.predicting",
    "load_predictor": "sparseeval.estimate.artifact",
    "save_predictor": "sparseeval.estimate.artifact",
    "read_answers": "sparseeval.data.access.answers",
    "read_data": "sparseeval.data.access.sources",
    "build_matrix": "sparseeval.data.matrix",
    "make_split": "sparseeval.estimate.splits",
    "make_estimator": "sparseeval.estimate.methods",
    "available_methods": "sparseeval.estimate.methods",
    "run_protocol": "sparseeval.estimate.evaluation",
    "summarize": "sparseeval.estimate.evaluation",
    "Store": "sparseeval.data.store",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'sparseeval' has no attribute {name!r}")
