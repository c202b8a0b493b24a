"""``python -m sparseeval.interfaces.serve start|stop|status`` (``make serve``, ``make serve-stop``).

``start`` bootstraps (Postgres, secrets, config), starts supervisord and has it start the services in
two stages (MLflow and the code server, then the webserver and the daemon, each stage once the one
before answers); in the foreground it reports restarts until Ctrl-C, then stops everything in
order; ``--detach`` returns once every service answers. With supervisord already running it starts
only the services that are not. ``stop`` stops the daemon, drains the runs, stops the other services
and supervisord, ends any process left of them, and stops the local Postgres last.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import time
import urllib.request
import xmlrpc.client
from collections.abc import Callable
from pathlib import Path

from sparseeval.core import settings
from sparseeval.interfaces.serve import bootstrap as boot
from sparseeval.interfaces.serve.drain import LOCATION, drain, graphql
from sparseeval.interfaces.serve.supervisor import SERVICES, launch, rpc, start_supervisord, supervisord_pid, sweep

#: the services supervisord starts together (each stage waits for the one before to answer)
STAGES = (("mlflow", "code_server"), ("webserver", "daemon"))
STOP_WAIT_S = 30.0  # how long a stopped process may take to exit before the stop says it is still running


def _choose_ports(args: argparse.Namespace, old: dict[str, int], keep: set[str]) -> dict[str, int]:
    """Each service's port: kept while it runs, else the one asked for (refused when taken), else the
    previous one when free, else a free one."""
    ports = {}
    for name, wanted in (("postgres", args.pg_port), ("mlflow", args.mlflow_port), ("code_server", args.code_port),
                         ("webserver", args.dagster_port)):
        host = args.mlflow_host if name == "mlflow" else boot.LOOPBACK
        if name in keep:
            ports[name] = old[name]
        elif wanted:
            if not boot.port_free(wanted, boot.client_host(host)):
                raise boot.ServeError(f"port {wanted} for {name} is in use (pass another, or 0 for a free one)")
            ports[name] = wanted
        else:
            reuse = old.get(name)
            ports[name] = reuse if reuse and boot.port_free(reuse, boot.client_host(host)) else \
                boot.free_port(boot.client_host(host))
    return ports


def _ready_checks(ports: dict[str, int], mlflow_host: str) -> dict[str, Callable[[], bool]]:
    def webserver() -> bool:
        entries = graphql(ports["webserver"], LOCATION)["workspaceOrError"]["locationEntries"]
        if entries and entries[0]["loadStatus"] == "LOADED":
            if entries[0]["locationOrLoadError"]["__typename"] == "PythonError":
                raise boot.ServeError("the code location failed to load: "
                                      f"{entries[0]['locationOrLoadError']['message']}")
            return True
        return False

    def tcp(port: int) -> bool:
        with socket.create_connection((boot.LOOPBACK, port), timeout=1):
            return True

    health = f"http://{boot.client_host(mlflow_host)}:{ports['mlflow']}/health"
    return {"mlflow": lambda: urllib.request.urlopen(health, timeout=2).read() == b"OK",
            "code_server": lambda: tcp(ports["code_server"]), "webserver": webserver, "daemon": lambda: True}


def _wait_ready(lay: boot.Layout, name: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = rpc(lay).supervisor.getProcessInfo(name)
        if info["statename"] in ("FATAL", "EXITED", "BACKOFF"):
            raise boot.ServeError(f"{name} exited during start-up ({info['spawnerr'] or info['statename']}); "
                                  f"see {lay.logs / f'{name}.log'}")
        if info["statename"] == "RUNNING":
            try:
                if check():
                    return
            except boot.ServeError:
                raise
            except Exception:  # not answering yet
                pass
        time.sleep(0.5)
    raise boot.ServeError(f"{name} did not answer within {timeout:.0f} s; see {lay.logs / f'{name}.log'}")


def _running(lay: boot.Layout) -> dict[str, int]:
    """service -> pid of those supervisord runs (empty when supervisord is not running)."""
    if supervisord_pid(lay) is None:
        return {}
    return {p["name"]: p["pid"] for p in rpc(lay).supervisor.getAllProcessInfo() if p["statename"] == "RUNNING"}


def start(args: argparse.Namespace) -> int:
    lay = boot.layout()
    lay.serve.mkdir(parents=True, exist_ok=True)
    state = boot.read_state(lay)
    if boot.alive(state.get("foreground")) and state["foreground"] != os.getpid() and not args.detach:
        raise boot.ServeError(f"already served by process {state['foreground']} (make serve-stop first)")
    running = _running(lay)
    keep = set(running) | ({"postgres"} if boot.postgres_pid(lay) else set())
    mlflow_host = state.get("mlflow_host", args.mlflow_host) if "mlflow" in running else args.mlflow_host
    ports = _choose_ports(args, state.get("ports", {}), keep)
    db = boot.database(lay, ports["postgres"])
    boot.prepare(lay, db, ports, mlflow_host)
    state.update({"ports": ports, "mlflow_host": mlflow_host, "data": str(lay.data)})
    if not args.detach:
        state["foreground"] = os.getpid()
    boot.write_state(lay, state)
    began: list[str] = []
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    try:
        if db.local and "postgres" not in keep:
            boot.start_postgres(lay, db)
            began.append("postgres")
            timings["postgres"] = time.monotonic() - t0
        if supervisord_pid(lay) is None:
            start_supervisord(lay)
            began.append("supervisord")
        checks = _ready_checks(ports, mlflow_host)
        for stage in STAGES:
            started = {}
            for name in stage:
                if name not in running:
                    rpc(lay).supervisor.startProcess(name, False)
                    started[name] = time.monotonic()
                    began.append(name)
            for name, t1 in started.items():
                _wait_ready(lay, name, checks[name], args.timeout)
                timings[name] = time.monotonic() - t1
    except (boot.ServeError, KeyboardInterrupt):
        if began:
            print(f"serve: start-up did not finish; stopping {', '.join(began)}", file=sys.stderr, flush=True)
            stop_services(lay, 0, only=set(began))
        raise
    state["started_s"] = {**state.get("started_s", {}), **{k: round(v, 2) for k, v in timings.items()}}
    boot.write_state(lay, state)
    print(f"served in {time.monotonic() - t0:.1f} s (data: {lay.data})")
    print(f"  Dagster UI : http://{boot.LOOPBACK}:{ports['webserver']}")
    print(f"  MLflow UI  : http://{mlflow_host}:{ports['mlflow']}")
    print(f"  Postgres   : {db.host}:{db.port} (databases {db.dagster_db}, mlflow)  logs: {lay.logs}")
    print(f"  services   : {boot.executable('supervisorctl')} -c {lay.supervisor_conf} "
          "status|restart NAME|tail -f NAME")
    if args.detach:
        return 0
    print("Ctrl-C (or make serve-stop) stops every service.", flush=True)
    return _foreground(lay, args.grace)


def _foreground(lay: boot.Layout, grace: float) -> int:
    """Until SIGINT/SIGTERM: say when supervisord restarts a service; then stop everything in order."""
    stopping = {"now": False}

    def on_signal(_signum: int, _frame: object) -> None:
        stopping["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    pids = _running(lay)
    while not stopping["now"] and supervisord_pid(lay) is not None:
        time.sleep(1)
        with contextlib.suppress(OSError, xmlrpc.client.Fault):
            for info in rpc(lay).supervisor.getAllProcessInfo():
                name, pid = info["name"], info["pid"]
                if pid and pids.get(name) and pid != pids[name]:
                    print(f"serve: {name} (pid {pids[name]}) ended; supervisord restarted it (pid {pid})", flush=True)
                if info["statename"] == "FATAL" and pids.get(name):
                    print(f"serve: {name} cannot be restarted; see {lay.logs / f'{name}.log'}", flush=True)
                    pid = 0
                pids[name] = pid
    print("stopping ...", flush=True)
    return stop_services(lay, grace)


def _killed(lay: boot.Layout, name: str, since: int) -> bool:
    """Whether supervisord had to SIGKILL ``name`` (its log since byte ``since``)."""
    log = lay.logs / "supervisord.log"
    with contextlib.suppress(OSError), log.open("rb") as f:
        f.seek(since)
        return f"killing '{name}'".encode() in f.read()
    return False


def _service_pid(server: object, name: str) -> int | None:
    """The pid supervisord runs ``name`` under (None when it is not running or supervisord cannot say)."""
    try:
        return server.getProcessInfo(name)["pid"] or None  # type: ignore[attr-defined]
    except (xmlrpc.client.Fault, OSError):
        return None


def stop_services(lay: boot.Layout, grace: float, only: set[str] | None = None) -> int:
    """The daemon first, the runs drained, the other services, supervisord, any process left of them,
    then the local Postgres (``only``: those alone, after a failed start). Exit 1 when a process is
    still running after its stop: a caller that restarts would otherwise race it for the ports."""
    state = boot.read_state(lay)
    log = lay.logs / "supervisord.log"
    still_running: list[str] = []
    if supervisord_pid(lay) is not None:
        from supervisor.xmlrpc import Faults  # the serve extra's

        server = rpc(lay).supervisor
        for name in reversed(SERVICES):
            if only is not None and name not in only:
                continue
            since = log.stat().st_size if log.exists() else 0
            if name == "webserver" and only is None:  # runs are drained while the webserver still answers
                try:
                    for note in drain(state["ports"]["webserver"], grace):
                        print(f"  {note}")
                except Exception as e:  # the services are stopped regardless
                    print(f"  could not check in-flight runs: {type(e).__name__}: {e}")
            pid = _service_pid(server, name)
            try:
                server.stopProcess(name, True)
            except xmlrpc.client.Fault as e:
                if e.faultCode != Faults.NOT_RUNNING:  # anything but "stopped already" is said, not taken as stopped
                    print(f"  {name:<12} supervisord could not stop it: {e.faultString}", flush=True)
            if boot.wait_ended([pid], STOP_WAIT_S):
                still_running.append(name)
                print(f"  {name:<12} still running (pid {pid}) {STOP_WAIT_S:.0f} s after its stop", flush=True)
            else:
                print(f"  {name:<12} {'killed after SIGTERM timed out' if _killed(lay, name, since) else 'stopped'}",
                      flush=True)
        if only is None or "supervisord" in only:
            pid = supervisord_pid(lay)
            server.shutdown()
            if boot.wait_ended([pid], STOP_WAIT_S):
                still_running.append("supervisord")
                print(f"  supervisord  still running (pid {pid}) {STOP_WAIT_S:.0f} s after its shutdown", flush=True)
    if only is None or "supervisord" in only:
        for pid in sweep(lay, SERVICES):
            print(f"  ended pid {pid}, left by a service")
    if (only is None or "postgres" in only) and boot.postgres_pid(lay):
        boot.stop_postgres(lay)
        print("  postgres     stopped", flush=True)
    if only is None:
        state.pop("foreground", None)
        boot.write_state(lay, state)
    return 1 if still_running else 0


def stop(args: argparse.Namespace) -> int:
    lay = boot.layout()
    fg = boot.read_state(lay).get("foreground")
    if fg and fg != os.getpid() and boot.alive(fg):
        os.kill(fg, signal.SIGTERM)  # the foreground `make serve` stops everything in order
        if not boot.wait_ended([fg], args.grace + 120):
            print(f"stopped (by the serving process {fg})")
            return 0
    return stop_services(lay, args.grace)


def status(_args: argparse.Namespace) -> int:
    """Postgres and each service as supervisord reports it; exit 1 unless every one runs."""
    lay = boot.layout()
    state = boot.read_state(lay)
    if not state:
        print(f"not serving ({lay.data})")
        return 1
    ports = state.get("ports", {})
    pg = boot.postgres_pid(lay)
    rows = [("postgres", pg, "RUNNING" if pg else "STOPPED")] if not os.environ.get("DAGSTER_PG_HOST") else []
    infos = {p["name"]: p for p in rpc(lay).supervisor.getAllProcessInfo()} if supervisord_pid(lay) else {}
    rows += [(n, infos.get(n, {}).get("pid"), infos.get(n, {}).get("statename", "STOPPED")) for n in SERVICES]
    for name, pid, how in rows:
        print(f"  {name:<12} pid {pid or '-':<8} {how:<8} {ports.get(name, '')}")
    return 0 if all(how == "RUNNING" for _, _, how in rows) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sparseeval.interfaces.serve",
                                 description="The served mode: Postgres, then the MLflow tracking server and the "
                                             "Dagster code server, webserver and daemon under supervisord.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("start", help="start every service that is not running")
    try:
        ports = {name: settings.SETTINGS[f"serve_{name}_port"].value() for name in ("dagster", "mlflow")}
    except settings.SettingError as exc:
        raise boot.ServeError(str(exc)) from None
    st.add_argument("--dagster-port", type=int, default=ports["dagster"],
                    help=settings.overrides("serve_dagster_port"))
    st.add_argument("--mlflow-port", type=int, default=ports["mlflow"],
                    help=settings.overrides("serve_mlflow_port"))
    st.add_argument("--code-port", type=int, default=0, help="code server's gRPC port (0: a free one)")
    st.add_argument("--pg-port", type=int, default=0, help="local Postgres port (0: a free one)")
    st.add_argument("--mlflow-host", default=settings.SETTINGS["serve_mlflow_host"].value(),
                    help="interface MLflow binds; anything but 127.0.0.1 turns on its basic-auth app; "
                         + settings.overrides("serve_mlflow_host"))
    st.add_argument("--detach", action="store_true", help="return once every service answers")
    st.add_argument("--timeout", type=float, default=180, help="seconds each service may take to answer")
    st.add_argument("--grace", type=float, default=60, help="on Ctrl-C: seconds in-flight runs may take")
    sp = sub.add_parser("stop", help="stop every service (daemon first, runs finished or canceled)")
    sp.add_argument("--grace", type=float, default=60, help="seconds in-flight runs may take to finish")
    sub.add_parser("status", help="the services and whether they run")
    la = sub.add_parser("launch", help="(supervisord's programs) become service NAME")
    la.add_argument("name", choices=SERVICES)
    la.add_argument("--data", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "launch":
        launch(args.name, args.data)
    try:
        return {"start": start, "stop": stop, "status": status}[args.cmd](args)
    except KeyboardInterrupt:  # Ctrl-C during start-up: what it had started is stopped already
        print("serve: interrupted", file=sys.stderr)
        return 130
