"""The planted-bug list (``bench/mutants.py``) stays applicable to the code: every mutant's text is found
exactly once where it plants its bug, and the tests it runs exist. A refactor that moves the text
silently retires a mutant; the full run then stops at it (it happened once: ``frontier-quantile-not-passed``
after the self-check's call was reshaped). Cheap: no mutant is run here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _mutants():
    spec = importlib.util.spec_from_file_location("bench_mutants", REPO / "bench" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.MUTANTS


MUTANTS = _mutants()


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_every_mutant_still_plants_its_bug_and_names_real_tests(mutant) -> None:
    for rel, old, new in mutant.edits:
        text = (REPO / rel).read_text()
        assert text.count(old) == 1, f"{mutant.name}: {rel} holds its text {text.count(old)} times"
        assert old != new
    files = [arg.split("::")[0] for arg in mutant.tests if arg.startswith("tests/")]
    assert files, mutant.tests
    for f in files:
        assert (REPO / f).is_file(), f
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
