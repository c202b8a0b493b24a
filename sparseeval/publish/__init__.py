"""A predictor's life: the refresh (fit, check, decide, publish, in one sequence), champion and
challenger, the publishing checks, the method comparison, MLflow tracking (the only MLflow code), and
the plots and reports a refresh leaves.

May import :mod:`sparseeval.estimate`, :mod:`sparseeval.data` and :mod:`sparseeval.core`; never Dagster
(the pipeline in ``pipelines/`` calls this part).
"""
