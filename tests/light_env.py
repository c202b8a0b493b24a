"""``python -m tests.light_env ARGS``: the ``sparseeval`` CLI in a process where what the light install
(``pip install sparseeval``, no extras) lacks cannot be imported: torch, scikit-learn, SciPy, pyarrow,
pandas, Dagster, MLflow, matplotlib. A fast stand-in for the fresh-venv test of tests/test_wheel.py,
run by every test that claims a command works without the extras."""

from __future__ import annotations

import importlib.abc
import sys

#: top-level packages of the extras ([fit], [pipeline], [serve]) and their heavy dependencies
ABSENT = frozenset({"torch", "sklearn", "scipy", "pyarrow", "pandas", "dagster", "mlflow", "matplotlib"})


class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


if __name__ == "__main__":
    sys.meta_path.insert(0, _Absent())
    from sparseeval.interfaces.cli import main

    sys.exit(main(sys.argv[1:]))
