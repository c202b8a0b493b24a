"""Every Dagster instance config the project ships or documents is valid against Dagster's own schema.

The YAML blocks of ``docs/*.md`` and ``pipelines/*.yaml`` are loaded as instance configs: Dagster's
top-level instance schema, then each named class's own schema (``K8sRunLauncher``'s included), so
a misspelt key or a key a launcher does not take fails here rather than on a cluster. The served
mode's ``dagster.yaml`` is shown verbatim in ``docs/deploy.md`` (the documented file is the one
``tests/test_serve.py`` runs), and the Kubernetes variant differs from it in the run launcher only.
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest
import yaml

from pipelines.serve import INSTANCE_YAML, validate_instance_config

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^( *)```ya?ml\n(.*?)^\1```", re.M | re.S)  #: indented inside a list item too


def _doc_blocks() -> list[tuple[str, str]]:
    return [(f"{doc.relative_to(REPO)} block {i + 1}", textwrap.dedent(text))
            for doc in sorted((REPO / "docs").rglob("*.md"))
            for i, (_, text) in enumerate(FENCE.findall(doc.read_text()))]


CONFIGS = [*[(str(p.relative_to(REPO)), p.read_text()) for p in sorted((REPO / "pipelines").glob("*.yaml"))],
           *_doc_blocks()]


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
    from pipelines import serve

    for var in [v for v in os.environ if v.startswith(("DAGSTER_", "MLFLOW_", "PG", "SPARSEEVAL_"))]:
        monkeypatch.delenv(var)
    lay = serve.Layout(REPO / "data")
    db = serve.Database("127.0.0.1", 5432, serve.PG_USER, "dagster", "postgresql+psycopg2://x@h/mlflow", "pw", True)
    set_by_serve = set(serve.service_env(lay, db, {"mlflow": 5000})) - set(os.environ)
    assert set_by_serve >= {"DAGSTER_HOME", "DAGSTER_PG_PASSWORD", "MLFLOW_TRACKING_URI", "PGPASSFILE"}
    doc = (REPO / "docs" / "deploy.md").read_text()
    named = {v for v in set_by_serve | {"MLFLOW_BACKEND_STORE_URI", "DAGSTER_PG_PASSWORD_FILE"}
             if re.search(rf"`{v}[`=]", doc) or (v.startswith("SPARSEEVAL_") and "`SPARSEEVAL_*`" in doc)}
    missing = set_by_serve - named - {"PYTHONUNBUFFERED"}
    assert not missing, f"docs/deploy.md does not name {sorted(missing)}"
