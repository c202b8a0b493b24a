"""sparseeval: estimate a language model's full-benchmark scores from a few anchor items.

The public API is re-exported lazily (``import sparseeval`` stays cheap; torch is imported only to fit)::

    import sparseeval
    art = sparseeval.load_predictor("data/predictors/arc")
    preds = sparseeval.predict(art, sparseeval.read_answers("lm_eval_out/"))
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

#: public name -> module that defines it
_EXPORTS = {
    "predict": "sparseeval.predicting",
    "compare": "sparseeval.predicting",
    "fit_predictor": "sparseeval.fitting",
    "Prediction": "sparseeval.predicting",
    "Comparison": "sparseeval.predicting",
    "load_predictor": "sparseeval.artifact",
    "save_predictor": "sparseeval.artifact",
    "read_answers": "sparseeval.answers",
    "read_data": "sparseeval.sources",
    "build_matrix": "sparseeval.matrix",
    "make_split": "sparseeval.splits",
    "make_estimator": "sparseeval.methods",
    "available_methods": "sparseeval.methods",
    "run_protocol": "sparseeval.evaluation",
    "summarize": "sparseeval.evaluation",
    "Store": "sparseeval.store",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'sparseeval' has no attribute {name!r}")
