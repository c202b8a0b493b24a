"""The planted-bug list (``bench/planted_bugs.py``, run by ``bench/mutants.py``) stays applicable to the code:
every mutant's text is found exactly once where it plants its bug, and the tests it runs exist. A refactor
that moves the text silently retires a mutant; the full run then stops at it (it happened once:
``frontier-quantile-not-passed`` after the self-check's call was reshaped). A renamed test retires it as
surely: ``-k gates`` that selects nothing passes, so the mutant would read "NOT CAUGHT" for a test that no
longer exists, and a ``file::name`` that names no test makes pytest exit 4.

So the tests are checked by name: each ``file::name`` must be a test of that file, and each selection
(its ``-k`` and ``-m``, evaluated by pytest's own expression parser) must pick at least one. The tests
are read from the files' source (``test_*`` functions and ``Test*`` methods, their ``pytest.mark``
decorators and the module's ``pytestmark``); a selection that names a parameter's id
(``-k "db and directory"``), which only collection computes, falls back to ``pytest --collect-only``
of that file. Cheap: no mutant and no test is run, and only such files are imported.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

REPO = Path(__file__).resolve().parents[1]


def _mutants():
    spec = importlib.util.spec_from_file_location("bench_mutants", REPO / "bench" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.MUTANTS


MUTANTS = _mutants()


def _marks(decorators: list[ast.expr]) -> list[str]:
    """The names of the ``pytest.mark.NAME`` (or ``pytest.mark.NAME(...)``) among ``decorators``."""
    names = []
    for d in decorators:
        d = d.func if isinstance(d, ast.Call) else d
        if isinstance(d, ast.Attribute) and isinstance(d.value, ast.Attribute) and d.value.attr == "mark":
            names.append(d.attr)
    return names


@functools.cache
def source_tests(file: str) -> tuple[dict, ...]:
    """The tests pytest collects from ``file`` as its source says: module-level ``test*`` functions and
    ``test*`` methods of ``Test*`` classes, each with its markers (its own, its class's, the module's
    ``pytestmark``); names without the parameters' ids."""
    tree = ast.parse((REPO / file).read_text())
    module: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            module += _marks(node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value])
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            found.append({"file": file, "name": node.name, "cls": None, "marks": module + _marks(node.decorator_list)})
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found += [{"file": file, "name": item.name, "cls": node.name,
                       "marks": module + _marks(node.decorator_list + item.decorator_list)}
                      for item in node.body
                      if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name.startswith("test")]
    return tuple(found)


#: the plugin of a collection run: every collected test's file, name (with its parameters' id), class and
#: markers, as JSON
COLLECTOR = """
import json

def pytest_addoption(parser):
    parser.addoption("--collected-to")

def pytest_collection_finish(session):
    rows = [{"file": item.nodeid.split("::")[0], "name": item.name,
             "cls": item.cls.__name__ if getattr(item, "cls", None) else None,
             "marks": sorted({m.name for m in item.iter_markers()})} for item in session.items]
    with open(session.config.getoption("collected_to"), "w") as f:
        json.dump(rows, f)
"""


@functools.cache
def collected_tests(file: str, where: Path) -> tuple[dict, ...]:
    """The tests ``pytest --collect-only`` finds in ``file`` (a subprocess: nothing is imported here),
    names with their parameters' ids."""
    (where / "mutant_tests_collector.py").write_text(COLLECTOR)
    out = where / f"{file.replace('/', '_')}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(where), str(REPO)])}
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "mutant_tests_collector", f"--collected-to={out}", file], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tuple(json.loads(out.read_text()))


def selected(args: tuple[str, ...], tests: Callable[[str], tuple[dict, ...]]) -> list[str]:
    """The tests a mutant's pytest arguments select (``file``, ``file::name``, ``-k``, ``-m``), among
    ``tests(file)``. ``-k`` is matched as pytest matches it (case-insensitive substrings) against the
    test's name (with its parameters' id when collected), its class and its markers, but not its file's
    or folder's name: a selection that picks a test by its file name alone would survive the test's
    renaming."""
    paths, keyword, marker = [], None, None
    rest = iter(args)
    for arg in rest:
        if arg == "-k":
            keyword = Expression.compile(next(rest))
        elif arg == "-m":
            marker = Expression.compile(next(rest))
        else:
            assert not arg.startswith("-"), f"an option this check does not understand: {arg}"
            paths.append(arg)
    assert paths, args
    chosen = []
    for spec in paths:
        file, _, name = spec.partition("::")
        assert (REPO / file).is_file(), f"{file} does not exist"
        in_file = tests(file)
        if name:
            in_file = tuple(t for t in in_file if name in (t["name"].split("[")[0], t["name"],
                                                           f"{t['cls']}::{t['name'].split('[')[0]}"))
            assert in_file, f"{file} has no test {name}"
        for t in in_file:
            names = [t["name"].lower(), *([t["cls"].lower()] if t["cls"] else []), *t["marks"]]
            if keyword is not None and not keyword.evaluate(lambda sub, ns=names, **_: any(sub.lower() in n
                                                                                           for n in ns)):
                continue
            if marker is not None and not marker.evaluate(lambda m, ms=t["marks"], **_: m in ms):
                continue
            chosen.append(f"{file}::{t['name']}")
    return chosen


def selected_tests(args: tuple[str, ...], where: Path) -> list[str]:
    """:func:`selected` on the source; where that finds nothing, on what pytest collects (parameter ids)."""
    return selected(args, source_tests) or selected(args, lambda file: collected_tests(file, where))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where collection runs write (one folder for the module, so a file is collected once)."""
    return tmp_path_factory.mktemp("collected")


def test_the_selection_reader_refuses_what_selects_nothing(scratch: Path) -> None:
    """The check itself can fail: a renamed test, a ``-k`` matching only the file's name, a marker
    selection that excludes every test; and it reads parameter ids as pytest does."""
    tasks = selected(("tests/test_tasks.py",), source_tests)
    assert tasks and selected(("tests/test_tasks.py", "-k", "no_such_test_name"), source_tests) == []
    assert selected(("tests/test_tasks.py", "-k", "tasks"), source_tests) == [  # the file's name is not a test's
        t for t in tasks if "tasks" in t.split("::", 1)[1].lower()]
    assert selected(("tests/test_pipeline.py", "-m", "not slow"), source_tests) == []  # its pytestmark is slow
    assert selected(("tests/test_pipeline.py", "-m", "slow"), source_tests)
    with pytest.raises(AssertionError, match="has no test"):
        selected(("tests/test_tasks.py::test_that_was_renamed",), source_tests)
    # a parameter's id: not in the source, found by collecting the file
    assert selected(("tests/test_cli_errors.py", "-k", "db and directory"), source_tests) == []
    by_id = selected_tests(("tests/test_cli_errors.py", "-k", "db and directory"), scratch)
    assert by_id and all("[" in t for t in by_id), by_id


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_every_mutant_still_plants_its_bug_and_names_real_tests(mutant, scratch: Path) -> None:
    for rel, old, new in mutant.edits:
        text = (REPO / rel).read_text()
        assert text.count(old) == 1, f"{mutant.name}: {rel} holds its text {text.count(old)} times"
        assert old != new
    assert selected_tests(mutant.tests, scratch), f"{mutant.name}: {' '.join(mutant.tests)} selects no test"
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
