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


def build_wheel(dist: Path) -> Path:
    """The project's wheel, built from this checkout into ``dist``."""
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            str(REPO), "-w", str(dist)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    [wheel] = dist.glob("sparseeval-*.whl")
    return wheel


@pytest.mark.slow
def test_wheel_installs_and_ingests_outside_the_checkout(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist")
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
                              str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    # the served mode's instance config
    assert (site / "sparseeval" / "interfaces" / "serve" / "dagster_postgres.yaml").is_file()
    (tmp_path / "data.csv").write_text("model,benchmark,item_id,score\nm1,arc,1,1\nm1,arc,2,0\n")
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import sparseeval, pipelines\n"
        "from sparseeval.data.store import Store\n"
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


@pytest.mark.slow
def test_light_install_predicts_and_exports_without_torch(tmp_path: Path) -> None:
    """``pip install sparseeval`` (the wheel, no extras) into a fresh venv: no torch, Dagster, MLflow,
    scikit-learn, SciPy or pyarrow; ``predict`` (a predictor from the stand-in Hub, answers from a real lm-eval
    output folder) gives what the full install gives; ``export`` writes the lm-eval task; ``fit`` names its
    extra. Sizes and times are measured by ``bench/light_install.py``, not here."""
    import json

    from bench.support.hub_server import HubServer, Repo, files_from
    from sparseeval.interfaces.cli import main

    wheel = build_wheel(tmp_path / "dist")
    venv = tmp_path / "light"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], capture_output=True,
                             text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "pip"), "list", "--format", "json"], capture_output=True,
                            text=True, check=True).stdout
    installed = {p["name"].lower() for p in json.loads(listed)}
    assert not installed & {"torch", "dagster", "mlflow", "scikit-learn", "scipy", "pyarrow", "pandas",
                            "dagster-webserver"}, installed

    # a predictor (fitted here, with torch) served by the stand-in Hub; answers: lm-eval 0.4.13's own output
    real = REPO / "tests" / "fixtures" / "real_formats" / "lm_eval_0.4.13" / "dummy"
    data = tmp_path / "data.csv"
    rows = ["model,benchmark,item_id,score"] + [f"m{i},toy_gen@3shot,{j},{int((i * 7 + j * 3) % 5 < 2 + i % 3)}"
                                               for i in range(80) for j in range(6)]
    data.write_text("\n".join(rows) + "\n")
    pred = tmp_path / "pred"
    assert main(["-q", "fit", "--data", str(data), "--benchmark", "toy_gen@3shot", "-k", "3", "--method",
                 "random-linear", "--row-mean-is-score", "--out", str(pred)]) == 0
    server = HubServer()
    try:
        repo = Repo()
        repo.push(files_from(pred))
        server.models["team/toy-gen"] = repo
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARSEEVAL_DB", "SPARSEEVAL_DATA_DIR")}
        env |= {"HF_ENDPOINT": server.url, "HF_HUB_CACHE": str(tmp_path / "cache"),
                "SPARSEEVAL_DATA_DIR": str(tmp_path)}
        cli = str(venv / "bin" / "sparseeval")
        light = subprocess.run([cli, "predict", "--predictor", "hf://team/toy-gen", "--answers", str(real),
                                "--json", "-"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert light.returncode == 0, light.stderr[-3000:]
        full = tmp_path / "full.json"
        assert main(["predict", "--no-db", "--predictor", str(pred), "--answers", str(real), "--json", str(full)]) == 0
        assert [(r["model"], round(r["predicted"], 9)) for r in json.loads(light.stdout)] == \
            [(r["model"], round(r["predicted"], 9)) for r in json.loads(full.read_text())]
        exported = subprocess.run([cli, "export", "--predictor", "hf://team/toy-gen", "--format", "lm-eval-task",
                                   "--out", str(tmp_path / "tasks")], cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=120)
        assert exported.returncode == 0, exported.stderr[-3000:]
        assert (tmp_path / "tasks" / "sparseeval_toy_gen_3shot.yaml").is_file()
    finally:
        server.close()
    fit = subprocess.run([cli, "fit", "--data", str(data), "--benchmark", "toy_gen@3shot"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert fit.returncode == 2 and "pip install 'sparseeval[fit]'" in fit.stderr, fit.stderr
