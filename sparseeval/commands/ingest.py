"""``sparseeval ingest PATH... [--db FILE]``: store result files and folders in the DuckDB store.

Prints one line per source (stored, skipped, refused) and exits 1 when anything was refused, so a
script or scheduler notices bad input instead of silently running on less data.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparseeval.store import Store, default_db_path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ingest",
        help="ingest result files or folders (long tables, lm-eval output, leaderboard details)",
        description="Ingest result files or folders into the DuckDB store. Each file (or run folder) is "
                    "one transaction; files already ingested (same sha256) are skipped; bad files are "
                    "refused with the reason and leave the store unchanged.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="files or folders to ingest")
    parser.add_argument("--db", type=Path, default=None,
                        help="DuckDB file (default: $SPARSEEVAL_DB or data/sparseeval.duckdb)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    store = Store(args.db or default_db_path())
    report = store.ingest(args.paths)
    for entry in report.files:
        if entry.status == "ok":
            print(f"stored   {entry.file}: {entry.n_responses} new responses, {entry.n_scores} new scores "
                  f"({entry.rows_read} rows read)")
        elif entry.status == "skipped":
            print(f"skipped  {entry.file}: {entry.reason}")
    for entry in report.refused:
        print(f"REFUSED  {entry.reason}", file=sys.stderr)
    n_ok, n_skip, n_bad = (len(report.by_status(s)) for s in ("ok", "skipped", "refused"))
    print(f"{n_ok} stored, {n_skip} skipped, {n_bad} refused -> {store.path}")
    return 1 if n_bad else 0
