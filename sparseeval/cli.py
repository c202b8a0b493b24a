"""``sparseeval`` command line: one sub-command per module in :mod:`sparseeval.commands`.

Each command module exposes ``register(subparsers)`` which adds its parser and sets
``func(args) -> int`` (the exit code), so commands stay in small modules of their own.

Only the module of the command being run is imported: ``sparseeval --help`` imports none (it lists
the one-line summaries below), ``sparseeval ingest`` never imports torch or scikit-learn. That keeps
light commands under a second instead of the ~5 s a full import of the fitting stack costs.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

from sparseeval.errors import UserError

#: command -> one-line summary, in the order ``--help`` lists them (each module's parser repeats it)
COMMANDS: dict[str, str] = {
    "ingest": "ingest result files or folders (long tables, lm-eval output, lighteval, leaderboard details)",
    "evaluate": "compare anchor methods on held-out models",
    "fit": "fit, calibrate and save a predictor for one benchmark",
    "refresh": "refresh the store's benchmarks as the pipeline does: refit, check, publish, compare",
    "export": "export anchors for lm-eval (--samples) or as CSV",
    "predict": "predict full-benchmark scores from anchor answers",
    "next": "adaptive anchors: what to run next, or whether the interval is narrow enough",
    "compare": "paired comparison of two models from their anchor answers",
    "sql": "query the store read-only (views, CSV/JSON/parquet output, interactive prompt)",
    "doctor": "check the store and its snapshot; --repair fixes the snapshot",
}


class OneLineParser(argparse.ArgumentParser):
    """A parser whose errors are one line (``sparseeval fit: error: argument -k: ...``), not usage + error:
    a script or a person reads the reason, and ``--help`` is there for the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _chosen(argv: Sequence[str]) -> str | None:
    """The sub-command named on the command line (the first word that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with ``command``'s module registered in full and the others as summaries only."""
    parser = OneLineParser(
        prog="sparseeval",
        description="Estimate full-benchmark scores of language models from a few anchor items.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="errors only: no progress, no warnings")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, summary in COMMANDS.items():
        if name == command:
            try:
                module = importlib.import_module(f"sparseeval.commands.{name}")
            except ModuleNotFoundError as exc:  # listed but not installed in this build
                if exc.name != f"sparseeval.commands.{name}":
                    raise
                sub.add_parser(name, help=summary)
                continue
            module.register(sub)
        else:
            sub.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _chosen(argv)
    parser = build_parser(command if command in COMMANDS else None)
    args = parser.parse_args(argv)
    # the command's own output is its table; library logs are for -v. Progress lines (the plain
    # stand-in for a progress bar when stderr is not a terminal) show unless --quiet.
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.quiet and not args.verbose:
        logging.getLogger("sparseeval.progress").setLevel(logging.INFO)
    if args.quiet:
        logging.getLogger().setLevel(logging.ERROR)
    if not hasattr(args, "func"):  # a summary-only parser: the command's module is missing
        parser.error(f"command {args.command!r} is not available in this build")
    try:
        return int(args.func(args) or 0)
    except UserError as exc:  # every command: a user's mistake is one line; anything else keeps its traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
