"""Every ``--help`` is written for users: every option explained, no reST or developer notes, and the
environment variable an option overrides named (issue 31, item 4). Also ``--version`` and ``-q``/``-v``
on either side of the command."""

from __future__ import annotations

import argparse
import re

import pytest

import sparseeval
from sparseeval.interfaces.cli import COMMANDS, build_parser, main

#: what a developer's docstring leaks into a user's help: reST roles and literals, notes about imports
DEVELOPER_TEXT = re.compile(r"``|:(mod|func|class|meth|data|attr):|Module-level|import(s|ed)? |^\s*\.\. \w+::", re.M)


def _command_parser(name: str) -> argparse.ArgumentParser:
    parser = build_parser(name)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_option_is_explained(name: str) -> None:
    parser = _command_parser(name)
    unexplained = [a.option_strings or [a.dest] for a in parser._actions
                   if a.help in (None, "", argparse.SUPPRESS)]
    assert not unexplained, f"{name}: options without help: {unexplained}"
    text = parser.format_help()
    assert not DEVELOPER_TEXT.search(text), f"{name} --help: {DEVELOPER_TEXT.search(text)[0]!r} in\n{text}"
    assert parser.description and not parser.description.startswith("``")


@pytest.mark.parametrize(("name", "option", "env"), [
    ("predict", "--db", "SPARSEEVAL_DB"), ("predict", "--registry", "SPARSEEVAL_PREDICTORS"),
    ("fit", "--method", "SPARSEEVAL_METHOD"), ("fit", "-k", "SPARSEEVAL_K"), ("fit", "--seed", "SPARSEEVAL_SEED"),
    ("fit", "--device", "SPARSEEVAL_DEVICE"), ("fit", "--alpha", "SPARSEEVAL_ALPHA"),
    ("evaluate", "--method", "SPARSEEVAL_METHOD"), ("ingest", "--db", "SPARSEEVAL_DB"),
    ("ingest", "--hub-tasks", "SPARSEEVAL_HUB_TASKS"), ("sql", "--db", "SPARSEEVAL_DB"),
    ("doctor", "--db", "SPARSEEVAL_DB"), ("export", "--registry", "SPARSEEVAL_PREDICTORS"),
    ("refresh", "--db", "SPARSEEVAL_DB"), ("refresh", "--registry", "SPARSEEVAL_PREDICTORS"),
])
def test_options_name_the_variable_they_override(name: str, option: str, env: str) -> None:
    parser = _command_parser(name)
    action = next(a for a in parser._actions if option in a.option_strings)
    assert f"${env}" in action.help
    assert env in parser.epilog  # the settings table (settings.describe) under the options


def test_fit_and_evaluate_default_to_the_same_method(monkeypatch: pytest.MonkeyPatch) -> None:
    """fit's --method is unset (None) until the refresh settings resolve it from $SPARSEEVAL_METHOD or the
    declared default; evaluate's list takes the same value when its parser is built."""
    from sparseeval.interfaces.commands.fit import fit_settings

    def methods() -> tuple[str, list[str]]:
        fit = fit_settings(_command_parser("fit").parse_args(["--data", ".", "--benchmark", "arc"]))[0].method
        evaluate = next(a for a in _command_parser("evaluate")._actions if a.dest == "method").default
        return fit, evaluate

    assert methods() == (sparseeval.core.settings.DEFAULT_METHOD, [sparseeval.core.settings.DEFAULT_METHOD])
    monkeypatch.setenv("SPARSEEVAL_METHOD", "random-linear")
    assert methods() == ("random-linear", ["random-linear"])


def test_version_and_verbosity_anywhere(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"sparseeval {sparseeval.__version__}"
    for argv in (["-q", "doctor", "--db", "/nonexistent/x.duckdb"], ["doctor", "--db", "/nonexistent/x.duckdb", "-q"],
                 ["doctor", "-v", "--db", "/nonexistent/x.duckdb"]):
        args = build_parser("doctor").parse_args(argv)
        assert args.quiet == ("-q" in argv) and args.verbose == ("-v" in argv)


def test_benchmark_takes_a_list_and_repeats() -> None:
    for name in ("fit", "evaluate", "predict", "export", "next", "compare", "refresh"):
        parser = _command_parser(name)
        extra = ["--data", "."] if name in ("fit", "evaluate") else ["--answers", "."] if name in (
            "predict", "next", "compare") else [] if name == "refresh" else ["--out", "x"]
        args = parser.parse_args(["--benchmark", "arc,mmlu", "--benchmark", "gsm8k", *extra])
        assert args.benchmark == ["arc", "mmlu", "gsm8k"], name
