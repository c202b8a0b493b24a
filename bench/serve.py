"""The served mode's start-up and footprint, and one refresh of the embedded default served vs in-process.

1. ``python -m sparseeval.interfaces.serve start --detach`` (what ``make serve`` runs, detached) in a fresh data
   folder: seconds until each service answers and until the Dagster UI answers (the webserver's
   GraphQL API lists the code location as loaded), from a cold start (``initdb`` included) and a
   warm one (the cluster exists).
2. The daemon's sensors then ingest the embedded synthetic leaderboard and refresh every benchmark
   and the joint predictor, each run its own process (two at once): seconds until every run is done.
3. Memory of each service at rest (no run in flight, after that refresh): the resident and the
   proportional set of its process tree (Postgres: the postmaster and its backends; MLflow: its
   server and workers).
4. Back after a SIGKILL, at rest, three times each: the daemon (seconds until supervisord's new one
   heartbeats) and the MLflow server (until a new server answers ``/health``, the killed one's
   uvicorn child ended by the launcher).
5. ``make run`` (``python -m pipelines.run_all``: the same jobs in-process on a SQLite instance) on
   the same data and settings in another folder.

    python bench/serve.py [--quick] [--root DIR]

``--quick``: K=8, the linear method, one comparison method (what tests/test_serve.py uses) instead
of the project's defaults. Prints a table; nothing is asserted (figures live in benches).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.support.served import (  # noqa: E402
    back_after_sigkill,
    daemon_heartbeats_since,
    mlflow_answers,
    process_tree,
)
from sparseeval.interfaces.serve import bootstrap as serve  # noqa: E402
from sparseeval.interfaces.serve.drain import graphql  # noqa: E402
from sparseeval.interfaces.serve.supervisor import SERVICES, rpc  # noqa: E402

QUICK = {"SPARSEEVAL_K": "8", "SPARSEEVAL_METHOD": "sparseeval-linear", "SPARSEEVAL_COMPARE_METHODS": "random-linear",
         "SPARSEEVAL_COMPARE_KS": "8", "SPARSEEVAL_COMPARE_SEEDS": "1"}
RUNS = """{ runsOrError { ... on Runs { results { runId jobName status } } } }"""


def _tree_memory_mb(root: int) -> tuple[float, float]:
    """Resident set and proportional set of ``root`` and its descendants, in MB (from /proc). RSS
    counts a shared page once per process (Postgres's shared buffers in every backend); PSS splits
    it between them, so the PSS of the services adds up to what they take together."""
    rss = pss = 0
    for pid in process_tree({root}):
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        fields = {line.split(":")[0]: int(line.split()[1]) for line in rollup.splitlines()[1:] if line.endswith("kB")}
        rss += fields.get("Rss", 0)
        pss += fields.get("Pss", 0)
    return rss / 1024, pss / 1024


def _cli(env: dict[str, str], *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "sparseeval.interfaces.serve", *args], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=900, check=False)
    if out.returncode:
        raise SystemExit(f"serve {' '.join(args)} failed:\n{out.stdout}{out.stderr}")
    return out.stdout


def _served(root: Path, settings: dict[str, str]) -> dict:
    data = root / "served"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "MLFLOW_", "SPARSEEVAL_"))}
    env.update({"PYTHONPATH": str(REPO), "SPARSEEVAL_DATA_DIR": str(data), "SPARSEEVAL_SENSOR_INTERVAL": "5",
                **settings})
    ports = ["--dagster-port", "0", "--mlflow-port", "0"]
    out: dict = {}
    try:
        t0 = time.monotonic()
        _cli(env, "start", "--detach", *ports)
        out["cold_start_s"] = time.monotonic() - t0
        state = json.loads((data / "serve" / "state.json").read_text())
        out["service_s"] = state["started_s"]
        web = state["ports"]["webserver"]
        t0 = time.monotonic()
        while True:  # the sensors' chain: ingest, the refreshes, the joint predictor
            runs = graphql(web, RUNS)["runsOrError"]["results"]
            jobs = {r["jobName"] for r in runs}
            if {"ingest", "refresh", "joint"} <= jobs and all(r["status"] in ("SUCCESS", "FAILURE", "CANCELED")
                                                            for r in runs):
                break
            if time.monotonic() - t0 > 3600:
                raise SystemExit(f"the served refresh did not finish in an hour: {runs}")
            time.sleep(2)
        out["refresh_s"] = time.monotonic() - t0
        out["runs"] = sorted((r["jobName"], r["status"]) for r in runs)
        time.sleep(10)  # at rest: no run in flight, the daemon ticking on unchanged data
        lay = serve.Layout(data)
        pids = {"postgres": serve.postgres_pid(lay),
                **{n: rpc(lay).supervisor.getProcessInfo(n)["pid"] for n in SERVICES}}
        out["memory_mb"] = {name: _tree_memory_mb(pid) for name, pid in pids.items()}
        mlflow_port = state["ports"]["mlflow"]
        out["back_s"] = {
            "daemon": [back_after_sigkill(lay, "daemon", lambda t: daemon_heartbeats_since(web, t)) for _ in range(3)],
            "mlflow": [back_after_sigkill(lay, "mlflow", lambda _: mlflow_answers(serve.LOOPBACK, mlflow_port))
                       for _ in range(3)]}
        _cli(env, "stop")
        t0 = time.monotonic()
        _cli(env, "start", "--detach", *ports)
        out["warm_start_s"] = time.monotonic() - t0
    finally:
        subprocess.run([sys.executable, "-m", "sparseeval.interfaces.serve", "stop", "--grace", "0"], cwd=REPO, env=env,
                       capture_output=True, timeout=300, check=False)
    return out


def _in_process(root: Path, settings: dict[str, str]) -> dict:
    home = root / "inproc" / "dagster_home"
    home.mkdir(parents=True)
    shutil.copy(REPO / "pipelines" / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "MLFLOW_", "SPARSEEVAL_"))}
    env.update({"PYTHONPATH": str(REPO), "DAGSTER_HOME": str(home), "SPARSEEVAL_DATA_DIR": str(root / "inproc"),
                **settings})
    t0 = time.monotonic()
    made = subprocess.run([sys.executable, "-m", "pipelines.run_all"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=3600, check=False)
    return {"refresh_s": time.monotonic() - t0, "ok": made.returncode == 0 and "FAILED" not in made.stdout}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the test's small settings instead of the defaults")
    ap.add_argument("--root", type=Path, default=None, help="work folder (default: a fresh one under /tmp)")
    args = ap.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="sev-bench-", dir="/tmp"))
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o711)  # the postgres user traverses it (as root)
    settings = QUICK if args.quick else {}
    print(f"settings: {settings or 'the defaults (make run)'}; work folder {root}", flush=True)
    served = _served(root, settings)
    inproc = _in_process(root, settings)
    print("\nstart-up (python -m sparseeval.interfaces.serve start --detach until every service answers)")
    print(f"  cold (initdb, role, databases): {served['cold_start_s']:6.1f} s   warm: {served['warm_start_s']:6.1f} s")
    for name, seconds in served["service_s"].items():
        print(f"    {name:<12} {seconds:6.1f} s")
    print("\nmemory at rest (each service's process tree)      RSS      PSS")
    for name, (rss, pss) in served["memory_mb"].items():
        print(f"  {name:<12}                              {rss:5.0f} MB {pss:5.0f} MB")
    print(f"  {'total':<12}                              {sum(r for r, _ in served['memory_mb'].values()):5.0f} MB "
          f"{sum(p for _, p in served['memory_mb'].values()):5.0f} MB")
    print("\nback after a SIGKILL (supervisord restarts it): seconds, three kills each")
    for name, seconds in served["back_s"].items():
        print(f"  {name:<12} {'  '.join(f'{s:5.1f}' for s in seconds)}   (max {max(seconds):.1f} s)")
    print("\none refresh of the embedded default (ingest, every benchmark, the joint predictor)")
    print(f"  served (daemon sensors, a process per run, two at once): {served['refresh_s']:6.1f} s  "
          f"runs: {served['runs']}")
    print(f"  make run (in-process, one after another):                {inproc['refresh_s']:6.1f} s  "
          f"{'ok' if inproc['ok'] else 'FAILED'}")
    if not args.root:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
