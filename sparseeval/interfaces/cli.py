"""``sparseeval`` command line: one sub-command per module in :mod:`sparseeval.interfaces.commands`.

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

from sparseeval.core import __version__
from sparseeval.core.errors import UserError

#: command -> one-line summary, in the order ``--help`` lists them (each module's parser repeats it)
COMMANDS: dict[str, str] = {
    "ingest": "ingest result files or folders (long tables, lm-eval output, lighteval, leaderboard details)",
    "evaluate": "compare anchor methods on held-out models (needs the [fit] extra)",
    "fit": "fit, calibrate and save a predictor for a benchmark (needs the [fit] extra)",
    "refresh": "refresh the store's benchmarks as the pipeline does: refit, check, publish, compare "
               "(needs the [pipeline] extra)",
    "export": "export anchors as an lm-eval task (lm-eval prints the estimate), a --samples file or CSV",
    "predict": "predict full-benchmark scores from anchor answers",
    "next": "adaptive anchors: what to run next, or whether the interval is narrow enough",
    "compare": "paired comparison of two models from their anchor answers",
    "sql": "query the store read-only (views, CSV/JSON/parquet output, interactive prompt)",
    "doctor": "check the store and its snapshot; --repair fixes the snapshot",
}


#: top-level package of an optional dependency -> the extra that installs it
EXTRAS: dict[str, str] = {"torch": "fit", "sklearn": "fit", "scipy": "fit", "pyarrow": "fit", "pandas": "fit",
                          "dagster": "pipeline", "mlflow": "pipeline", "matplotlib": "pipeline",
                          "lm_eval": "lm-eval"}
#: a command that needs a larger extra than the first missing module names (refresh records in MLflow)
COMMAND_EXTRAS: dict[str, str] = {"refresh": "pipeline"}

DESCRIPTION = """\
Estimate full-benchmark scores of language models from a few anchor items.

A new model answers a predictor's anchors (lm-eval runs them: see `sparseeval export`), then
`sparseeval predict` turns the answers into each benchmark's full score with a 90% interval.
Predictors come from a folder, from the Hugging Face Hub (hf://ORG/REPO[@revision]) or from
`sparseeval fit` on item-level results of many models.

The commands (run `sparseeval COMMAND --help` for each one's options):"""

EPILOG = """\
start to finish:
  sparseeval export --predictor hf://ORG/REPO --format lm-eval-task --out tasks/
  lm_eval --model hf --model_args pretrained=MODEL --include_path tasks/ --tasks sparseeval_arc \\
      --log_samples --output_path run/
  sparseeval predict --predictor hf://ORG/REPO --answers run/

-q and -v may be given before or after the command."""


def missing_extra(exc: ModuleNotFoundError, command: str | None) -> str | None:
    """The one-line advice for a command that needs an optional dependency this install leaves out."""
    top = (exc.name or "").partition(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    if extra != "lm-eval":
        extra = COMMAND_EXTRAS.get(command or "", extra)
    what = f"sparseeval {command}" if command else "this command"
    if extra == "lm-eval":
        return f"{what} needs lm-eval, which is not installed here: pip install lm-eval"
    return (f"{what} needs {top}, which the light install leaves out: pip install 'sparseeval[{extra}]' "
            f"(predict, export, compare, next, ingest, sql and doctor need no extra)")


class OneLineParser(argparse.ArgumentParser):
    """A parser whose errors are one line (``sparseeval fit: error: argument -k: ...``), not usage + error:
    a script or a person reads the reason, and ``--help`` is there for the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _chosen(argv: Sequence[str]) -> str | None:
    """The sub-command named on the command line (the first word that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def add_verbosity(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``-v``/``-q``, on the top parser and on every command's, so they work before or after the command
    (on a command's parser they leave the value alone unless given: the top parser holds the default)."""
    default = {} if top else {"default": argparse.SUPPRESS}
    parser.add_argument("-v", "--verbose", action="store_true", **default,  # type: ignore[arg-type]
                        help="debug logging: every library message")
    parser.add_argument("-q", "--quiet", action="store_true", **default,  # type: ignore[arg-type]
                        help="errors only: no progress lines, no warnings")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with ``command``'s module registered in full and the others as summaries only."""
    parser = OneLineParser(prog="sparseeval", description=DESCRIPTION, epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"sparseeval {__version__}",
                        help="print the version and exit")
    add_verbosity(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, summary in COMMANDS.items():
        if name == command:
            try:
                module = importlib.import_module(f"sparseeval.interfaces.commands.{name}")
            except ModuleNotFoundError as exc:  # listed but not installed in this build
                advice = missing_extra(exc, name)
                if advice is not None:
                    parser.exit(2, f"error: {advice}\n")
                if exc.name != f"sparseeval.interfaces.commands.{name}":
                    raise
                sub.add_parser(name, help=summary)
                continue
            module.register(sub)
            add_verbosity(sub.choices[name])
        else:
            sub.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _chosen(argv)
    try:
        parser = build_parser(command if command in COMMANDS else None)
    except UserError as exc:  # a bad $SPARSEEVAL_* value, read as an option's default
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    # the command's own output is its table; library logs are for -v. Progress lines (the plain
    # stand-in for a progress bar when stderr is not a terminal) show unless --quiet.
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.quiet and not args.verbose:
        logging.getLogger("sparseeval.interfaces.progress").setLevel(logging.INFO)
    if args.quiet:
        logging.getLogger().setLevel(logging.ERROR)
    if not hasattr(args, "func"):  # a summary-only parser: the command's module is missing
        parser.error(f"command {args.command!r} is not available in this build")
    try:
        return int(args.func(args) or 0)
    except UserError as exc:  # every command: a user's mistake is one line; anything else keeps its traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # a light install reaching for an extra's dependency
        advice = missing_extra(exc, args.command)
        if advice is None:
            raise
        print(f"error: {advice}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
