"""The served mode's own pieces, fast and without the services (``tests/test_serve.py`` runs them all).

* The free-port probe binds as a server does (``SO_REUSEADDR``): a port whose last connection
  waits in TIME_WAIT after a stop is free; a port with a listener is not. (Without it, ``make
  serve`` right after ``make serve-stop`` refused port 5000 for about a minute.)
* The launcher's sweep ends what a killed service left running, found by the marker in its
  environment (the uvicorn child of an ``mlflow server`` killed with SIGKILL kept port 5000), and
  nothing else.
* A stop waits for the process itself to end, not for its pid file to go (``pg_ctl stop -w``
  returned while the postmaster was still exiting, and a check right after ``serve stop`` saw it);
  ``serve stop`` takes only supervisord's NOT_RUNNING as "stopped already".
* The generated supervisord.conf is one a real supervisord runs: ``supervisorctl status`` lists
  the four services, none started by supervisord itself, and the file holds no secret.
"""

from __future__ import annotations

import configparser
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from sparseeval.interfaces.serve import bootstrap as boot
from sparseeval.interfaces.serve.cli import stop_services
from sparseeval.interfaces.serve.supervisor import (
    MARKER,
    SERVICES,
    marker,
    render_config,
    rpc,
    start_supervisord,
    sweep,
)


def _time_wait(port: int) -> bool:
    """Whether a TCP connection on local port ``port`` is in TIME_WAIT (state 06 of /proc/net/tcp)."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return any(int(r[1].split(":")[1], 16) == port and r[3] == "06" for r in rows)


def test_a_port_whose_last_connection_waits_in_time_wait_is_free() -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((boot.LOOPBACK, 0))
    server.listen()
    port = server.getsockname()[1]
    assert not boot.port_free(port)  # a listener: taken
    client = socket.create_connection((boot.LOOPBACK, port))
    conn, _ = server.accept()
    conn.close()  # the server's end closes first: it waits in TIME_WAIT, as after a stopped service
    client.close()
    server.close()
    assert _time_wait(port)
    with pytest.raises(OSError), socket.socket() as plain:  # the old probe: a bind without SO_REUSEADDR
        plain.bind((boot.LOOPBACK, port))
    assert boot.port_free(port)
    assert boot.port_free(boot.free_port())


def test_the_sweep_ends_what_a_killed_service_left_and_nothing_else(tmp_path: Path) -> None:
    lay = boot.Layout(tmp_path / "data")
    # a "service" that starts a child and is SIGKILLed: the child lives on, as mlflow's uvicorn did
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; print(\"up\", flush=True); time.sleep(120)']); "
            "print(p.pid, flush=True); time.sleep(120)")
    env = {**os.environ, MARKER: marker(lay, "mlflow")}
    parent = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             env={**os.environ, MARKER: marker(lay, "code_server")})
    orphan = 0
    try:
        lines = {parent.stdout.readline().strip() for _ in range(2)}  # its pid, and the child's "up" once it runs
        orphan = int((lines - {"up"}).pop())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert boot.alive(orphan)
        assert sweep(lay, ("mlflow",)) == [orphan]
        assert not boot.alive(orphan)
        assert boot.alive(other.pid)  # another service's process (a run under the code server) is left alone
        assert sweep(boot.Layout(tmp_path / "elsewhere"), SERVICES) == []  # another data folder's marker
        assert boot.alive(other.pid)
    finally:
        for proc in (parent, other):
            proc.kill()
            proc.wait()
        if boot.alive(orphan):  # a sweep that missed it
            os.kill(orphan, signal.SIGKILL)


def test_waiting_for_an_end_returns_when_the_process_has_ended_and_names_those_still_running() -> None:
    ending = subprocess.Popen(["sleep", "0.5"])
    staying = subprocess.Popen(["sleep", "30"])
    try:
        began = time.monotonic()
        assert boot.wait_ended([ending.pid, None], timeout=10) == []
        assert 0.4 < time.monotonic() - began < 5  # it waited for the end, and no longer
        assert boot.wait_ended([staying.pid, ending.pid], timeout=0.3) == [staying.pid]
    finally:
        staying.kill()
        for proc in (ending, staying):
            proc.wait()


def test_supervisord_runs_the_generated_config_and_supervisorctl_lists_the_services() -> None:
    root = Path(tempfile.mkdtemp(prefix="sev-sup-", dir="/tmp"))  # a short path: the socket lives under it
    lay = boot.Layout(root / "data")
    password = boot.secret(lay, "pg_password")
    conf = configparser.ConfigParser(interpolation=None)
    conf.read_string(render_config(lay))
    for name in SERVICES:
        program = conf[f"program:{name}"]
        assert program["command"].endswith(f"-m sparseeval.interfaces.serve launch {name} --data {lay.data}")
        assert (program["autostart"], program["autorestart"]) == ("false", "true")
        assert program["stopasgroup"] == ("false" if name == "code_server" else "true")  # runs outlive a restart
    pid = start_supervisord(lay)
    try:
        status = subprocess.run([boot.executable("supervisorctl"), "-c", str(lay.supervisor_conf), "status"],
                                capture_output=True, text=True, timeout=30, check=False).stdout
        assert sorted(line.split()[:2][0] for line in status.splitlines()) == sorted(SERVICES)
        assert all(line.split()[1] == "STOPPED" for line in status.splitlines()), status
        assert password not in lay.supervisor_conf.read_text()
        assert oct(lay.supervisor_socket.stat().st_mode & 0o777) == "0o700"
    finally:
        rpc(lay).supervisor.shutdown()
        boot.wait_ended([pid], 10)
        subprocess.run(["rm", "-rf", str(root)], check=False)
    assert not boot.alive(pid)


def test_stop_takes_not_running_as_stopped_and_returns_once_supervisord_has_exited(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``serve stop`` on a real supervisord whose services were never started: each stop is answered
    NOT_RUNNING, the one fault that means "stopped already"; supervisord has exited when it returns."""
    root = Path(tempfile.mkdtemp(prefix="sev-stop-", dir="/tmp"))
    lay = boot.Layout(root / "data")
    pid = start_supervisord(lay)
    try:
        assert stop_services(lay, 0, only={*SERVICES, "supervisord"}) == 0
        out = capsys.readouterr().out
        assert not boot.alive(pid)  # at once: the stop waited for it
        assert all(f"  {name:<12} stopped" in out for name in SERVICES), out
        assert "could not stop" not in out and "still running" not in out, out
    finally:
        if boot.alive(pid):
            os.kill(pid, signal.SIGKILL)
        subprocess.run(["rm", "-rf", str(root)], check=False)
