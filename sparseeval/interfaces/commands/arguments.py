"""Argument types shared by the commands: a bad value is refused by the parser, as
``argument -k: expected a positive integer, got '0'``, before any file is read or written.

Checked here is only what the value alone decides (a count is positive, a fraction is inside (0, 1),
a path exists and is of the right kind); what needs the data (K below the number of items, a
benchmark present) is checked by the command, with the argument's name in its message.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from sparseeval.core import setting_kinds, settings
from sparseeval.core.errors import UsageError

T = TypeVar("T", int, float)


def _checked(text: str, cast: Callable[[str], T], ok: Callable[[T], bool] | None, expected: str) -> T:
    """``cast(text)`` when it parses and passes ``ok`` (None: ``cast`` checks the range itself, by raising
    ValueError); else the parser's one-line refusal."""
    try:
        value = cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if ok is not None and not ok(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """A count that must be at least 1 (K, a batch, a number of seeds): the bound the settings use
    (:func:`sparseeval.core.setting_kinds.positive_int`), refused as a parser refuses."""
    return _checked(text, setting_kinds.positive_int, None, "a positive integer")


def non_negative_int(text: str) -> int:
    """A count that may be 0 (0: the thing it counts is off), as the settings bound one."""
    return _checked(text, setting_kinds.non_negative_int, None, "an integer >= 0")


def seed(text: str) -> int:
    """A seed: any integer from 0 (0 is a seed like any other), up to the 32 bits every RNG accepts."""
    return _checked(text, int, lambda v: 0 <= v < 2**32, "an integer seed in [0, 2**32)")


def open_fraction(text: str) -> float:
    """A share of the models or a miscoverage level: strictly between 0 and 1 (0 or 1 leaves a side empty),
    as the settings bound one (:func:`sparseeval.core.setting_kinds.open_unit`)."""
    return _checked(text, setting_kinds.open_unit, None, "a number strictly between 0 and 1")


def non_negative(text: str) -> float:
    """Seconds or points: 0 or more (NaN is not)."""
    return _checked(text, float, lambda v: v >= 0, "a number >= 0")


def setting_type(name: str) -> Callable[[str], Any]:
    """The parser of refresh setting ``name``'s option: its declared type
    (:class:`sparseeval.core.settings.RefreshSettings`), refused as a parser refuses."""
    kind = settings.kind_of(settings.RefreshSettings.model_fields[name])

    def parse(text: str) -> Any:
        try:
            return settings.RefreshSettings.check(name, text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None

    parse.__name__ = name  # argparse names the type in some messages
    return parse


def setting_flags(name: str) -> list[str]:
    """The options that set refresh setting ``name`` (declared, else ``--name-with-dashes``)."""
    return settings.meta(settings.RefreshSettings.model_fields[name]).get("flags") or ["--" + name.replace("_", "-")]


def add_setting_arguments(parser: argparse.ArgumentParser, *names: str, helps: Mapping[str, str] | None = None,
                          types: Mapping[str, Callable[[str], Any]] | None = None) -> None:
    """One option per declared refresh setting in ``names``, all of it from the declaration: its flags, its
    type, its meaning (``helps``: what this command says instead) and the variable it overrides. Unset
    options stay None, so :func:`settings_from` takes the environment's value for them, as the refresh does."""
    for name in names:
        field = settings.RefreshSettings.model_fields[name]
        flags = setting_flags(name)
        text = ((helps or {}).get(name) or field.description or "").replace("%", "%%")
        parser.add_argument(*flags, dest=name, type=(types or {}).get(name) or setting_type(name), default=None,
                            metavar=name.rsplit("_", 1)[-1].upper(), help=f"{text}; {settings.overrides(name)}")



def settings_epilog(*names: str) -> str:
    """A command's ``--help`` epilog: the variables of the settings ``names`` (:func:`settings.describe`), which
    its options override."""
    return "environment variables (the options above override them):\n" + settings.describe(*names)


def settings_from(args: argparse.Namespace, *names: str) -> settings.RefreshSettings:
    """The refresh settings the options ``names`` set, each unset one from its variable (or its default)."""
    return settings.RefreshSettings.from_environment(
        **{name: getattr(args, name) for name in names if getattr(args, name, None) is not None})


def existing_path(text: str) -> Path:
    """A file or folder that must already exist (results, answers)."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file or folder")
    if not (path.is_file() or path.is_dir()):
        raise argparse.ArgumentTypeError(f"{text}: not a regular file or folder (a device, socket or pipe)")
    return path


def writable_db(text: str) -> Path:
    """A store path: a new path (the store starts there) or an existing non-empty file."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: a folder, not a DuckDB store file")
    if path.exists() and not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: not a regular file (a device, socket or pipe), not a DuckDB store")
    if path.is_file() and path.stat().st_size == 0:
        raise argparse.ArgumentTypeError(f"{text}: an empty file, not a DuckDB store")
    if path.is_file() and not _is_duckdb_file(path):
        raise argparse.ArgumentTypeError(f"{text}: not a DuckDB database file (parquet, CSV, SQLite or other "
                                         "files are not stores; give the store's .duckdb file)")
    return path


def _is_duckdb_file(path: Path) -> bool:
    """DuckDB's own file header: 8 checksum bytes, then the magic ``DUCK``. Checked before DuckDB opens
    the file, because opening a foreign file read-write could rewrite it."""
    try:
        with path.open("rb") as fh:
            return fh.read(12)[8:12] == b"DUCK"
    except OSError:
        return False


def device(text: str) -> str:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (what torch accepts for this project)."""
    base, _, index = text.partition(":")
    if text in ("auto", "cpu", "cuda", "mps") or (base == "cuda" and index.isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:N, got {text!r}")


def check_k_below_items(k: int, n_items: int, benchmark: str, data: Path) -> None:
    """``-k`` against the data: K equal to every item is no estimate, and more cannot be drawn."""
    if k >= n_items:
        raise UsageError(f"-k {k}: {benchmark} has {n_items} items in {data}; "
                         "anchors must be fewer than the benchmark's items")


def benchmark_names(text: str) -> list[str]:
    """``--benchmark arc,mmlu``: the names of one occurrence (the option also repeats; ``action="extend"``)."""
    names = [b.strip() for b in text.split(",")]
    if not text.strip() or any(not b for b in names):
        raise argparse.ArgumentTypeError(f"expected benchmark names separated by commas, got {text!r}")
    return names


def add_benchmark_argument(parser: argparse.ArgumentParser, help: str, *, required: bool = False) -> None:
    """``--benchmark B[,B...]``, repeatable, the same in every command: ``args.benchmark`` is a list
    (None when not given)."""
    parser.add_argument("--benchmark", dest="benchmark", action="extend", type=benchmark_names,
                        metavar="B[,B...]", required=required,
                        help=f"{help}; several: comma-separated or the option repeated")


def output_file(text: str) -> Path | str:
    """``--json FILE`` / ``--csv FILE``: a file to write, or ``-`` for standard output."""
    if text == "-":
        return text
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: a folder; give a file name (or - for standard output)")
    return path


def add_output_arguments(parser: argparse.ArgumentParser, what: str, *, csv: bool = True) -> None:
    """``--json FILE`` and ``--csv FILE`` with one meaning in every command: write ``what`` to FILE, or to
    standard output with ``-`` (then the command prints nothing else there)."""
    parser.add_argument("--json", type=output_file, metavar="FILE",
                        help=f"also write {what} as JSON to FILE ('-': to standard output instead of the table)")
    if csv:
        parser.add_argument("--csv", type=output_file, metavar="FILE",
                            help=f"also write {what} as CSV to FILE ('-': to standard output instead of the table)")
