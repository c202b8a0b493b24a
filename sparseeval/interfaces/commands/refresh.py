"""``sparseeval refresh``: the pipeline's refresh, without Dagster.

For every benchmark of the store (or those named): bring its stored matrix up to date (new models
appended, :mod:`sparseeval.data.access.matrix_store`), run the refresh policy
(:func:`sparseeval.publish.refresh_policy.refresh_benchmark`: champion refit, challenger, publishing checks,
decision) and publish what passed, through the same publisher as the pipeline; then the joint
predictor (:func:`~sparseeval.publish.refresh_joint.refresh_joint`) when every benchmark is refreshed; then
the method comparisons that are due (:func:`sparseeval.publish.comparison.comparison_due`; ``--compare always``
or ``never`` overrides). Settings come from ``$SPARSEEVAL_*`` as for ``make run``, so a store refreshed
here and by the Dagster pipeline agree: a fit key decided by one is skipped by the other.

Prints one line per benchmark (matrix, decision, publication, comparison); ``--json``/``--csv`` write
one record per benchmark. Exits 1 when a proposal failed its publishing checks (its champion stays),
so a scheduler notices. torch, MLflow and matplotlib are imported only when it runs (the [pipeline]
extra; the light install's advice names it).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparseeval.core import settings
from sparseeval.core.errors import UsageError
from sparseeval.interfaces.commands.arguments import add_benchmark_argument, add_output_arguments, writable_db
from sparseeval.interfaces.commands.output import to_stdout, write_records

if TYPE_CHECKING:
    from sparseeval.publish.refresh_outcome import RefreshResult

log = logging.getLogger("sparseeval.interfaces.progress")

DESCRIPTION = """\
Refresh the store's benchmarks the way the pipeline does, without Dagster: each benchmark's
response matrix is brought up to date (new models appended), its champion's anchors are refit on
the new data and checked, and a predictor that passes the publishing checks is published at once
(MLflow registry alias and the published folder); then a fresh selection challenges it. Then the
joint predictor (when every benchmark is refreshed) and the method comparisons that are due: a
benchmark never compared, or one where many models are new (--compare changes that).

A store refreshed here and by the pipeline agree: what one decided, the other skips. The settings
(method, K, seed, interval level, checks, comparison) are the pipeline's, read from the environment
variables below. Exits 1 when a proposal failed its publishing checks (its champion stays
published), so a scheduler notices. Needs the [pipeline] extra: pip install 'sparseeval[pipeline]'.

examples:
  sparseeval refresh
  sparseeval refresh --benchmark arc,gsm8k --compare never --json refresh.json"""

#: the settings a refresh reads from the environment (the --help table): where, and every declared refresh setting
SETTINGS = ("db", "data_dir", "predictors", *(name for name in settings.RefreshSettings.model_fields
                                              if name in settings.SETTINGS))


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("refresh", help="refresh the store's benchmarks as the pipeline does",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog="environment variables (the options above override the first ones):\n"
                                     + settings.describe(*SETTINGS))
    p.add_argument("--db", type=writable_db, default=None, metavar="FILE",
                   help="the store to refresh (" + settings.overrides("db") + "; default <data dir>/sparseeval.duckdb)")
    add_benchmark_argument(p, "refresh only these benchmarks (default: every one; the joint predictor is "
                              "refreshed only then)")
    p.add_argument("--registry", type=Path, default=None, metavar="DIR",
                   help="published predictors folder (" + settings.overrides("predictors")
                        + ", else <data dir>/predictors)")
    p.add_argument("--no-publish", action="store_true",
                   help="decide and record, but leave the publication to the next refresh or the pipeline")
    p.add_argument("--compare", choices=("due", "always", "never"), default="due",
                   help="the method comparison: when due (default: never compared, or many new models: "
                        "$SPARSEEVAL_COMPARE_NEW_SHARE), always, or never")
    add_output_arguments(p, "one record per benchmark (matrix, decision, publications, comparison)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sparseeval.data.store import Store
    from sparseeval.publish.sequence import InProcess, run_sequence
    from sparseeval.publish.tracking import TrackingConfig

    path = args.db or settings.db_path()
    if not path.is_file():
        raise UsageError(f"--db {path}: no store at {path} (`sparseeval ingest SOURCE --db {path}` starts one)")
    store = Store(path)
    stored = store.benchmarks()
    names = stored if args.benchmark is None else list(dict.fromkeys(args.benchmark))
    unknown = [b for b in names if b not in stored]
    if unknown:
        raise UsageError(f"--benchmark: the store holds no {', '.join(map(repr, unknown))} "
                         f"(it holds: {', '.join(stored) or 'nothing'})")
    tracking = TrackingConfig(tracking_uri=settings.foreign("MLFLOW_TRACKING_URI") or None,
                              data_dir=settings.data_dir())
    chosen = settings.RefreshSettings.from_environment()
    steps = InProcess(store, tracking, args.registry or settings.predictor_dir(), chosen, publish=not args.no_publish,
                      log=log)
    say = (lambda line: print(line, file=sys.stderr)) if to_stdout(args.json, args.csv) else print
    outcomes = run_sequence(steps, store, chosen, names, joint=args.benchmark is None and len(names) >= 2,
                            compare=args.compare)
    records: dict[str, dict[str, Any]] = {}
    for step in outcomes:
        for line in step.lines:
            say(f"{step.name}: {line}")
        record = records.setdefault(step.name, {"benchmark": step.name, "matrix": step.matrix, "comparison": None})
        if step.kind == "compare":
            record["comparison"] = step.message
        elif step.result is not None:
            record |= _record(step.result)
    if not names:
        print("the store holds no benchmark: nothing to refresh", file=sys.stderr)
    write_records(list(records.values()), json_to=args.json, csv_to=args.csv)
    return 1 if any(step.rejected for step in outcomes) else 0


def _record(result: RefreshResult) -> dict[str, Any]:
    """One benchmark's refresh (or the joint predictor's) as a ``--json``/``--csv`` record."""
    probe = result.report.probe_line() if result.report is not None else None
    return {"status": result.status, "data_version": result.data_version, "decision": result.decision,
            "passed": result.passed, "challenger": result.second.decision if result.second else None,
            "probe": probe, "not_scored": result.models_not_scored,
            "published": [{"anchor_set_id": p.anchor_set_id, "alias": p.alias, "registry_version": p.registry_version}
                          for p in result.published]}
