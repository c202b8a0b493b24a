"""MLflow tracking: the configuration (where runs, artifacts and the registry live), the experiment,
and the pyfunc model class that registered predictors load through.

This module and its two siblings are the only modules of the library that import mlflow, so the rest
of the library (and its tests) never pays mlflow's import time and never depends on tracking being
configured: :mod:`sparseeval.publish.tracking_runs` logs the runs (refresh steps, evaluations,
comparisons), :mod:`sparseeval.publish.tracking_registry` registers predictors and moves their
aliases. Both import this module first, so the environment and log settings below always precede
mlflow's own import. :class:`SparseEvalPredictorModel` stays here because every registered model's
script imports it by this module's name.

Design choices, and why:

* **Explicit client, explicit experiment id.** Every call goes through an ``MlflowClient`` built
  from the config and names its experiment/run ids; nothing uses mlflow's global "active run".
  Concurrent Dagster steps (threads or processes) therefore never write into each other's runs.
* **Local sqlite store + explicit artifact folder by default.** MLflow's file store is in
  maintenance mode, and without an experiment ``artifact_location`` artifacts land in ``./mlruns``
  of whatever the working directory happens to be. The default is ``sqlite:///<data_dir>/mlflow.db``
  with artifacts under ``<data_dir>/mlartifacts``; any other tracking URI works by configuration.
* **Registry via pyfunc.** A registered predictor is a small pyfunc model wrapping the predictor
  folder, so ``mlflow.pyfunc.load_model("models:/sparseeval-<benchmark>@champion")`` scores new
  models from their anchor answers without knowing anything about sparseeval's file layout.
  The alias is ``champion``: MLflow reserves ``latest`` (``models:/<name>/latest`` already
  resolves to the newest version).
"""

from __future__ import annotations

import fcntl
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# quiet sqlite store creation (alembic migrations) and mlflow's INFO chatter before mlflow loads
for _name in ("alembic", "alembic.runtime.migration", "mlflow.store.db.utils", "mlflow.tracking",
              "mlflow.models.model", "mlflow.pyfunc", "mlflow.utils.requirements_utils"):
    logging.getLogger(_name).setLevel(logging.WARNING)

import mlflow  # noqa: E402  (after the env/log settings above, on purpose)
from mlflow import MlflowClient  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402

#: experiment tag read by the MLflow 3 UI: "custom_model_development" opens the experiment on its
#: runs (model training), not on traces (GenAI); see mlflow/server/js ExperimentKind
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
EXPERIMENT_DESCRIPTION = (
    "sparseeval: anchor items that predict full LLM benchmark scores. One run per refresh step and "
    "benchmark (tag `sparseeval.step`: candidate, champion, evaluation), each wrapping the actual work, "
    "with the response matrix as its dataset input; registered models `sparseeval-<benchmark>` carry the "
    "`champion` alias.")


@dataclass(frozen=True)
class TrackingConfig:
    """Where runs and artifacts go.

    ``tracking_uri=None`` means the local default ``sqlite:///<data_dir>/mlflow.db``.
    ``artifact_location=None`` means ``<data_dir>/mlartifacts`` for a local (sqlite or file) store
    and the server's default for a remote one. ``data_dir`` is the project data folder.
    """

    tracking_uri: str | None = None
    artifact_location: str | None = None
    experiment: str = "sparseeval"
    data_dir: Path = field(default_factory=lambda: Path("data"))

    @property
    def resolved_tracking_uri(self) -> str:
        if self.tracking_uri:
            return self.tracking_uri
        return f"sqlite:///{(Path(self.data_dir).resolve() / 'mlflow.db').as_posix()}"

    @property
    def resolved_artifact_location(self) -> str | None:
        if self.artifact_location:
            loc = self.artifact_location
            return Path(loc).resolve().as_uri() if "://" not in loc else loc
        uri = self.resolved_tracking_uri
        if uri.startswith(("sqlite:", "file:")) or "://" not in uri:
            return (Path(self.data_dir).resolve() / "mlartifacts").as_uri()
        return None

    def client(self) -> MlflowClient:
        """A client bound to this config's tracking and registry URI (creates the local folder).

        The first use of a local sqlite store creates its schema with migrations, and two processes
        doing that at once (two benchmark partitions starting together) break each other's
        migration; so the first touch of a local store in each process holds a file lock.
        """
        uri = self.resolved_tracking_uri
        if self.tracking_uri is not None or uri in _INITIALISED:
            return MlflowClient(tracking_uri=uri, registry_uri=uri)
        folder = Path(self.data_dir)
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / ".mlflow-init.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                client = MlflowClient(tracking_uri=uri, registry_uri=uri)  # creates / migrates the store
                client.search_registered_models(max_results=1)  # the registry is a second store
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
            _INITIALISED.add(uri)
        return client


#: local store URIs this process has already initialised (under the lock)
_INITIALISED: set[str] = set()


def ensure_experiment(cfg: TrackingConfig, client: MlflowClient | None = None) -> str:
    """The experiment id of ``cfg.experiment``, creating it (with the artifact location) if needed.

    Safe under concurrency: a step that loses the creation race reads the winner's experiment.
    A deleted experiment of that name is restored rather than failing every later call.
    """
    client = client or cfg.client()
    exp = client.get_experiment_by_name(cfg.experiment)
    if exp is None:
        try:
            return client.create_experiment(cfg.experiment, artifact_location=cfg.resolved_artifact_location,
                                            tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND,
                                                  "mlflow.note.content": EXPERIMENT_DESCRIPTION})
        except MlflowException:
            exp = client.get_experiment_by_name(cfg.experiment)
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        client.restore_experiment(exp.experiment_id)
    if exp.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:  # an experiment made before the kind was set
        client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return exp.experiment_id


def runs_page_url(cfg: TrackingConfig, ui: str = "http://127.0.0.1:5000") -> str:
    """The URL of the experiment's runs in the MLflow UI at ``ui`` (for summaries and docs).

    MLflow 3.17's UI chooses between its GenAI and model-training pages with a browser-wide switch
    (GenAI in a fresh browser) that the ``workflowType`` URL parameter overrides, so the link says
    ``machine_learning``; the experiment itself is tagged ``custom_model_development``.
    """
    return f"{ui.rstrip('/')}/#/experiments/{ensure_experiment(cfg)}/runs?workflowType=machine_learning"


class SparseEvalPredictorModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper: loads the predictor folder and maps anchor answers to full-benchmark scores.

    Input: one row per model, one column per anchor in anchor order (0/1 or a score; NaN = not
    answered). Output: predicted scores in [0, 1]. The folder is a published predictor
    (:mod:`sparseeval.estimate.artifact`) or a bare estimator state (see :func:`load_estimator_from_folder`).
    """

    def load_context(self, context: mlflow.pyfunc.PythonModelContext) -> None:
        self.estimator = load_estimator_from_folder(Path(context.artifacts["predictor"]))

    # ``np.ndarray`` is one of the hints MLflow 3 accepts without inferring a schema from it (other
    # hints become an input schema, and no hint at all draws a warning on every load)
    def predict(self, context: mlflow.pyfunc.PythonModelContext, model_input: np.ndarray,
                params: dict[str, Any] | None = None) -> np.ndarray:
        X = np.asarray(model_input, dtype=np.float32)
        return self.estimator.predict(X)


def _state_file(folder: Path) -> Path:
    for name in ("state.pt", "predictor.pt", "estimator.pt"):
        if (folder / name).is_file():
            return folder / name
    found = sorted(folder.rglob("*.pt"))
    if len(found) != 1:
        raise FileNotFoundError(f"{folder}: expected one estimator state file (*.pt), found {len(found)}")
    return found[0]


def load_estimator_from_folder(folder: Path) -> Any:
    """Rebuild the fitted :class:`~sparseeval.estimate.methods.base.AnchorEstimator` saved in ``folder``.

    A published predictor folder (``predictor.json`` + ``state.safetensors``, or a version-1 ``state.pt``) goes through
    :func:`sparseeval.estimate.artifact.load_predictor`, which verifies its content hash; a bare state file
    (``torch.save(estimator.get_state())``) is read directly.
    """
    import torch

    import sparseeval.estimate.methods as methods  # registers every method

    folder = Path(folder)
    if (folder / "predictor.json").is_file():
        from sparseeval.estimate.artifact import load_predictor

        return load_predictor(folder).estimator
    from sparseeval.estimate.artifact import join_state, split_state

    # a bare torch.save state (tensors): as arrays, the estimators' state since format version 2
    state = join_state(*split_state(torch.load(_state_file(folder), map_location="cpu", weights_only=True)))
    return methods.AnchorEstimator.from_state(state)

