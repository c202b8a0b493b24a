"""The served mode, run for real: Postgres, the MLflow tracking server, the Dagster code server,
webserver and daemon as separate processes, started by ``python -m pipelines.serve`` (what
``make serve`` runs), on free ports on 127.0.0.1 in a temporary data folder.

A result folder dropped into the source travels the daemon's sensor chain (ingest, the changed
partitions, the joint predictor); the test reads the outcome through the services' own interfaces:
the webserver's GraphQL API, the MLflow server's REST API and the ``runs`` table in Postgres. Then
the daemon is SIGKILLed during a refresh and restarted, and finally everything is stopped while a
run is in flight, and the run records are read back from the cluster.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines import serve

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
#: the three benchmarks of tests/test_pipeline.py's joint fixture (their checks pass at K=8): two refresh
#: runs at once (max_concurrent_runs: 2), the third queued
BENCHMARK_ITEMS = {"arc": 60, "gsm8k": 50, "mmlu": 60}
BENCHMARKS = sorted(BENCHMARK_ITEMS)
TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}

RUNS_QUERY = """{ runsOrError { ... on Runs { results { runId jobName status
  tags { key value } } } } }"""
MATERIALIZATIONS_QUERY = """query($key: AssetKeyInput!) { assetOrError(assetKey: $key) {
  __typename ... on Asset { assetMaterializations(limit: 100) { partition runId } } } }"""


def _postgres_or_skip() -> None:
    if not (serve.PG_BIN / "initdb").exists():
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL binaries not found in {serve.PG_BIN} (CI must have them)")
        pytest.skip(f"PostgreSQL binaries not found in {serve.PG_BIN}")


def _drop(source: Path, name: str, suffix: str = "") -> None:
    """A seeded synthetic leaderboard (``suffix``: the same under other model names, so new data),
    written elsewhere and moved in whole, as a user's copy lands."""
    from sparseeval.synthetic import generate_leaderboard, write_leaderboard
    from tests.test_pipeline import _renamed

    if suffix:
        lb = _renamed(generate_leaderboard(n_families=2, models_per_family=4, benchmarks={"arc": 60}, seed=8), suffix)
    else:
        lb = generate_leaderboard(n_families=20, models_per_family=8, benchmarks=BENCHMARK_ITEMS, seed=2)
    tmp = source.parent / f".{name}"
    write_leaderboard(lb, tmp)
    tmp.rename(source / name)


class Served:
    """The services of one data folder and helpers that read them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.source = root / "source"
        self.source.mkdir(parents=True)
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("DAGSTER_", "MLFLOW_", "PG", "SPARSEEVAL_"))}
        self.env.update({
            "PYTHONPATH": str(REPO), "SPARSEEVAL_DATA_DIR": str(self.data), "SPARSEEVAL_SOURCE": str(self.source),
            "SPARSEEVAL_SENSOR_INTERVAL": "2", "SPARSEEVAL_K": "8", "SPARSEEVAL_METHOD": "sparseeval-linear",
            "SPARSEEVAL_COMPARE_METHODS": "random-linear,sparseeval-linear", "SPARSEEVAL_COMPARE_KS": "8",
            "SPARSEEVAL_COMPARE_SEEDS": "1", "SPARSEEVAL_THREADS": "1", "OMP_NUM_THREADS": "1",
        })
        self.ports = {"dagster": serve.free_port(), "mlflow": serve.free_port()}

    def cli(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "pipelines.serve", *args], env=self.env, cwd=REPO,
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode:
            logs = "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}"
                           for p in sorted((self.data / "serve" / "logs").glob("*.log")))
            raise AssertionError(f"serve {' '.join(args)}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}{logs}")
        return proc

    def start(self) -> None:
        self.cli("start", "--detach", "--dagster-port", str(self.ports["dagster"]),
                 "--mlflow-port", str(self.ports["mlflow"]))

    @property
    def state(self) -> dict:
        return json.loads((self.data / "serve" / "state.json").read_text())

    def pid(self, service: str) -> int:
        return self.state["services"][service]["pid"]

    @property
    def password(self) -> str:
        return (self.data / "serve" / "secrets" / "pg_password").read_text().strip()

    def graphql(self, query: str, **variables: object) -> dict:
        return serve.graphql(self.ports["dagster"], query, variables)

    def runs(self) -> list[dict]:
        return self.graphql(RUNS_QUERY)["runsOrError"]["results"]

    def mlflow(self, path: str) -> dict:
        url = f"http://127.0.0.1:{self.ports['mlflow']}/api/2.0/mlflow/{path}"
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def pg_runs(self) -> dict[str, tuple[str, str]]:
        """run_id -> (job, status), straight from the ``runs`` table."""
        import psycopg2

        con = psycopg2.connect(host="127.0.0.1", port=self.state["ports"]["postgres"], user=serve.PG_USER,
                               password=self.password, dbname="dagster")
        try:
            with con.cursor() as cur:
                cur.execute("SELECT run_id, pipeline_name, status FROM runs")
                return {r[0]: (r[1], r[2]) for r in cur.fetchall()}
        finally:
            con.close()

    def errors(self) -> str:
        """The runs' error lines (runs log to the code server's output)."""
        log = (self.data / "serve" / "logs" / "code_server.log").read_text(errors="replace")
        return "\n".join(line for line in log.splitlines() if " - ERROR - " in line or "Error:" in line)[-6000:]

    def wait(self, what: str, predicate, timeout: float = 240):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.runs()
                out = predicate(last)
                if out:
                    return last if out is True else out
            except OSError:
                pass
            time.sleep(1)
        raise AssertionError(f"timed out waiting for {what}; runs: {[(r['jobName'], r['status']) for r in last or []]}"
                             f"\n{(self.data / 'serve' / 'logs' / 'daemon.log').read_text()[-4000:]}")


def _kill_leftovers(served: Served) -> None:
    """Whatever a failed test left running: the process groups, then Postgres."""
    try:
        state = served.state
    except (FileNotFoundError, json.JSONDecodeError):
        return
    for name, svc in state.get("services", {}).items():
        if name != "postgres" and serve.alive(svc["pid"]):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(svc["pid"], signal.SIGKILL)
    cluster = served.data / "postgres" / "cluster"
    if (cluster / "postmaster.pid").exists():
        subprocess.run(serve._as_postgres([str(serve.PG_BIN / "pg_ctl"), "-D", str(cluster), "-m", "immediate",
                                           "stop"]), capture_output=True, check=False)


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    _postgres_or_skip()
    # a short path (Postgres's socket lives under it) that the postgres user may traverse
    root = Path(tempfile.mkdtemp(prefix="sev-", dir="/tmp"))
    root.chmod(0o711)
    s = Served(root)
    try:
        t0 = time.monotonic()
        s.start()
        s.startup_s = time.monotonic() - t0
        yield s
    finally:
        try:
            if (s.data / "serve" / "state.json").exists() and s.state.get("services"):
                s.cli("stop", "--grace", "0", check=False, timeout=180)
        finally:
            _kill_leftovers(s)
            shutil.rmtree(root, ignore_errors=True)


def _by_job(runs: list[dict], job: str) -> list[dict]:
    return [r for r in runs if r["jobName"] == job]


def _partition(run: dict) -> str | None:
    return next((t["value"] for t in run["tags"] if t["key"] == "dagster/partition"), None)


def test_sensor_chain_survives_a_daemon_kill_and_publishes_through_the_services(served: Served) -> None:
    _drop(served.source, "leaderboard")

    # the daemon dies (SIGKILL) while a refresh runs; the run records live in Postgres
    def refresh_started(runs: list[dict]) -> dict | None:
        return next((r for r in _by_job(runs, "refresh") if r["status"] == "STARTED"), None)

    running = served.wait("a refresh run to start", refresh_started)
    daemon = served.pid("daemon")
    others = {n: served.pid(n) for n in ("mlflow", "code_server", "webserver")}
    os.kill(daemon, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while serve.alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not serve.alive(daemon)
    at_kill = served.pg_runs()
    assert at_kill[running["runId"]] in (("refresh", "STARTED"), ("refresh", "SUCCESS"))
    out = served.cli("status", check=False)
    assert out.returncode == 1 and "DEAD" in out.stdout  # status tells
    time.sleep(3)  # the dead daemon misses a tick
    served.start()  # restarts only what is not running
    assert served.pid("daemon") != daemon
    assert {n: served.pid(n) for n in others} == others

    def chain_done(runs: list[dict]) -> bool:
        return bool(_by_job(runs, "joint")) and all(r["status"] in TERMINAL for r in runs)

    runs = served.wait("ingest -> refresh x3 -> joint", chain_done)
    assert [r["status"] for r in _by_job(runs, "ingest")] == ["SUCCESS"]  # the restart requested nothing twice
    refreshes = _by_job(runs, "refresh")
    assert sorted(_partition(r) for r in refreshes) == BENCHMARKS  # the changed partitions, once each
    assert all(r["status"] == "SUCCESS" for r in refreshes), ([r["status"] for r in refreshes], served.errors())
    assert [r["status"] for r in _by_job(runs, "joint")] == ["SUCCESS"], served.errors()
    # the run under way when the daemon died lives in the code server's process tree: it finished
    pg = served.pg_runs()
    assert pg[running["runId"]] == ("refresh", "SUCCESS")
    assert set(at_kill) <= set(pg)  # no run record lost
    assert {r["runId"]: (r["jobName"], r["status"]) for r in runs} == pg  # the webserver reads the same table

    # the webserver: every asset materialized, per partition
    def materialized(asset: str) -> list[str]:
        out = served.graphql(MATERIALIZATIONS_QUERY, key={"path": [asset]})["assetOrError"]
        assert out["__typename"] == "Asset", out
        return sorted(m["partition"] or "" for m in out["assetMaterializations"])

    assert materialized("raw_results") == [""]
    for asset in ("response_matrix", "candidate", "champion", "evaluation", "predictions"):
        assert materialized(asset) == BENCHMARKS, asset
    assert materialized("joint_anchors") == [""]

    # the MLflow server: a registered champion per benchmark, its run logged over HTTP
    from sparseeval.benchmarks import JOINT_NAME, registered_model_name

    for bench in [*BENCHMARKS, JOINT_NAME]:
        version = served.mlflow(f"registered-models/alias?name={registered_model_name(bench)}&alias=champion")
        mv = version["model_version"]
        assert "champion" in mv["aliases"]
        run = served.mlflow(f"runs/get?run_id={mv['run_id']}")["run"]
        assert run["info"]["artifact_uri"].startswith("mlflow-artifacts:")  # served artifacts, not a file path
    assert not list(served.data.glob("mlflow*.db")) and not (served.data / "mlruns").exists()  # no local store
    assert any(p.is_file() for p in (served.data / "mlflow-artifacts").rglob("*")), "the server stored no artifact"


def test_binds_loopback_and_keeps_the_password_secret(served: Served) -> None:
    state = served.state
    ours = _descendants({svc["pid"] for svc in state["services"].values()})
    listening = subprocess.run(["ss", "-H", "-ltnp"], capture_output=True, text=True, check=True).stdout
    seen = {}
    for line in listening.splitlines():
        pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if pids & ours:
            local = line.split()[3]
            seen[local] = pids & ours
    assert {int(a.rsplit(":", 1)[1]) for a in seen} >= {served.ports["dagster"], served.ports["mlflow"],
                                                        state["ports"]["postgres"], state["ports"]["code_server"]}
    assert all(_host(a) == "127.0.0.1" for a in seen), seen

    secret = served.password
    assert len(secret) >= 24
    for f in (served.data / "serve" / "secrets").iterdir():
        assert f.stat().st_mode & 0o077 == 0, f
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            assert secret.encode() not in cmdline, f"password in the arguments of process {proc.name}"
    for log in [*(served.data / "serve" / "logs").glob("*"), *(served.data / "postgres").rglob("*.log")]:
        assert secret not in log.read_text(errors="replace"), f"password in {log}"
    # MLflow gets the password from the passfile only: neither its arguments nor its environment hold it
    mlflow_env = Path(f"/proc/{served.pid('mlflow')}/environ").read_bytes()
    assert secret.encode() not in mlflow_env
    assert b"PGPASSFILE=" in mlflow_env
    # and nothing in the repository does
    assert subprocess.run(["grep", "-rqF", secret, str(REPO / "pipelines"), str(REPO / "docs")],
                          check=False).returncode == 1


def _host(address: str) -> str:
    """The IPv4 host of a listening address as ``ss`` prints it (gRPC listens on an IPv6 socket
    bound to the IPv4-mapped ``[::ffff:127.0.0.1]``: still loopback only)."""
    ip = ipaddress.ip_address(address.rsplit(":", 1)[0].strip("[]"))
    return str(ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else ip)


def _descendants(roots: set[int]) -> set[int]:
    children: dict[int, set[int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, set()).add(int(proc.name))
    out, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, ()))
    return out


def test_stop_with_a_run_in_flight_keeps_every_record(served: Served) -> None:
    before = served.pg_runs()
    _drop(served.source, "late", suffix="-late")
    served.wait("a run to start", lambda runs: any(r["runId"] not in before and r["status"] in ("STARTED", "SUCCESS")
                                                   for r in runs))
    pids = {n: s["pid"] for n, s in served.state["services"].items()}
    out = served.cli("stop", "--grace", "0", timeout=180)
    assert "daemon       stopped" in out.stdout and "postgres     stopped" in out.stdout, out.stdout
    assert not any(serve.alive(p) for p in pids.values())
    assert not (served.data / "postgres" / "cluster" / "postmaster.pid").exists()
    # read the records back from the cluster alone
    lay = serve.Layout(served.data)
    port = served.state["ports"]["postgres"]
    os.environ.pop("DAGSTER_PG_HOST", None)
    serve.start_postgres(lay, serve.Database("127.0.0.1", port, serve.PG_USER, "dagster", "", served.password, True))
    try:
        after = served.pg_runs()
    finally:
        serve.stop_postgres(lay)
    assert set(before) < set(after)  # the new run is recorded, none lost
    assert all(status in (*TERMINAL, "QUEUED") for _job, status in after.values()), after  # none left 'started'


def test_exposing_mlflow_without_auth_is_refused(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "MLFLOW_", "SPARSEEVAL_"))}
    env.update({"PYTHONPATH": str(REPO), "SPARSEEVAL_DATA_DIR": str(tmp_path / "data")})
    proc = subprocess.run([sys.executable, "-m", "pipelines.serve", "start", "--detach", "--mlflow-host", "0.0.0.0"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0
    assert "MLFLOW_AUTH_ADMIN_PASSWORD" in proc.stderr and "0.0.0.0" in proc.stderr
    assert not (tmp_path / "data" / "postgres").exists()  # refused before anything started
