"""Planted bugs, one at a time: does a test catch each? ``python bench/mutants.py`` (``make mutants``).

Each mutant is a small realistic bug (a setting left out of a key, a check removed, a message
reworded into a wrong reason), written as exact text replacements in the product's files, and the
tests that should catch it. For every mutant the script applies it to a **scratch copy** of the tree
(the working tree is never written, so an interrupted run leaves nothing behind), runs those tests
there, and prints whether they caught it and how many seconds they took. Before the mutants, each
distinct selection of tests runs once on the unmutated copy: a test that fails there proves nothing.

The scratch copy holds the files git tracks or would track (the working tree's state, uncommitted
changes included), ``../shared`` beside it (the real data), and runs with ``PYTHONPATH`` on it and
no bytecode written, so the copy's code, not the editable install's, is what the tests import.

    python bench/mutants.py                 # every mutant
    python bench/mutants.py --only alias-not-moved --only fit-key-without-alpha
    python bench/mutants.py --list

A mutant counts as **caught** only when a test fails on an assertion: an ``assert`` (or
``pytest.fail``, a ``pytest.raises`` that saw nothing raised, NumPy's ``assert_*``) whose innermost
frame inside the repository is a test's. A test that errors because the mutated code crashed (a
``KeyError`` in the code under test, an ``assert`` inside the product) never reached the assertions
that prove the behaviour, so the mutant is reported ``CRASHED``, not caught; pytest then goes on to
the next test (it stops at the first assertion failure, as ``-x`` would). The line of the assertion
that failed is printed under each caught mutant. The verdicts come from this file loaded into the
tests' pytest as a plugin (:func:`pytest_runtest_makereport`), which writes one JSON line per failure
to the file its option ``--mutant-verdicts`` names.

Exit status 1 when a mutant is not caught (or only crashed, or its tests ran past ``--timeout``), 2
when the tests fail on the unmutated tree.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


# the catalogue (bench/planted_bugs.py), importable however this file is loaded: as a script, as the
# mutant pytest's plugin (bench/ on its path) or by file path (tests/test_mutants_current.py)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from planted_bugs import MUTANTS, Mutant  # noqa: E402


@contextmanager
def scratch_copy() -> Iterator[Path]:
    """The working tree's files (tracked, or untracked and not ignored) copied into a temporary folder,
    with ``../shared`` linked beside the copy as it is beside the repository; removed on the way out."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    top = Path(tempfile.mkdtemp(prefix="sparseeval-mutants-"))
    try:
        copy = top / "repo"
        for rel in filter(None, listed):
            src = REPO / rel
            if src.is_file():
                (copy / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, copy / rel)
        if (REPO.parent / "shared").exists():
            (top / "shared").symlink_to(REPO.parent / "shared")
        yield copy
    finally:
        shutil.rmtree(top, ignore_errors=True)


@contextmanager
def applied(copy: Path, mutant: Mutant) -> Iterator[None]:
    """``mutant``'s edits in the copy, undone on the way out (the next mutant starts from the original)."""
    originals: dict[Path, str] = {}
    try:
        for rel, old, new in mutant.edits:
            path = copy / rel
            text = path.read_text()
            originals.setdefault(path, text)
            found = text.count(old)
            if found != 1:
                raise SystemExit(f"mutant {mutant.name}: {rel} holds its text {found} times, not once: update "
                                 f"bench/mutants.py to the code")
            path.write_text(text.replace(old, new))
        yield
    finally:
        for path, text in originals.items():
            path.write_text(text)


def _env(copy: Path) -> dict[str, str]:
    """The copy's code first on the path (and ``bench/``, so pytest can load this file as its plugin),
    no bytecode written (a mutated file is never read from a cache)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), str(copy / "bench")]),
           "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


# --- the plugin half: runs inside the mutant's pytest (``-p mutants``) --------------------------------

def _failure(item: Any, call: Any) -> dict[str, Any]:
    """What failed in one test phase: ``assertion`` when the exception is an assertion failure whose
    innermost frame inside the repository is a test file's, ``crash`` otherwise; and that frame's
    line (where the test stopped)."""
    import pytest

    root = Path(str(item.config.rootpath)).resolve()
    excinfo = call.excinfo
    inside = []
    for entry in excinfo.traceback:
        path = Path(str(entry.path)).resolve()
        if path.is_relative_to(root) and ".venv" not in path.relative_to(root).parts:
            inside.append((path.relative_to(root), entry))
    where, line = "?", ""
    if inside:
        rel, entry = inside[-1]
        where = f"{rel}:{entry.lineno + 1}"
        try:
            line = str(entry.statement).strip().splitlines()[0]
        except Exception:  # the source is only printed: a frame without it still counts
            line = ""
    asserted = excinfo.errisinstance((AssertionError, pytest.fail.Exception))
    by_a_test = bool(inside) and inside[-1][0].parts[0] == "tests"
    message = str(excinfo.value).strip().splitlines()
    return {"test": item.nodeid, "phase": call.when, "kind": "assertion" if asserted and by_a_test else "crash",
            "exception": excinfo.typename, "where": where, "line": line,
            "message": message[0][:200] if message else ""}


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--mutant-verdicts", metavar="PATH", help="append one JSON line per failing test phase here")


def pytest_runtest_makereport(item: Any, call: Any) -> None:
    """Record every failing test phase in the ``--mutant-verdicts`` file, and stop the session at the
    first assertion failure (the mutant is caught; a crash lets the next test try)."""
    import pytest

    out = item.config.getoption("mutant_verdicts")
    if not out or call.excinfo is None or call.excinfo.errisinstance(pytest.skip.Exception):
        return
    if item.get_closest_marker("xfail"):
        return
    failure = _failure(item, call)
    with open(out, "a") as f:
        f.write(json.dumps(failure) + "\n")
    if failure["kind"] == "assertion":
        item.session.shouldfail = "a mutant caught by an assertion"  # what -x sets


# --- the driver -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    """One pytest run in the copy: its exit status (None on timeout), seconds, output tail and the
    failures the plugin recorded."""

    code: int | None
    seconds: float
    out: str
    failures: tuple[dict[str, Any], ...]

    @property
    def caught_by(self) -> dict[str, Any] | None:
        """The first failure on an assertion by a test, if any."""
        return next((f for f in self.failures if f["kind"] == "assertion"), None)

    @property
    def verdict(self) -> str:
        if self.code is None:
            return "TIMEOUT"
        if self.caught_by is not None:
            return "caught"
        if self.code == 0:
            return "NOT CAUGHT"
        if self.code == 1:
            return "CRASHED"  # tests failed, none on an assertion: the code crashed before any was reached
        return f"ERROR {self.code}"


def run_tests(copy: Path, args: tuple[str, ...] | list[str], timeout: float) -> Outcome:
    """pytest in the copy, with this file as its plugin; the run's :class:`Outcome`."""
    env = _env(copy)
    verdicts = copy.parent / "verdicts.jsonl"
    verdicts.unlink(missing_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "mutants", f"--mutant-verdicts={verdicts}", "-q",
                             "-p", "no:cacheprovider", *args],
                            cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    failures = tuple(json.loads(line) for line in verdicts.read_text().splitlines()) if verdicts.is_file() else ()
    return Outcome(code, time.perf_counter() - t0, out[-2000:], failures)


def _imports_the_copy(copy: Path) -> None:
    where = subprocess.run([sys.executable, "-c", "import sparseeval, pipelines; print(sparseeval.__file__); "
                            "print(pipelines.__file__)"], cwd=copy, env=_env(copy), capture_output=True, text=True,
                           check=True).stdout.split()
    if not all(Path(w).resolve().is_relative_to(copy.resolve()) for w in where):
        raise SystemExit(f"the scratch copy's tests would import {where}, not the copy's code")


def baseline(copy: Path, mutants: list[Mutant], timeout: float) -> bool:
    """Every distinct test selection of ``mutants`` on the unmutated copy: a test that fails there
    proves nothing about a mutant. Prints each selection's outcome; True when all pass."""
    ok = True
    for tests in dict.fromkeys(m.tests for m in mutants):
        run = run_tests(copy, tests, timeout)
        print(f"baseline {' '.join(tests):<56} {'pass' if run.code == 0 else 'FAIL'} {run.seconds:6.1f} s", flush=True)
        if run.code != 0:
            print(run.out)
            ok = False
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="run this mutant (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the mutants and their tests, run nothing")
    ap.add_argument("--timeout", type=float, default=300, help="seconds a mutant's tests may take")
    ap.add_argument("--no-baseline", action="store_true", help="skip the run on the unmutated copy")
    args = ap.parse_args(argv)
    unknown = set(args.only) - {m.name for m in MUTANTS}
    if unknown:
        ap.error(f"unknown mutant(s): {', '.join(sorted(unknown))}")
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    if args.list:
        for m in chosen:
            print(f"{m.name:<36} {m.what}\n{'':<36} tests: {' '.join(m.tests)}")
        return 0
    # SIGTERM and SIGHUP unwind like Ctrl-C: the scratch copy is removed, the working tree never touched
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.default_int_handler)
    with scratch_copy() as copy:
        _imports_the_copy(copy)
        if not args.no_baseline and not baseline(copy, chosen, args.timeout):
            return 2
        print(f"\n{'mutant':<36} {'result':<12} {'seconds':>7}  the test that failed (or the tests run)")
        missed = 0
        for m in chosen:
            with applied(copy, m):
                run = run_tests(copy, m.tests, args.timeout)
            result = run.verdict
            missed += result != "caught"
            first = run.caught_by or (run.failures[0] if run.failures else None)
            print(f"{m.name:<36} {result:<12} {run.seconds:7.1f}  {first['test'] if first else ' '.join(m.tests)}",
                  flush=True)
            if first is not None:  # the line the test stopped at: an assertion, or where the code crashed
                print(f"{'':<36} {first['exception']} at {first['where']}: {first['line']}", flush=True)
            if result.startswith("ERROR"):
                print(run.out)
    print(f"\n{len(chosen) - missed} of {len(chosen)} mutants caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
