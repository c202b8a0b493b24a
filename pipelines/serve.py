"""Served mode (``make serve``): the pipeline as long-lived services instead of one in-process run.

``python -m pipelines.serve start|stop|status`` starts, as separate processes:

* **Postgres**: a local cluster in ``<data>/postgres`` (``initdb``/``pg_ctl`` as the ``postgres``
  user when run as root; TCP on 127.0.0.1 only, its socket in the cluster folder), unless
  ``DAGSTER_PG_HOST`` names an external server. Two databases: ``dagster`` and ``mlflow``.
* **MLflow tracking server** (``mlflow server``): backend store in the ``mlflow`` database,
  artifacts served by the server from ``<data>/mlflow-artifacts``; the pipeline only talks HTTP to it.
* **Dagster code server** (``dagster code-server start -m pipelines.definitions``): loads the
  definitions once; every run is its own process started by it (the default run launcher).
* **dagster-webserver** and **dagster-daemon** on the Postgres instance of
  ``pipelines/dagster_postgres.yaml`` (queued runs, two at once; the default instance's pools).

Why a script rather than a compose file: the same entry point is what the test starts, so the
configuration the docs show is the one that is exercised.

Secrets: the database password is generated into ``<data>/serve/secrets/`` (mode 0600) or read
from ``DAGSTER_PG_PASSWORD`` / ``DAGSTER_PG_PASSWORD_FILE``; it reaches Dagster through the
environment (``{env: DAGSTER_PG_PASSWORD}``) and MLflow through a libpq passfile (``PGPASSFILE``),
never through a command line or a log line. Every service binds 127.0.0.1; ``--mlflow-host``
exposes MLflow only with its basic-auth app; the Dagster webserver has no authentication of its
own and stays on 127.0.0.1 (expose it through the reverse proxy shown in ``docs/deploy.md``).

``start`` starts what is not running (so after a crash it restarts only the dead service) and, in
the foreground, stops everything on Ctrl-C; ``--detach`` returns once every service answers.
``stop`` stops the daemon first (nothing new is launched), lets in-flight runs finish for
``--grace`` seconds, terminates the rest through Dagster (they are recorded as canceled), then
stops the webserver, the code server, MLflow and Postgres: SIGTERM, a wait, then SIGKILL.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparseeval import settings

PG_BIN = Path(os.environ.get("SPARSEEVAL_PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_USER = "sparseeval"  #: the role the services connect as (local cluster)
LOOPBACK = "127.0.0.1"
#: start order; stop goes the other way (daemon first)
SERVICES = ("postgres", "mlflow", "code_server", "webserver", "daemon")
#: after Postgres, the services started together (each stage waits for the one before to answer)
STAGES = (("mlflow", "code_server"), ("webserver", "daemon"))
INSTANCE_YAML = Path(__file__).with_name("dagster_postgres.yaml")


class ServeError(SystemExit):
    """A one-line refusal (exit status 2) naming what is wrong."""

    def __init__(self, message: str) -> None:
        super().__init__(f"serve: {message}")


@dataclass(frozen=True)
class Layout:
    """Where the served mode keeps its files, all under the data folder."""

    data: Path

    @property
    def serve(self) -> Path:
        return self.data / "serve"

    @property
    def postgres(self) -> Path:
        return self.data / "postgres"

    @property
    def cluster(self) -> Path:
        return self.postgres / "cluster"

    @property
    def socket_dir(self) -> Path:
        return self.postgres / "socket"

    @property
    def secrets(self) -> Path:
        return self.serve / "secrets"

    @property
    def logs(self) -> Path:
        return self.serve / "logs"

    @property
    def dagster_home(self) -> Path:
        return self.serve / "dagster_home"

    @property
    def workspace(self) -> Path:
        return self.serve / "workspace.yaml"

    @property
    def state(self) -> Path:
        return self.serve / "state.json"

    @property
    def artifacts(self) -> Path:
        return self.data / "mlflow-artifacts"


def layout() -> Layout:
    return Layout(settings.data_dir().resolve())


# --------------------------------------------------------------------------------------------- state


def read_state(lay: Layout) -> dict[str, Any]:
    try:
        return json.loads(lay.state.read_text())
    except FileNotFoundError:
        return {"services": {}}


def write_state(lay: Layout, state: dict[str, Any]) -> None:
    lay.serve.mkdir(parents=True, exist_ok=True)
    tmp = lay.state.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(lay.state)


def alive(pid: int | None) -> bool:
    """A live (not zombie) process. A killed child of a detached start may linger as a zombie when
    nothing reaps it, so ``kill(pid, 0)`` alone would call it alive."""
    if not pid:
        return False
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return fields[0] not in ("Z", "X")


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


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


# ------------------------------------------------------------------------------------------- secrets


def _write_private(path: Path, text: str) -> None:
    """A file only its owner reads (0600 from the first byte: created with that mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def _read_private(path: Path) -> str:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ServeError(f"{path} is readable by others (mode {mode:04o}); chmod 600 it")
    return path.read_text().strip()


def _secret(lay: Layout, name: str) -> str:
    """A random secret generated once into ``<data>/serve/secrets/<name>`` (0600), then reused."""
    path = lay.secrets / name
    if not path.exists():
        _write_private(path, secrets.token_urlsafe(24))
    return _read_private(path)


@dataclass(frozen=True)
class Database:
    """How the services reach Postgres (the password is kept out of ``repr``)."""

    host: str
    port: int
    user: str
    dagster_db: str
    mlflow_uri: str  #: without a password (the passfile carries it) unless the user's own URI has one
    password: str
    local: bool

    def __repr__(self) -> str:
        return f"Database(host={self.host!r}, port={self.port}, user={self.user!r}, local={self.local})"


def _pgpass_line(db: Database) -> str:
    esc = db.password.replace("\\", "\\\\").replace(":", "\\:")
    return f"*:*:*:{db.user}:{esc}\n"


def database(lay: Layout, pg_port: int) -> Database:
    """The local cluster's connection (password generated once), or the external server's."""
    env = os.environ
    if env.get("DAGSTER_PG_HOST"):
        password = env.get("DAGSTER_PG_PASSWORD") or ""
        if not password and env.get("DAGSTER_PG_PASSWORD_FILE"):
            password = _read_private(Path(env["DAGSTER_PG_PASSWORD_FILE"]))
        if not password:
            raise ServeError("DAGSTER_PG_HOST is set but neither DAGSTER_PG_PASSWORD nor DAGSTER_PG_PASSWORD_FILE")
        host, port = env["DAGSTER_PG_HOST"], int(env.get("DAGSTER_PG_PORT") or 5432)
        user = env.get("DAGSTER_PG_USER") or "dagster"
        mlflow = env.get("MLFLOW_BACKEND_STORE_URI") or f"postgresql+psycopg2://{user}@{host}:{port}/mlflow"
        return Database(host, port, user, env.get("DAGSTER_PG_DB") or "dagster", mlflow, password, local=False)
    password = _secret(lay, "pg_password")
    mlflow = env.get("MLFLOW_BACKEND_STORE_URI") or f"postgresql+psycopg2://{PG_USER}@{LOOPBACK}:{pg_port}/mlflow"
    return Database(LOOPBACK, pg_port, PG_USER, "dagster", mlflow, password, local=True)


# ------------------------------------------------------------------------------------ instance config


#: the sections of dagster.yaml that name a class whose own schema checks their ``config``
CLASS_SECTIONS = ("run_launcher", "run_coordinator", "run_storage", "event_log_storage", "schedule_storage",
                  "scheduler", "compute_logs", "local_artifact_storage", "secrets")


def validate_instance_config(config: dict[str, Any], where: str) -> None:
    """``config`` (a parsed ``dagster.yaml``) against Dagster's own instance schema, and each named
    class's ``config`` against that class's schema, without building anything (a Postgres storage or
    a Kubernetes launcher would connect on construction). ``{env: X}`` values are checked as such,
    not resolved. Raises ``ValueError`` naming ``where`` and the errors."""
    import importlib

    from dagster._config import validate_config
    from dagster._core.errors import DagsterInvalidConfigError
    from dagster._core.instance.config import dagster_instance_config_schema, validate_concurrency_config
    from dagster._serdes.config_class import ConfigurableClassData

    def fail(what: str, errors: list) -> None:
        raise ValueError(f"{where}: {what}: " + "; ".join(e.message for e in errors))

    result = validate_config(dagster_instance_config_schema(), config)
    if not result.success:
        fail("not a Dagster instance config", list(result.errors))
    if "concurrency" in config:
        try:
            validate_concurrency_config(config)
        except DagsterInvalidConfigError as exc:
            raise ValueError(f"{where}: {exc}") from None
    for section in CLASS_SECTIONS:
        if section not in config or not isinstance(config[section], dict) or "class" not in config[section]:
            continue
        spec = config[section]
        module = ConfigurableClassData(spec["module"], spec["class"], "").module_name  # dagster.core -> _core
        try:
            klass = getattr(importlib.import_module(module), spec["class"])
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"{where}: {section}: cannot load {spec['module']}.{spec['class']} ({exc})") from None
        if hasattr(klass, "config_type"):
            result = validate_config(klass.config_type() or {}, spec.get("config", {}))
            if not result.success:
                fail(f"{section} ({spec['class']})", list(result.errors))


# ------------------------------------------------------------------------------------ local postgres


def _as_postgres(cmd: list[str]) -> list[str]:
    """Postgres refuses to run as root: as root, run its tools as the ``postgres`` user."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def _check_reachable(path: Path) -> None:
    """As root, every folder above the cluster must let the postgres user through (o+x)."""
    if os.geteuid() != 0:
        return
    for parent in path.parents:
        if not stat.S_IMODE(parent.stat().st_mode) & 0o001:
            raise ServeError(f"the postgres user cannot reach {path}: {parent} has no search permission for "
                             f"others (chmod o+x {parent}, or set SPARSEEVAL_DATA_DIR elsewhere)")


def _chown_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")
    os.chmod(path, 0o700)


def _run(cmd: list[str], log: Path, *, stdin: str | None = None, what: str) -> None:
    with log.open("a") as out:
        proc = subprocess.run(cmd, input=stdin, text=True, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode:
        raise ServeError(f"{what} failed (exit {proc.returncode}); see {log}")


def start_postgres(lay: Layout, db: Database) -> int:
    """Create the cluster on first use, start it; returns the postmaster's pid."""
    lay.logs.mkdir(parents=True, exist_ok=True)
    log = lay.logs / "postgres.log"
    if len(str(lay.socket_dir)) > 90:  # a unix socket path is limited to 107 bytes
        raise ServeError(f"the data folder path is too long for a Postgres socket ({lay.socket_dir})")
    fresh = not (lay.cluster / "PG_VERSION").exists()
    if fresh:
        _check_reachable(lay.postgres)
        for d in (lay.postgres, lay.cluster, lay.socket_dir):
            d.mkdir(parents=True, exist_ok=True)
            _chown_postgres(d)
        if os.geteuid() == 0:
            os.chmod(lay.postgres, 0o711)  # root reads the postmaster pid inside
        _run(_as_postgres([str(PG_BIN / "initdb"), "-D", str(lay.cluster), "-U", "postgres", "-E", "UTF8",
                           "--auth-local=peer", "--auth-host=scram-sha-256", "--no-instructions"]),
             log, what="initdb")
    opts = f"-p {db.port} -c listen_addresses={LOOPBACK} -c unix_socket_directories={lay.socket_dir}"
    if os.geteuid() == 0:
        shutil.chown(log, "postgres", "postgres")
    _run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(lay.cluster), "-l", str(log), "-o", opts, "-w", "-t", "60",
                       "start"]), log, what="pg_ctl start")
    if fresh:
        # the password travels on stdin (never argv); log_statement is off, so it is not logged
        sql = (f"CREATE ROLE {PG_USER} LOGIN PASSWORD '{db.password}';\n"
               f"CREATE DATABASE dagster OWNER {PG_USER};\nCREATE DATABASE mlflow OWNER {PG_USER};\n")
        _run(_as_postgres([str(PG_BIN / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(lay.socket_dir),
                           "-p", str(db.port), "-d", "postgres", "-U", "postgres"]), log, stdin=sql,
             what="creating the sparseeval role and databases")
    return int((lay.cluster / "postmaster.pid").read_text().split()[0])


def stop_postgres(lay: Layout) -> None:
    if (lay.cluster / "postmaster.pid").exists():
        _run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(lay.cluster), "-m", "fast", "-w", "-t", "60", "stop"]),
             lay.logs / "postgres.log", what="pg_ctl stop")


# ------------------------------------------------------------------------------------------ services


def client_host(bind: str) -> str:
    """The address a local client reaches a service bound to ``bind`` at (all interfaces: loopback)."""
    return LOOPBACK if bind in ("0.0.0.0", "::", "") else bind


def service_env(lay: Layout, db: Database, ports: dict[str, int], mlflow_host: str = LOOPBACK) -> dict[str, str]:
    """Environment of the Dagster processes (and the runs they start)."""
    env = dict(os.environ)
    env.update({
        "DAGSTER_HOME": str(lay.dagster_home),
        "SPARSEEVAL_DATA_DIR": str(lay.data),
        "MLFLOW_TRACKING_URI": f"http://{client_host(mlflow_host)}:{ports['mlflow']}",
        "DAGSTER_PG_HOST": db.host, "DAGSTER_PG_PORT": str(db.port), "DAGSTER_PG_USER": db.user,
        "DAGSTER_PG_DB": db.dagster_db, "DAGSTER_PG_PASSWORD": db.password,
        "PGPASSFILE": str(lay.secrets / "pgpass"),
        "PYTHONUNBUFFERED": "1",
    })
    env.pop("DAGSTER_PG_PASSWORD_FILE", None)
    if os.environ.get("MLFLOW_AUTH_ADMIN_PASSWORD"):  # an exposed MLflow: the pipeline logs in too
        env.setdefault("MLFLOW_TRACKING_USERNAME", os.environ.get("MLFLOW_AUTH_ADMIN_USERNAME", "admin"))
        env.setdefault("MLFLOW_TRACKING_PASSWORD", os.environ["MLFLOW_AUTH_ADMIN_PASSWORD"])
    return env


def _bin(name: str) -> str:
    """An executable of this interpreter's environment (the venv's ``dagster``, ``mlflow``)."""
    return str(Path(sys.executable).with_name(name))


def _default_signals() -> None:
    """In the child before exec: SIGINT and SIGTERM back to their defaults. A parent started in the
    background (``nohup``, ``make serve &``) ignores SIGINT, an ignored signal survives exec, and
    Dagster maps SIGTERM onto SIGINT's handler: its code server would then ignore SIGTERM too and
    only die to SIGKILL at stop."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _spawn(lay: Layout, name: str, cmd: list[str], env: dict[str, str]) -> int:
    """A service in its own session (Ctrl-C reaches only the supervisor, which stops it in order)."""
    lay.logs.mkdir(parents=True, exist_ok=True)
    with (lay.logs / f"{name}.log").open("a") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=str(lay.serve), start_new_session=True, preexec_fn=_default_signals)
    return proc.pid


def commands(lay: Layout, ports: dict[str, int], mlflow_host: str) -> dict[str, list[str]]:
    mlflow = [_bin("mlflow"), "server", "--host", mlflow_host, "--port", str(ports["mlflow"]), "--workers", "1",
              "--serve-artifacts", "--artifacts-destination", lay.artifacts.as_uri()]
    if mlflow_host != LOOPBACK:
        mlflow += ["--app-name", "basic-auth"]
        if mlflow_host != client_host(mlflow_host) or os.environ.get("MLFLOW_SERVER_ALLOWED_HOSTS"):
            pass  # all interfaces: MLflow's defaults (loopback, private networks) or the user's list
        else:  # its Host-header check allows loopback names only by default
            mlflow += ["--allowed-hosts", f"{mlflow_host},{mlflow_host}:*,localhost,localhost:*,127.0.0.1,127.0.0.1:*"]
    return {
        "mlflow": mlflow,
        "code_server": [_bin("dagster"), "code-server", "start", "-m", "pipelines.definitions", "-h", LOOPBACK,
                        "-p", str(ports["code_server"]), "--location-name", "sparseeval"],
        "webserver": [_bin("dagster-webserver"), "-w", str(lay.workspace), "-h", LOOPBACK,
                      "-p", str(ports["webserver"])],
        "daemon": [_bin("dagster-daemon"), "run", "-w", str(lay.workspace)],
    }


def _get(url: str, timeout: float = 2.0, data: bytes | None = None) -> bytes:
    headers = {"Content-Type": "application/json"} if data else {}
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=timeout) as r:
        return r.read()


def graphql(port: int, query: str, variables: dict | None = None, timeout: float = 10.0) -> dict:
    """One query against the Dagster webserver's GraphQL API."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    out = json.loads(_get(f"http://{LOOPBACK}:{port}/graphql", timeout=timeout, data=body))
    if out.get("errors"):
        raise RuntimeError(f"GraphQL errors: {out['errors']}")
    return out["data"]


LOCATION_QUERY = """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""


def _wait(what: str, check, pid: int, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            raise ServeError(f"{what} exited during start-up; see {log}")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.5)
    raise ServeError(f"{what} did not answer within {timeout:.0f} s; see {log}")


def _webserver_ready(port: int) -> bool:
    entries = graphql(port, LOCATION_QUERY)["workspaceOrError"]["locationEntries"]
    if entries and entries[0]["loadStatus"] == "LOADED":
        if entries[0]["locationOrLoadError"]["__typename"] == "PythonError":
            raise ServeError(f"the code location failed to load: {entries[0]['locationOrLoadError']['message']}")
        return True
    return False


def _tcp_open(port: int) -> bool:
    with socket.create_connection((LOOPBACK, port), timeout=1):
        return True


def prepare(lay: Layout, db: Database, ports: dict[str, int], mlflow_host: str) -> None:
    """The instance config, the workspace (the code server's address), the passfile, the auth config."""
    lay.dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(INSTANCE_YAML, lay.dagster_home / "dagster.yaml")
    lay.workspace.write_text("load_from:\n  - grpc_server:\n"
                             f"      host: {LOOPBACK}\n      port: {ports['code_server']}\n"
                             "      location_name: sparseeval\n")
    _write_private(lay.secrets / "pgpass", _pgpass_line(db))
    lay.artifacts.mkdir(parents=True, exist_ok=True)
    if mlflow_host != LOOPBACK:
        if not os.environ.get("MLFLOW_AUTH_ADMIN_PASSWORD"):
            raise ServeError(f"--mlflow-host {mlflow_host} exposes MLflow: set MLFLOW_AUTH_ADMIN_PASSWORD "
                             "(its basic-auth app's admin password)")
        _write_private(lay.secrets / "mlflow_auth.ini",
                       "[mlflow]\ndefault_permission = NO_PERMISSIONS\n"
                       f"database_uri = sqlite:///{lay.serve / 'mlflow_auth.db'}\n"
                       f"admin_username = {os.environ.get('MLFLOW_AUTH_ADMIN_USERNAME', 'admin')}\n"
                       "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")


def start_or_undo(args: argparse.Namespace) -> int:
    """:func:`start`; when start-up fails or is interrupted (Ctrl-C), the services this call began
    are stopped again, so a failed ``make serve`` leaves no Postgres or MLflow behind."""
    lay = layout()
    before = {n for n, s in read_state(lay).get("services", {}).items() if alive(s.get("pid"))}
    try:
        return start(args)
    except (ServeError, KeyboardInterrupt):
        began = set(read_state(lay).get("services", {})) - before
        if began:
            print(f"serve: start-up did not finish; stopping {', '.join(sorted(began))}", file=sys.stderr, flush=True)
            stop_services(lay, 0, only=began)
        raise


def start(args: argparse.Namespace) -> int:
    lay = layout()
    lay.serve.mkdir(parents=True, exist_ok=True)
    state = read_state(lay)
    running = {n: s for n, s in state.get("services", {}).items() if alive(s.get("pid"))}
    if "supervisor" in state and alive(state["supervisor"]) and state["supervisor"] != os.getpid() \
            and not args.detach:
        raise ServeError(f"already served by process {state['supervisor']} (make serve-stop first)")
    old = state.get("ports", {})
    ports = {}
    for name, wanted in (("postgres", args.pg_port), ("mlflow", args.mlflow_port), ("code_server", args.code_port),
                         ("webserver", args.dagster_port)):
        if name in running:  # a live service keeps its port
            ports[name] = old[name]
        elif wanted:
            if not port_free(wanted):
                raise ServeError(f"port {wanted} for {name} is in use (pass another, or 0 for a free one)")
            ports[name] = wanted
        else:
            ports[name] = old[name] if old.get(name) and port_free(old[name]) else free_port()
    mlflow_host = running.get("mlflow", {}).get("host") or args.mlflow_host
    db = database(lay, ports["postgres"])
    prepare(lay, db, ports, mlflow_host)
    env = service_env(lay, db, ports, mlflow_host)
    state.update({"ports": ports, "services": running, "data": str(lay.data)})
    if not args.detach:
        state["supervisor"] = os.getpid()
    write_state(lay, state)
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    if db.local and "postgres" not in running:
        running["postgres"] = {"pid": start_postgres(lay, db), "port": ports["postgres"], "host": LOOPBACK}
        timings["postgres"] = time.monotonic() - t0
        write_state(lay, state)
    cmds = commands(lay, ports, mlflow_host)
    mlflow_env = {k: v for k, v in env.items() if k not in ("DAGSTER_PG_PASSWORD", "MLFLOW_TRACKING_URI")}
    mlflow_env.update({"MLFLOW_BACKEND_STORE_URI": db.mlflow_uri, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    if mlflow_host != LOOPBACK:
        mlflow_env["MLFLOW_AUTH_CONFIG_PATH"] = str(lay.secrets / "mlflow_auth.ini")
        mlflow_env["MLFLOW_FLASK_SERVER_SECRET_KEY"] = _secret(lay, "mlflow_flask_key")  # its CSRF key
    checks = {
        "mlflow": lambda: _get(f"http://{client_host(mlflow_host)}:{ports['mlflow']}/health") == b"OK",
        "code_server": lambda: _tcp_open(ports["code_server"]),
        "webserver": lambda: _webserver_ready(ports["webserver"]),
        "daemon": lambda: True,
    }
    # MLflow and the code server start side by side (neither needs the other to come up), then the
    # webserver and the daemon (both load the workspace from the code server)
    for stage in STAGES:
        spawned = {}
        for name in stage:
            if name not in running:
                spawned[name] = time.monotonic()
                pid = _spawn(lay, name, cmds[name], mlflow_env if name == "mlflow" else env)
                running[name] = {"pid": pid, "port": ports.get(name),
                                 "host": mlflow_host if name == "mlflow" else LOOPBACK}
                write_state(lay, state)
        for name, t1 in spawned.items():
            _wait(name, checks[name], running[name]["pid"], lay.logs / f"{name}.log", args.timeout)
            timings[name] = time.monotonic() - t1
    state["started_s"] = {**state.get("started_s", {}), **{k: round(v, 2) for k, v in timings.items()}}
    write_state(lay, state)
    print(f"served in {time.monotonic() - t0:.1f} s (data: {lay.data})")
    print(f"  Dagster UI : http://{LOOPBACK}:{ports['webserver']}")
    print(f"  MLflow UI  : http://{mlflow_host}:{ports['mlflow']}")
    print(f"  Postgres   : {db.host}:{db.port} (databases {db.dagster_db}, mlflow)  logs: {lay.logs}")
    if args.detach:
        return 0
    print("Ctrl-C (or make serve-stop) stops every service.", flush=True)
    return supervise(lay, args)


def supervise(lay: Layout, args: argparse.Namespace) -> int:
    stopping = {"now": False}

    def on_signal(signum: int, _frame: object) -> None:
        stopping["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    reported: set[str] = set()
    while not stopping["now"]:
        time.sleep(1)
        for name, svc in read_state(lay).get("services", {}).items():
            if name not in reported and not alive(svc.get("pid")):
                reported.add(name)
                print(f"serve: {name} (pid {svc.get('pid')}) is not running; `make serve` again restarts it",
                      flush=True)
    print("stopping ...", flush=True)
    return stop_services(lay, args.grace)


# ---------------------------------------------------------------------------------------------- stop


def _terminate(pid: int, wait: float = 20.0) -> str:
    """SIGTERM to the service's process group, a wait, then SIGKILL; how it ended."""
    if not alive(pid):
        return "not running"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not alive(pid):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return "stopped"
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return "killed after SIGTERM timed out"


def _finish_runs(lay: Layout, grace: float) -> list[str]:
    """In-flight runs: wait up to ``grace`` seconds, then terminate the rest through the launcher
    (recorded as canceled, never left as 'started' with no process behind them)."""
    import dagster as dg

    ports = read_state(lay).get("ports", {})
    db = database(lay, ports.get("postgres", 0))
    os.environ.update({k: v for k, v in service_env(lay, db, ports).items() if k.startswith(("DAGSTER_", "PG"))})
    notes = []
    in_flight = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
    with dg.DagsterInstance.get() as instance:
        deadline = time.monotonic() + grace
        while (runs := instance.get_runs(dg.RunsFilter(statuses=in_flight))) and time.monotonic() < deadline:
            time.sleep(1)
        for run in runs:
            ok = instance.run_launcher.terminate(run.run_id)
            notes.append(f"run {run.run_id[:8]} ({run.job_name}) {'terminated' if ok else 'could not be terminated'}")
        deadline = time.monotonic() + 30
        while instance.get_runs(dg.RunsFilter(statuses=in_flight)) and time.monotonic() < deadline:
            time.sleep(1)
    return notes


def stop_services(lay: Layout, grace: float, only: set[str] | None = None) -> int:
    """Stop the services (``only``: those alone), the daemon first and Postgres last."""
    state = read_state(lay)
    services = state.get("services", {})
    for name in reversed(SERVICES):
        svc = services.get(name)
        if not svc or (only is not None and name not in only):
            continue
        if name == "code_server" and alive(svc["pid"]):  # runs live under the code server
            try:
                for note in _finish_runs(lay, grace):
                    print(f"  {note}")
            except Exception as e:  # the services below are stopped regardless
                print(f"  could not check in-flight runs: {type(e).__name__}: {e}")
        if name == "postgres":
            stop_postgres(lay)
            how = "stopped"
        else:
            how = _terminate(svc["pid"])
        print(f"  {name:<12} {how}", flush=True)
        services.pop(name)
        write_state(lay, state)
    if only is None:
        state.pop("supervisor", None)
    write_state(lay, state)
    return 0


def stop(args: argparse.Namespace) -> int:
    lay = layout()
    state = read_state(lay)
    sup = state.get("supervisor")
    if sup and sup != os.getpid() and alive(sup):
        os.kill(sup, signal.SIGTERM)  # the foreground `make serve` stops everything in order
        deadline = time.monotonic() + args.grace + 120
        while alive(sup) and time.monotonic() < deadline:
            time.sleep(0.5)
        if not alive(sup):
            print(f"stopped (by the serving process {sup})")
            return 0
    return stop_services(lay, args.grace)


def status(_args: argparse.Namespace) -> int:
    lay = layout()
    state = read_state(lay)
    if not state.get("services"):
        print(f"not serving ({lay.data})")
        return 1
    for name in SERVICES:
        svc = state["services"].get(name)
        if svc:
            where = f"{svc.get('host')}:{svc.get('port')}" if svc.get("port") else ""
            print(f"  {name:<12} pid {svc['pid']:<8} {'running' if alive(svc['pid']) else 'DEAD':<8} {where}")
    return 0 if all(alive(s["pid"]) for s in state["services"].values()) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.serve", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("start", help="start every service that is not running")
    env = os.environ.get
    st.add_argument("--dagster-port", type=int, default=int(env("SPARSEEVAL_SERVE_DAGSTER_PORT") or 3000))
    st.add_argument("--mlflow-port", type=int, default=int(env("SPARSEEVAL_SERVE_MLFLOW_PORT") or 5000))
    st.add_argument("--code-port", type=int, default=0, help="code server's gRPC port (0: a free one)")
    st.add_argument("--pg-port", type=int, default=0, help="local Postgres port (0: a free one)")
    st.add_argument("--mlflow-host", default=env("SPARSEEVAL_SERVE_MLFLOW_HOST") or LOOPBACK,
                    help="interface MLflow binds; anything but 127.0.0.1 turns on its basic-auth app")
    st.add_argument("--detach", action="store_true", help="return once every service answers")
    st.add_argument("--timeout", type=float, default=180, help="seconds each service may take to answer")
    st.add_argument("--grace", type=float, default=60, help="on Ctrl-C: seconds in-flight runs may take")
    sp = sub.add_parser("stop", help="stop every service (daemon first, runs finished or canceled)")
    sp.add_argument("--grace", type=float, default=60, help="seconds in-flight runs may take to finish")
    sub.add_parser("status", help="the services and whether they run")
    args = ap.parse_args(argv)
    return {"start": start_or_undo, "stop": stop, "status": status}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
