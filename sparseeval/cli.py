"""``sparseeval`` command line: one sub-command per module in :mod:`sparseeval.commands`.

Each command module exposes ``register(subparsers)`` which adds its parser and sets
``func(args) -> int`` (the exit code), so commands stay in small modules of their own.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

#: command modules, in the order ``--help`` lists them
COMMAND_MODULES = ("ingest", "evaluate", "fit", "export", "predict", "compare", "doctor")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparseeval",
        description="Estimate full-benchmark scores of language models from a few anchor items.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"sparseeval.commands.{name}")
        except ModuleNotFoundError as exc:  # a command still being built must not break the others
            if exc.name != f"sparseeval.commands.{name}":
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
