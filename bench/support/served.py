"""The served stack's helpers that ``tests/test_serve.py`` and ``bench/serve.py`` share: a process tree and
its listening ports read from /proc, a supervised service SIGKILLed and timed until it is back, the probes
that say a service answers again (the daemons heartbeat, MLflow's health endpoint), and the webserver's runs
by job and partition."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import time
import urllib.request
from pathlib import Path

from sparseeval.interfaces.serve import bootstrap as serve
from sparseeval.interfaces.serve.drain import graphql
from sparseeval.interfaces.serve.supervisor import rpc

DAEMON_HEALTH = """{ instance { daemonHealth { allDaemonStatuses { daemonType lastHeartbeatTime } } } }"""


def process_tree(roots: set[int]) -> set[int]:
    """``roots`` and every live descendant (from /proc): a service's workers, a run's subprocesses."""
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


def back_after_sigkill(lay: serve.Layout, name: str, answers, timeout: float = 120) -> float:
    """SIGKILL the process supervisord runs as ``name``; seconds until supervisord runs a new one, every
    process the killed one had started is gone, and ``answers(killed_at)`` holds."""
    old = rpc(lay).supervisor.getProcessInfo(name)["pid"]
    below = process_tree({old}) - {old}
    os.kill(old, signal.SIGKILL)
    t0, killed_at = time.monotonic(), time.time()
    while time.monotonic() - t0 < timeout:
        pid = rpc(lay).supervisor.getProcessInfo(name)["pid"]
        if pid and pid != old and not any(serve.alive(c) for c in below):
            with contextlib.suppress(Exception):
                if answers(killed_at):
                    return time.monotonic() - t0
        time.sleep(0.1)
    raise AssertionError(f"{name} not back {timeout:.0f} s after a SIGKILL")


def daemon_heartbeats_since(webserver_port: int, killed_at: float) -> bool:
    """Whether the daemons that launch runs (sensors, the run queue) heartbeat after ``killed_at``."""
    statuses = graphql(webserver_port, DAEMON_HEALTH)["instance"]["daemonHealth"]["allDaemonStatuses"]
    beats = {d["daemonType"]: d["lastHeartbeatTime"] or 0 for d in statuses}
    return all(beats.get(d, 0) > killed_at for d in ("SENSOR", "QUEUED_RUN_COORDINATOR"))


def mlflow_answers(host: str, port: int) -> bool:
    with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=1) as r:
        return r.read() == b"OK"


def listening_ports(pids: set[int]) -> dict[int, str]:
    """port -> IPv4 host of every TCP socket in LISTEN state that one of ``pids`` holds (read from
    /proc: the sockets' inodes in the processes' fds, their addresses in /proc/net/tcp{,6})."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    if (target := os.readlink(fd)).startswith("socket:["):
                        inodes.add(target[8:-1])
    out = {}
    for table, width in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            hexhost, hexport = fields[1].split(":")
            raw = bytes.fromhex(hexhost)
            # the kernel prints each 32-bit word in host (little-endian) order
            packed = b"".join(raw[i:i + 4][::-1] for i in range(0, width, 4))
            ip = ipaddress.ip_address(packed)
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:  # gRPC: [::ffff:127.0.0.1]
                ip = ip.ipv4_mapped
            out[int(hexport, 16)] = str(ip)
    return out


def process_line(pid: int) -> str:
    """A live process's state and command line, for a failure message that says what was left."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return f"pid {pid}: gone"
    return f"pid {pid} ({state}): {cmd[:200]}"


def runs_of_job(runs: list[dict], job: str) -> list[dict]:
    """The webserver's runs (GraphQL ``runsOrError`` results) of ``job``."""
    return [r for r in runs if r["jobName"] == job]


def run_partition(run: dict) -> str | None:
    """A webserver run's partition (its ``dagster/partition`` tag), None when unpartitioned."""
    return next((t["value"] for t in run["tags"] if t["key"] == "dagster/partition"), None)
