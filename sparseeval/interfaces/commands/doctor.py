"""``sparseeval doctor [--db FILE] [--repair]``: check the store and its read-only snapshot.

Checks that the database opens and every table reads to the end, its layout version, the tables
the schema defines, a few consistency rules between tables, whether the snapshot is fresh (or stale,
damaged, missing, held read-write by someone), and temp files left by a killed publish. Prints one
line per check and exits 1 when something is wrong.

``--repair`` republishes the snapshot from the database and removes leftover temp files. A database
that does not open cannot be repaired here: the last published snapshot, if it reads, holds the
state as of its publish (the doctor says how to restore it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparseeval.data.store.connection import Connections, StorePathError, default_db_path
from sparseeval.data.store.health import PROBLEM, Check, check_store, repair_store
from sparseeval.interfaces.commands.arguments import non_negative, settings_epilog


def print_checks(db: Path, checks: list[Check]) -> None:
    width = max(len(c.name) for c in checks)
    print(f"sparseeval doctor: {db}")
    for c in checks:
        print(f"  {c.name:<{width}}  {c.status:<7}  {c.detail}".rstrip())


def run(args: argparse.Namespace) -> int:
    db = args.db or default_db_path()
    try:
        conns = Connections(db)
    except StorePathError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    checks = check_store(conns, wait=args.wait)
    if args.repair and any(c.status == PROBLEM for c in checks):
        print_checks(conns.path, checks)
        for line in repair_store(conns, checks, wait=args.wait):
            print(f"repair: {line}")
        checks = check_store(conns, wait=args.wait)
    print_checks(conns.path, checks)
    bad = [c for c in checks if c.status == PROBLEM]
    if bad and not args.repair:
        print(f"{len(bad)} problem(s); `sparseeval doctor --db {conns.path} --repair` fixes the snapshot and "
              "temp files", file=sys.stderr)
    elif bad:
        print(f"{len(bad)} problem(s) remain", file=sys.stderr)
    return 1 if bad else 0


DESCRIPTION = """\
Check the store and its read-only snapshot; --repair fixes what can be fixed.

Checks that the database opens and every table reads to the end, its layout version, the tables the
schema defines, a few consistency rules between tables, whether the snapshot is fresh (or stale,
damaged, missing, held read-write by someone), and temp files left by a killed publish. Prints one
line per check and exits 1 when something is wrong.

--repair republishes the snapshot from the database and removes leftover temp files. A database that
does not open cannot be repaired here: the last published snapshot, if it reads, holds the state as
of its publish (the doctor says how to restore it)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    from sparseeval.core import settings

    p = subparsers.add_parser("doctor", help="check the store and its snapshot; --repair fixes the snapshot",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=settings_epilog("db", "data_dir"))
    p.add_argument("--db", type=Path, default=None, metavar="FILE",
                   help="the store's DuckDB file (" + settings.overrides("db") + ", else <data dir>/sparseeval.duckdb)")
    p.add_argument("--repair", action="store_true", help="republish the snapshot and remove leftover temp files")
    p.add_argument("--wait", type=non_negative, default=10.0, metavar="S",
                   help="seconds to wait for a writer that holds the database (default 10)")
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """``python -m sparseeval.interfaces.commands.doctor``: the same command without importing the others (torch...)."""
    parser = argparse.ArgumentParser(prog="sparseeval doctor")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["doctor", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
