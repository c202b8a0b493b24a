"""What only this project knows about its services: where their files live, the Postgres cluster,
its role and databases, the secrets, the instance config and each service's command and environment.

Everything here runs before supervisord starts a service (and again in :mod:`.launch`, each time it
starts one); nothing here keeps a process alive.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparseeval.core import settings

PG_USER = "sparseeval"  #: the role the services connect as (local cluster)
LOOPBACK = "127.0.0.1"
#: the services supervisord runs, in start order (stop goes the other way: the daemon first)
SERVICES = ("mlflow", "code_server", "webserver", "daemon")
INSTANCE_YAML = Path(__file__).with_name("dagster_postgres.yaml")


def pg_bin() -> Path:
    """The PostgreSQL binaries' folder (``$SPARSEEVAL_PG_BIN``), read when used."""
    return Path(settings.SETTINGS["pg_bin"].value())


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
    def supervisor_conf(self) -> Path:
        return self.serve / "supervisord.conf"

    @property
    def supervisor_socket(self) -> Path:
        return self.serve / "supervisor.sock"

    @property
    def artifacts(self) -> Path:
        return self.data / "mlflow-artifacts"


def layout() -> Layout:
    return Layout(settings.data_dir().resolve())


def read_state(lay: Layout) -> dict[str, Any]:
    """What a start chose (ports, MLflow's interface) and who serves; empty before the first start."""
    try:
        return json.loads(lay.state.read_text())
    except FileNotFoundError:
        return {}


def write_state(lay: Layout, state: dict[str, Any]) -> None:
    lay.serve.mkdir(parents=True, exist_ok=True)
    tmp = lay.state.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(lay.state)


def alive(pid: int | None) -> bool:
    """A live (not zombie) process: a killed child nothing has reaped yet is not alive."""
    if not pid:
        return False
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return fields[0] not in ("Z", "X")


def wait_ended(pids: list[int | None], timeout: float) -> list[int]:
    """Wait until every one of ``pids`` has ended; those still alive after ``timeout`` seconds.

    Why: a stop that returns is read as "nothing is left" (a restart binds the same ports and files).
    ``pg_ctl stop -w`` returns once the postmaster has removed its pid file, a moment *before* the process
    has exited; on a loaded machine that moment was long enough for a check right after ``stop`` to see it."""
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if p and alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _bound(port: int, host: str) -> socket.socket:
    """A socket bound to ``host:port`` as a server binds it: with ``SO_REUSEADDR``, so connections of a
    stopped server still in TIME_WAIT do not count as a listener (every server we start sets it too)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
    except OSError:
        s.close()
        raise
    return s


def free_port(host: str = LOOPBACK) -> int:
    with _bound(0, host) as s:
        return s.getsockname()[1]


def port_free(port: int, host: str = LOOPBACK) -> bool:
    """No listener on ``port`` (connections left in TIME_WAIT by a stopped server do not count)."""
    try:
        _bound(port, host).close()
    except OSError:
        return False
    return True


# ------------------------------------------------------------------------------------------- secrets


def write_private(path: Path, text: str) -> None:
    """A file only its owner reads (0600 from the first byte: created with that mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def read_private(path: Path) -> str:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ServeError(f"{path} is readable by others (mode {mode:04o}); chmod 600 it")
    return path.read_text().strip()


def secret(lay: Layout, name: str) -> str:
    """A random secret generated once into ``<data>/serve/secrets/<name>`` (0600), then reused."""
    path = lay.secrets / name
    if not path.exists():
        write_private(path, secrets.token_urlsafe(24))
    return read_private(path)


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


def database(lay: Layout, pg_port: int) -> Database:
    """The local cluster's connection (password generated once), or the external server's
    (``DAGSTER_PG_HOST`` set: its password from ``DAGSTER_PG_PASSWORD`` or a 0600 ``DAGSTER_PG_PASSWORD_FILE``)."""
    env = os.environ
    if env.get("DAGSTER_PG_HOST"):
        password = env.get("DAGSTER_PG_PASSWORD") or ""
        if not password and env.get("DAGSTER_PG_PASSWORD_FILE"):
            password = read_private(Path(env["DAGSTER_PG_PASSWORD_FILE"]))
        if not password:
            raise ServeError("DAGSTER_PG_HOST is set but neither DAGSTER_PG_PASSWORD nor DAGSTER_PG_PASSWORD_FILE")
        host, user = env["DAGSTER_PG_HOST"], settings.foreign("DAGSTER_PG_USER")
        try:
            port = int(settings.foreign("DAGSTER_PG_PORT"))
        except ValueError:
            raise ServeError(f"DAGSTER_PG_PORT must be a port number, got {env['DAGSTER_PG_PORT']!r}") from None
        mlflow = env.get("MLFLOW_BACKEND_STORE_URI") or f"postgresql+psycopg2://{user}@{host}:{port}/mlflow"
        return Database(host, port, user, settings.foreign("DAGSTER_PG_DB"), mlflow, password, local=False)
    password = secret(lay, "pg_password")
    mlflow = env.get("MLFLOW_BACKEND_STORE_URI") or f"postgresql+psycopg2://{PG_USER}@{LOOPBACK}:{pg_port}/mlflow"
    return Database(LOOPBACK, pg_port, PG_USER, "dagster", mlflow, password, local=True)


# ------------------------------------------------------------------------------------ local postgres


def as_postgres(cmd: list[str]) -> list[str]:
    """Postgres refuses to run as root: as root, run its tools as the ``postgres`` user."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def chown_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")
    os.chmod(path, 0o700)


def _check_reachable(path: Path) -> None:
    """As root, every folder above the cluster must let the postgres user through (o+x)."""
    if os.geteuid() != 0:
        return
    for parent in path.parents:
        if not stat.S_IMODE(parent.stat().st_mode) & 0o001:
            raise ServeError(f"the postgres user cannot reach {path}: {parent} has no search permission for "
                             f"others (chmod o+x {parent}, or set SPARSEEVAL_DATA_DIR elsewhere)")


def _run(cmd: list[str], log: Path, *, stdin: str | None = None, what: str) -> None:
    with log.open("a") as out:
        proc = subprocess.run(cmd, input=stdin, text=True, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode:
        raise ServeError(f"{what} failed (exit {proc.returncode}); see {log}")


def start_postgres(lay: Layout, db: Database) -> int:
    """Create the cluster, its role and its two databases on first use, start it; the postmaster's pid."""
    lay.logs.mkdir(parents=True, exist_ok=True)
    log = lay.logs / "postgres.log"
    if len(str(lay.socket_dir)) > 90:  # a unix socket path is limited to 107 bytes
        raise ServeError(f"the data folder path is too long for a Postgres socket ({lay.socket_dir})")
    fresh = not (lay.cluster / "PG_VERSION").exists()
    if fresh:
        _check_reachable(lay.postgres)
        for d in (lay.postgres, lay.cluster, lay.socket_dir):
            d.mkdir(parents=True, exist_ok=True)
            chown_postgres(d)
        if os.geteuid() == 0:
            os.chmod(lay.postgres, 0o711)  # root reads the postmaster pid inside
        _run(as_postgres([str(pg_bin() / "initdb"), "-D", str(lay.cluster), "-U", "postgres", "-E", "UTF8",
                          "--auth-local=peer", "--auth-host=scram-sha-256", "--no-instructions"]),
             log, what="initdb")
    opts = f"-p {db.port} -c listen_addresses={LOOPBACK} -c unix_socket_directories={lay.socket_dir}"
    if os.geteuid() == 0:
        shutil.chown(log, "postgres", "postgres")
    _run(as_postgres([str(pg_bin() / "pg_ctl"), "-D", str(lay.cluster), "-l", str(log), "-o", opts, "-w", "-t", "60",
                      "start"]), log, what="pg_ctl start")
    if fresh:
        # the password travels on stdin (never argv); log_statement is off, so it is not logged
        sql = (f"CREATE ROLE {PG_USER} LOGIN PASSWORD '{db.password}';\n"
               f"CREATE DATABASE dagster OWNER {PG_USER};\nCREATE DATABASE mlflow OWNER {PG_USER};\n")
        _run(as_postgres([str(pg_bin() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(lay.socket_dir),
                          "-p", str(db.port), "-d", "postgres", "-U", "postgres"]), log, stdin=sql,
             what="creating the sparseeval role and databases")
    return postgres_pid(lay) or 0


def postgres_pid(lay: Layout) -> int | None:
    """The running postmaster's pid (None when the cluster is not running)."""
    try:
        pid = int((lay.cluster / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None
    return pid if alive(pid) else None


def stop_postgres(lay: Layout) -> None:
    """Stop the local cluster and return only once its postmaster has exited (not when the pid file goes)."""
    pid = postgres_pid(lay)
    if (lay.cluster / "postmaster.pid").exists():
        _run(as_postgres([str(pg_bin() / "pg_ctl"), "-D", str(lay.cluster), "-m", "fast", "-w", "-t", "60", "stop"]),
             lay.logs / "postgres.log", what="pg_ctl stop")
    if wait_ended([pid], 30):
        raise ServeError(f"the postmaster (pid {pid}) is still running 30 s after pg_ctl stop; see {lay.logs}")


# ------------------------------------------------------------------------------ the services' config


def client_host(bind: str) -> str:
    """The address a local client reaches a service bound to ``bind`` at (all interfaces: loopback)."""
    return LOOPBACK if bind in ("0.0.0.0", "::", "") else bind


def prepare(lay: Layout, db: Database, ports: dict[str, int], mlflow_host: str) -> None:
    """The instance config, the workspace (the code server's address), the passfile, MLflow's auth config."""
    lay.dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(INSTANCE_YAML, lay.dagster_home / "dagster.yaml")
    lay.workspace.write_text("load_from:\n  - grpc_server:\n"
                             f"      host: {LOOPBACK}\n      port: {ports['code_server']}\n"
                             "      location_name: sparseeval\n")
    esc = db.password.replace("\\", "\\\\").replace(":", "\\:")
    write_private(lay.secrets / "pgpass", f"*:*:*:{db.user}:{esc}\n")
    lay.artifacts.mkdir(parents=True, exist_ok=True)
    if mlflow_host != LOOPBACK:
        if not os.environ.get("MLFLOW_AUTH_ADMIN_PASSWORD"):
            raise ServeError(f"--mlflow-host {mlflow_host} exposes MLflow: set MLFLOW_AUTH_ADMIN_PASSWORD "
                             "(its basic-auth app's admin password)")
        write_private(lay.secrets / "mlflow_auth.ini",
                      "[mlflow]\ndefault_permission = NO_PERMISSIONS\n"
                      f"database_uri = sqlite:///{lay.serve / 'mlflow_auth.db'}\n"
                      f"admin_username = {settings.foreign('MLFLOW_AUTH_ADMIN_USERNAME')}\n"
                      "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")


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
        env.setdefault("MLFLOW_TRACKING_USERNAME", settings.foreign("MLFLOW_AUTH_ADMIN_USERNAME"))
        env.setdefault("MLFLOW_TRACKING_PASSWORD", os.environ["MLFLOW_AUTH_ADMIN_PASSWORD"])
    return env


def mlflow_env(lay: Layout, db: Database, ports: dict[str, int], mlflow_host: str) -> dict[str, str]:
    """MLflow's environment: its backend store URI without the password (libpq reads the passfile), no
    Dagster credentials; the basic-auth app's config and CSRF key when it is exposed."""
    env = {k: v for k, v in service_env(lay, db, ports, mlflow_host).items()
           if k not in ("DAGSTER_PG_PASSWORD", "MLFLOW_TRACKING_URI")}
    env.update({"MLFLOW_BACKEND_STORE_URI": db.mlflow_uri, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    if mlflow_host != LOOPBACK:
        env["MLFLOW_AUTH_CONFIG_PATH"] = str(lay.secrets / "mlflow_auth.ini")
        env["MLFLOW_FLASK_SERVER_SECRET_KEY"] = secret(lay, "mlflow_flask_key")
    return env


def executable(name: str) -> str:
    """An executable of this interpreter's environment (the venv's ``dagster``, ``mlflow``, ``supervisord``)."""
    return str(Path(sys.executable).with_name(name))


def commands(lay: Layout, ports: dict[str, int], mlflow_host: str) -> dict[str, list[str]]:
    """Each service's command line (no secret on any of them)."""
    mlflow = [executable("mlflow"), "server", "--host", mlflow_host, "--port", str(ports["mlflow"]),
              "--workers", "1", "--serve-artifacts", "--artifacts-destination", lay.artifacts.as_uri()]
    if mlflow_host != LOOPBACK:
        mlflow += ["--app-name", "basic-auth"]
        if mlflow_host == client_host(mlflow_host) and not os.environ.get("MLFLOW_SERVER_ALLOWED_HOSTS"):
            # one named interface: MLflow's Host-header check allows loopback names only by default
            mlflow += ["--allowed-hosts", f"{mlflow_host},{mlflow_host}:*,localhost,localhost:*,127.0.0.1,127.0.0.1:*"]
    # JSON log lines: the default colours are control characters, which supervisorctl tail (XML-RPC) refuses
    log = ["--log-format", "json"]
    return {
        "mlflow": mlflow,
        "code_server": [executable("dagster"), "code-server", "start", "-m", "pipelines.definitions", "-h", LOOPBACK,
                        "-p", str(ports["code_server"]), "--location-name", "sparseeval", *log],
        "webserver": [executable("dagster-webserver"), "-w", str(lay.workspace), "-h", LOOPBACK,
                      "-p", str(ports["webserver"]), *log],
        "daemon": [executable("dagster-daemon"), "run", "-w", str(lay.workspace), *log],
    }
