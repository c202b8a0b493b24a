"""``sparseeval refresh [--db FILE] [--benchmark B,...]``: the pipeline's refresh, without Dagster.

For every benchmark of the store (or those named): bring its stored matrix up to date (new models
appended, :mod:`sparseeval.matrix_store`), run the refresh policy
(:func:`sparseeval.refresh_policy.refresh_benchmark`: champion refit, challenger, publishing checks,
decision) and publish what passed, through the same publisher as the pipeline; then the joint
predictor (:func:`~sparseeval.refresh_policy.refresh_joint`) when every benchmark is refreshed; then
the method comparisons that are due (:func:`sparseeval.comparison.comparison_due`; ``--compare always``
or ``never`` overrides). Settings come from ``$SPARSEEVAL_*`` as for ``make run``, so a store refreshed
here and by the Dagster pipeline agree: a fit key decided by one is skipped by the other.

Prints one line per benchmark (matrix, decision, publication, comparison). Exits 1 when a proposal
failed its publishing checks (its champion stays), so a scheduler notices.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from sparseeval import settings
from sparseeval.commands.arguments import writable_db
from sparseeval.errors import UsageError

log = logging.getLogger("sparseeval.progress")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "refresh", help="refresh the store's benchmarks as the pipeline does: refit, check, publish, compare",
        description="Refresh every benchmark of the store (or --benchmark): matrix brought up to date, "
                    "champion refit and challenger selected, publishing checks, publication of what passed; "
                    "then the joint predictor and the method comparisons that are due. The same library "
                    "operation as the Dagster pipeline's fit step, so either may refresh a store.")
    parser.add_argument("--db", type=writable_db, default=None,
                        help="DuckDB file (default: $SPARSEEVAL_DB or data/sparseeval.duckdb)")
    parser.add_argument("--benchmark", default=None, metavar="B,...",
                        help="only these benchmarks, comma-separated (default: every one; the joint predictor "
                             "is refreshed only then)")
    parser.add_argument("--predictors", default=None, metavar="DIR",
                        help="published predictors (default: $SPARSEEVAL_PREDICTORS or <data dir>/predictors)")
    parser.add_argument("--no-publish", action="store_true",
                        help="decide and record, but leave the publication to the next refresh or the pipeline")
    parser.add_argument("--compare", choices=("due", "always", "never"), default="due",
                        help="the method comparison: when due (default: never compared, or many new models), "
                             "always, or never")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sparseeval.comparison import ComparisonSettings, compare_methods, comparison_due
    from sparseeval.matrix_store import MatrixStore
    from sparseeval.refresh_policy import FitSettings, refresh_benchmark, refresh_joint
    from sparseeval.store import Store
    from sparseeval.tracking import TrackingConfig

    path = args.db or settings.db_path()
    if not path.is_file():
        raise UsageError(f"--db {path}: no store there (`sparseeval ingest SOURCE --db {path}` starts one)")
    store = Store(path)
    stored = store.benchmarks()
    names = stored if args.benchmark is None else [b.strip() for b in args.benchmark.split(",") if b.strip()]
    unknown = [b for b in names if b not in stored]
    if unknown:
        raise UsageError(f"--benchmark: the store holds no {', '.join(map(repr, unknown))} "
                         f"(it holds: {', '.join(stored) or 'nothing'})")
    tracking = TrackingConfig(tracking_uri=os.environ.get("MLFLOW_TRACKING_URI") or None, data_dir=settings.data_dir())
    predictors = args.predictors or settings.predictor_dir()
    fit, compare = FitSettings.from_environment(), ComparisonSettings.from_environment()
    matrices, rejected = MatrixStore.beside(store), 0
    current = {}
    for bench in names:
        update = matrices.update(store, bench)
        current[bench] = update.matrix
        result = refresh_benchmark(update.matrix, store, tracking, predictors, fit, log=log,
                                   publish=not args.no_publish)
        rejected += not result.passed
        published = "; ".join(f"#{p.anchor_set_id} as {p.alias} (registry version {p.registry_version})"
                              for p in result.published)
        print(f"{bench}: matrix {update.describe()}; {result.decision}"
              + (f"; challenger: {result.figures['challenger']['decision']}" if "challenger" in result.figures
                 else "") + (f"; published {published}" if published else ""))
        due = comparison_due(store, bench, compare, version=result.data_version or None)
        if args.compare == "always" or (args.compare == "due" and due.due):
            done = compare_methods(update.matrix, store, tracking, compare, log=log)
            print(f"{bench}: comparison: {done.message}")
        elif args.compare == "due":
            print(f"{bench}: comparison {due.reason}")
    if args.benchmark is None and len(current) >= 2:
        joint = refresh_joint(current, store, tracking, predictors, fit, log=log, publish=not args.no_publish)
        rejected += not joint.passed
        print(f"{joint.benchmark}: {joint.decision}")
    if not names:
        print("the store holds no benchmark: nothing to refresh", file=sys.stderr)
    return 1 if rejected else 0
