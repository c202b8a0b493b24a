"""The services under supervisord: its config, its control socket, and the launcher each program runs.

supervisord starts, restarts (a service that dies is started again at once), stops and reports the
four services; ``supervisorctl -c <data>/serve/supervisord.conf status|restart|tail`` work on them
as on any supervisord. Each program runs ``python -m sparseeval.interfaces.serve launch NAME``, which builds
the service's command and environment from the bootstrap (secrets read from their 0600 files, so
neither the config nor any command line holds one), removes what a killed predecessor left behind,
and replaces itself with the service (``exec``: supervisord's pid is the service's).

What a killed predecessor leaves: ``mlflow server`` runs its uvicorn server as a child, which a
SIGKILL of the parent leaves alive and listening, so the restarted server could not bind its port.
Every process a service starts carries a marker in its environment (``SPARSEEVAL_SERVICE``), and
the launcher ends the processes that carry its service's marker before it starts; the code server
is the exception (the runs it launched carry its marker and must outlive it). ``stop`` sweeps every
marker once supervisord is down, so nothing of the services outlives it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
import xmlrpc.client
from pathlib import Path
from typing import Any

from sparseeval.core import settings
from sparseeval.interfaces.serve.bootstrap import (
    LOOPBACK,
    SERVICES,
    Layout,
    ServeError,
    alive,
    commands,
    database,
    executable,
    mlflow_env,
    read_state,
    service_env,
    wait_ended,
)

MARKER = settings.SETTINGS["service"].env
#: services whose leftovers the launcher ends before a restart (the code server's are runs: they stay)
SWEPT_ON_RESTART = ("mlflow", "webserver", "daemon")


def marker(lay: Layout, name: str) -> str:
    return f"{name}@{lay.serve}"


def render_config(lay: Layout) -> str:
    """supervisord.conf: the control socket (0700, in the serve folder), the logs, one program per
    service. Programs do not start with supervisord: :func:`sparseeval.interfaces.serve.cli.start` starts them in
    stages, each waiting for the one before to answer; after that supervisord restarts whichever dies."""
    q = shlex.quote
    out = [
        "; written by `python -m sparseeval.interfaces.serve start` (make serve); holds no secret",
        f"[unix_http_server]\nfile={lay.supervisor_socket}\nchmod=0700\n",
        f"[supervisord]\nlogfile={lay.logs / 'supervisord.log'}\npidfile={lay.serve / 'supervisord.pid'}\n"
        f"childlogdir={lay.logs}\ndirectory={lay.serve}\nnodaemon=false\n",
        "[rpcinterface:supervisor]\nsupervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n",
        f"[supervisorctl]\nserverurl=unix://{lay.supervisor_socket}\n",
    ]
    for priority, name in enumerate(SERVICES, start=1):
        # the code server alone is stopped without its group: the runs it launched are its children
        group = "false" if name == "code_server" else "true"
        out.append(
            f"[program:{name}]\n"
            f"command={q(sys.executable)} -m sparseeval.interfaces.serve launch {name} --data {q(str(lay.data))}\n"
            f"directory={lay.serve}\npriority={priority}\nautostart=false\nautorestart=true\nstartsecs=2\n"
            f"startretries=10\nstopsignal=TERM\nstopwaitsecs=20\nstopasgroup={group}\nkillasgroup={group}\n"
            f"redirect_stderr=true\nstdout_logfile={lay.logs / f'{name}.log'}\nstdout_logfile_maxbytes=20MB\n"
            f"stdout_logfile_backups=2\n")
    return "\n".join(out)


def rpc(lay: Layout) -> Any:
    """supervisord's XML-RPC interface over its unix socket (what supervisorctl talks to)."""
    from supervisor.xmlrpc import SupervisorTransport

    transport = SupervisorTransport(None, None, f"unix://{lay.supervisor_socket}")
    return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)


def supervisord_pid(lay: Layout) -> int | None:
    """The pid of a live supervisord of this data folder, None when none runs."""
    try:
        pid = int((lay.serve / "supervisord.pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if alive(pid) else None


def start_supervisord(lay: Layout, timeout: float = 30) -> int:
    """supervisord, daemonized (its own session: Ctrl-C on ``make serve`` reaches the bootstrap, which
    stops the services in order, not supervisord), answering on its socket; its pid."""
    if len(str(lay.supervisor_socket)) > 100:  # a unix socket path is limited to 107 bytes
        raise ServeError(f"the data folder path is too long for supervisord's socket ({lay.supervisor_socket})")
    lay.logs.mkdir(parents=True, exist_ok=True)
    lay.supervisor_conf.write_text(render_config(lay))
    with (lay.logs / "supervisord.out").open("a") as log:
        started = subprocess.run([executable("supervisord"), "-c", str(lay.supervisor_conf)], stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=lay.serve, timeout=timeout,
                                 check=False)
    if started.returncode:
        raise ServeError(f"supervisord did not start (status {started.returncode}); see {lay.logs / 'supervisord.out'}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if rpc(lay).supervisor.getState()["statename"] == "RUNNING" and (pid := supervisord_pid(lay)):
                return pid
        except (OSError, xmlrpc.client.Fault):
            pass
        time.sleep(0.2)
    raise ServeError(f"supervisord did not answer within {timeout:.0f} s; see {lay.logs / 'supervisord.log'}")


# ------------------------------------------------------------------------------------- the launcher


def _marked(lay: Layout, names: tuple[str, ...]) -> list[int]:
    """Live processes (of this user) whose environment carries the marker of one of ``names``."""
    wanted = {f"{MARKER}={marker(lay, n)}".encode() for n in names}
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if wanted & set(environ.split(b"\0")) and alive(int(proc.name)):
            found.append(int(proc.name))
    return found


def sweep(lay: Layout, names: tuple[str, ...], wait: float = 10.0) -> list[int]:
    """End every process left of ``names`` (SIGTERM, a wait, then SIGKILL); the pids ended."""
    pids = _marked(lay, names)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if not wait_ended(pids, wait):
            break
    return pids


def launch(name: str, data: Path) -> None:
    """What a supervisord program runs: end the leftovers of the service's last process, then become
    the service, with its command and environment from the bootstrap."""
    lay = Layout(data)
    state = read_state(lay)
    ports, mlflow_host = state["ports"], state.get("mlflow_host", LOOPBACK)
    if name in SWEPT_ON_RESTART:  # what a dead service left serves no one: SIGKILL after 2 s, not 10
        for pid in sweep(lay, (name,), wait=2.0):
            print(f"launch {name}: ended pid {pid}, left by the previous {name}", flush=True)
    db = database(lay, ports["postgres"])
    env = mlflow_env(lay, db, ports, mlflow_host) if name == "mlflow" else service_env(lay, db, ports, mlflow_host)
    env[MARKER] = marker(lay, name)
    cmd = commands(lay, ports, mlflow_host)[name]
    # an ignored signal survives exec (a `make serve &` ignores SIGINT), and Dagster maps SIGTERM onto
    # SIGINT's handler: the service would then ignore supervisord's SIGTERM
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.execve(cmd[0], cmd, env)
