"""The package as a deployment installs it: a built wheel, not the source checkout.

Dagster deployments install wheels; the store's DDL (``sql/``) must travel inside the package.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_and_ingests_outside_the_checkout(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            str(REPO), "-w", str(dist)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    [wheel] = dist.glob("sparseeval-*.whl")
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
                              str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    assert (site / "sparseeval" / "serve" / "dagster_postgres.yaml").is_file()  # the served mode's instance config
    (tmp_path / "data.csv").write_text("model,benchmark,item_id,score\nm1,arc,1,1\nm1,arc,2,0\n")
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import sparseeval, pipelines\n"
        "from sparseeval.store import Store\n"
        "assert sparseeval.__file__.startswith(sys.argv[1]), sparseeval.__file__\n"
        "store = Store('w.duckdb')\n"
        "report = store.ingest('data.csv')\n"
        "assert report.ok, report\n"
        "print(store.query('SELECT count(*) FROM responses').item(), sparseeval.__file__)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARSEEVAL_DB", "SPARSEEVAL_DATA_DIR")}
    run = subprocess.run([sys.executable, "-c", script, str(site)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    count, where = run.stdout.split()
    assert count == "2" and where.startswith(str(site))
