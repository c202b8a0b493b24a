"""Every deployment config the project ships or documents is valid, checked without a server.

The YAML blocks of ``docs/*.md``, ``pipelines/*.yaml`` and ``sparseeval/interfaces/serve/*.yaml`` are loaded as
Dagster instance configs: Dagster's top-level instance schema, then each named class's own schema
(``K8sRunLauncher``'s included), so a misspelt key or a key a launcher does not take fails here
rather than on a cluster. The served mode's ``dagster.yaml`` is shown verbatim in ``docs/deploy.md``
(the documented file is the one ``tests/test_serve.py`` runs), and the Kubernetes variant differs
from it in the run launcher only. ``docs/deploy/docker-compose.yml`` is validated against the
Compose specification's JSON schema (no Docker engine needed), and its wiring is checked: the image
it builds, the tested instance config inside it, the variables that config reads, the secret, the
workspace, the healthchecks its start order waits on, and loopback-only ports.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparseeval.interfaces.serve import bootstrap as boot
from sparseeval.interfaces.serve.bootstrap import INSTANCE_YAML

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^( *)```ya?ml\n(.*?)^\1```", re.M | re.S)  #: indented inside a list item too


def _doc_blocks() -> list[tuple[str, str]]:
    return [(f"{doc.relative_to(REPO)} block {i + 1}", textwrap.dedent(text))
            for doc in sorted((REPO / "docs").rglob("*.md"))
            for i, (_, text) in enumerate(FENCE.findall(doc.read_text()))]


CONFIGS = [*[(str(p.relative_to(REPO)), p.read_text())
             for p in sorted([*(REPO / "pipelines").glob("*.yaml"),
                              *(REPO / "sparseeval" / "interfaces" / "serve").glob("*.yaml")])],
           *_doc_blocks()]
#: the sections of dagster.yaml that name a class whose own schema checks their ``config``
CLASS_SECTIONS = ("run_launcher", "run_coordinator", "run_storage", "event_log_storage", "schedule_storage",
                  "scheduler", "compute_logs", "local_artifact_storage", "secrets")


def validate_instance_config(config: dict[str, Any], where: str) -> None:
    """``config`` (a parsed ``dagster.yaml``) against Dagster's own instance schema, and each named
    class's ``config`` against that class's schema, without building anything (a Postgres storage or
    a Kubernetes launcher would connect on construction). ``{env: X}`` values are checked as such,
    not resolved. Raises ``ValueError`` naming ``where`` and the errors."""
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


@pytest.mark.parametrize(("where", "text"), CONFIGS, ids=[w for w, _ in CONFIGS])
def test_every_shipped_and_documented_yaml_is_a_valid_instance_config(where: str, text: str) -> None:
    config = yaml.safe_load(text)
    assert isinstance(config, dict) and config, f"{where}: empty"
    validate_instance_config(config, where)


def test_the_deploy_doc_shows_the_tested_config_and_kubernetes_changes_only_the_launcher() -> None:
    blocks = [yaml.safe_load(t) for _, t in _doc_blocks() if "storage" in yaml.safe_load(t)]
    tested = yaml.safe_load(INSTANCE_YAML.read_text())
    assert INSTANCE_YAML.read_text().split("\ntelemetry:", 1)[1] in (REPO / "docs" / "deploy.md").read_text()
    kubernetes = [b for b in blocks if b.get("run_launcher", {}).get("class") == "K8sRunLauncher"]
    assert len(kubernetes) == 1
    assert {k: v for k, v in kubernetes[0].items() if k != "run_launcher"} == \
        {k: v for k, v in tested.items() if k != "run_launcher"}


@pytest.mark.parametrize(("change", "error"), [
    ({"concurrency": {"runs": {"max_concurent_runs": 2}}}, "max_concurent_runs"),
    ({"storage": {"postgres": {"postgres_db": {"hostname": "h", "db_name": "d", "user": "u"}}}}, "user"),
    ({"run_launcher": {"module": "dagster_k8s", "class": "K8sRunLauncher",
                       "config": {"job_image": "x", "env_var": ["A"]}}}, "env_var"),
    ({"run_coordinator": {"module": "dagster.core.run_coordinator", "class": "QueuedRunCoordinator",
                          "config": {"max_concurrent_runs": "two"}}}, "max_concurrent_runs"),
])
def test_a_wrong_key_is_refused_naming_it(change: dict, error: str) -> None:
    config = {**yaml.safe_load(INSTANCE_YAML.read_text()), **change}
    with pytest.raises(ValueError, match=error):
        validate_instance_config(config, "changed.yaml")


def test_the_deploy_doc_names_every_variable_the_served_mode_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment table of ``docs/deploy.md`` is the environment the services get."""
    for var in [v for v in os.environ if v.startswith(("DAGSTER_", "MLFLOW_", "PG", "SPARSEEVAL_"))]:
        monkeypatch.delenv(var)
    lay = boot.Layout(REPO / "data")
    db = boot.Database("127.0.0.1", 5432, boot.PG_USER, "dagster", "postgresql+psycopg2://x@h/mlflow", "pw", True)
    set_by_serve = set(boot.service_env(lay, db, {"mlflow": 5000})) - set(os.environ)
    assert set_by_serve >= {"DAGSTER_HOME", "DAGSTER_PG_PASSWORD", "MLFLOW_TRACKING_URI", "PGPASSFILE"}
    doc = (REPO / "docs" / "deploy.md").read_text()
    named = {v for v in set_by_serve | {"MLFLOW_BACKEND_STORE_URI", "DAGSTER_PG_PASSWORD_FILE"}
             if re.search(rf"`{v}[`=]", doc) or (v.startswith("SPARSEEVAL_") and "`SPARSEEVAL_*`" in doc)}
    missing = set_by_serve - named - {"PYTHONUNBUFFERED"}
    assert not missing, f"docs/deploy.md does not name {sorted(missing)}"


# --- docker compose ---------------------------------------------------------------------------------

COMPOSE = REPO / "docs" / "deploy" / "docker-compose.yml"
DAGSTER_SERVICES = ("code_server", "webserver", "daemon")


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _compose_validator() -> Any:
    """A validator of the Compose specification's JSON schema (the copy check-jsonschema ships)."""
    from importlib.resources import files

    import jsonschema

    schema = json.loads(files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text())
    return jsonschema.validators.validator_for(schema)(schema)


def test_the_compose_file_is_valid_compose() -> None:
    validator = _compose_validator()
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(_compose())]
    assert errors == []
    # the schema does refuse a wrong file: a misspelt key, an unknown start condition
    wrong = {"services": {"db": {"imagee": "postgres:15"},
                          "app": {"image": "x", "depends_on": {"db": {"condition": "healthy"}}}}}
    found = " ".join(e.message for e in validator.iter_errors(wrong))
    assert "imagee" in found and "healthy" in found


def test_the_compose_file_runs_the_tested_config_and_wires_every_service() -> None:
    compose = _compose()
    services = compose["services"]
    assert set(services) == {"postgresql", "mlflow", *DAGSTER_SERVICES}  # one service per process, as make serve
    for name, svc in services.items():
        assert svc.get("restart") == "unless-stopped", name  # a killed service comes back
        assert all(s in compose["secrets"] for s in svc.get("secrets", [])), name
        assert all(n in compose["networks"] for n in svc.get("networks", [])), name
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            assert (COMPOSE.parent / source).exists() if source.startswith(".") else source in compose["volumes"]
        assert all(p.startswith("127.0.0.1:") for p in svc.get("ports", [])), name  # the host's loopback only
        for dep, how in svc.get("depends_on", {}).items():  # the start order waits on healthchecks that exist
            assert dep in services and (how["condition"] != "service_healthy" or "healthcheck" in services[dep])
    # the password: only through the secret file (git-ignored), never a value in this file
    assert compose["secrets"]["pg_password"]["file"].startswith("./secrets/")
    assert "docs/deploy/secrets/" in (REPO / ".gitignore").read_text()
    assert not re.search(r"PASSWORD\s*[:=]\s*[\"']?\w", COMPOSE.read_text().replace("$$(cat", "")), \
        "a password value in the compose file"
    # the image: built from the repository with the tested instance config as DAGSTER_HOME/dagster.yaml
    build = services["mlflow"]["build"]
    context = (COMPOSE.parent / build["context"]).resolve()
    dockerfile = (context / build["dockerfile"]).read_text()
    copies = re.findall(r"^COPY (.+) (\S+)$", dockerfile, re.M)
    assert copies and all((context / src).exists() for srcs, _ in copies for src in srcs.split()), copies
    home = services["daemon"]["environment"]["DAGSTER_HOME"]
    assert (str(INSTANCE_YAML.relative_to(REPO)), f"{home}/dagster.yaml") in copies
    assert f"ENV DAGSTER_HOME={home}" in dockerfile
    # every variable the instance config reads is set for each Dagster process (the password from the secret)
    needed = set(re.findall(r"\{env: (\w+)\}", INSTANCE_YAML.read_text()))
    assert "DAGSTER_PG_PASSWORD" in needed
    for name in DAGSTER_SERVICES:
        command = " ".join(services[name]["command"])
        provided = set(services[name]["environment"]) | set(re.findall(r"export (\w+)=", command))
        assert needed <= provided, (name, needed - provided)
        assert 'export DAGSTER_PG_PASSWORD="$$(cat /run/secrets/pg_password)"' in command
        assert services[name]["environment"]["DAGSTER_PG_HOST"] == "postgresql"
    # the workspace the webserver and the daemon load names the code server's service and port
    workspace = COMPOSE.parent / "workspace.yaml"
    grpc = yaml.safe_load(workspace.read_text())["load_from"][0]["grpc_server"]
    assert grpc["host"] == "code_server" and f"-p {grpc['port']}" in " ".join(services["code_server"]["command"])
    assert (str(workspace.relative_to(REPO)), "/opt/dagster/workspace.yaml") in copies
    assert all("-w /opt/dagster/workspace.yaml" in " ".join(services[n]["command"]) for n in ("webserver", "daemon"))
    # MLflow's store is the database the init script creates, on the same server
    assert "CREATE DATABASE mlflow" in (COMPOSE.parent / "initdb" / "mlflow.sql").read_text()
    assert "@postgresql:5432/mlflow" in " ".join(services["mlflow"]["command"])
    assert services["daemon"]["environment"]["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
