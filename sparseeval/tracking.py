"""MLflow tracking: evaluation runs, comparison runs and the predictor registry.

This is the only module of the library that imports mlflow, so the rest of the library (and its
tests) never pays mlflow's import time and never depends on tracking being configured.

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
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# quiet sqlite store creation (alembic migrations) and mlflow's INFO chatter before mlflow loads
for _name in ("alembic", "alembic.runtime.migration", "mlflow.store.db.utils", "mlflow.tracking",
              "mlflow.models.model", "mlflow.pyfunc", "mlflow.utils.requirements_utils"):
    logging.getLogger(_name).setLevel(logging.WARNING)

import mlflow  # noqa: E402  (after the env/log settings above, on purpose)
from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import Metric, Param  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.models import ModelSignature  # noqa: E402
from mlflow.types import Schema, TensorSpec  # noqa: E402

#: alias moved to the newest registered predictor version of a benchmark
CHAMPION = "champion"
_MAX_PARAM_LEN = 6000  # MLflow's limit on a param value


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
            return client.create_experiment(cfg.experiment, artifact_location=cfg.resolved_artifact_location)
        except MlflowException:
            exp = client.get_experiment_by_name(cfg.experiment)
            if exp is None:
                raise
    if exp.lifecycle_stage == "deleted":
        client.restore_experiment(exp.experiment_id)
    return exp.experiment_id


def _param_value(v: Any) -> str:
    text = v if isinstance(v, str) else json.dumps(v, default=str, sort_keys=True)
    return text[:_MAX_PARAM_LEN]


def _metric_list(metrics: Mapping[str, Any]) -> list[Metric]:
    """Numeric metrics only (None skipped): a missing metric must not fail a finished evaluation."""
    ts = int(time.time() * 1000)
    out = []
    for key, value in metrics.items():
        if value is None:
            continue
        out.append(Metric(key, float(value), ts, 0))
    return out


class _Run:
    """Context manager around one explicitly created run: FINISHED on success, FAILED on error."""

    def __init__(self, client: MlflowClient, experiment_id: str, name: str, tags: Mapping[str, Any]) -> None:
        self.client = client
        self.run = client.create_run(experiment_id, run_name=name,
                                     tags={k: str(v) for k, v in tags.items()})
        self.run_id = self.run.info.run_id

    def __enter__(self) -> _Run:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.client.set_terminated(self.run_id, status="FAILED" if exc_type else "FINISHED")


def log_evaluation_run(cfg: TrackingConfig, *, benchmark: str, method: str, k: int, seed: int,
                       params: Mapping[str, Any], metrics: Mapping[str, Any],
                       anchors: Sequence[Mapping[str, Any]], predictor_state_path: Path | None = None,
                       extra_artifacts: Sequence[Path] = (), tags: Mapping[str, Any] | None = None,
                       parent_run_id: str | None = None) -> str:
    """Record one (benchmark, method, k, seed) evaluation as its own run; return the run id.

    ``metrics`` typically holds mae, tau, rho, max_error and seconds; ``anchors`` the chosen items
    as dicts (position, item_id, weight), saved as ``anchors.json`` and ``anchors.csv`` so the
    anchor set can be read back without sparseeval. The predictor state goes under ``predictor/``.
    """
    client = cfg.client()
    exp_id = ensure_experiment(cfg, client)
    run_tags = {"sparseeval.kind": "evaluation", "benchmark": benchmark, "method": method,
                "k": k, "seed": seed, **(tags or {})}
    if parent_run_id:
        run_tags["mlflow.parentRunId"] = parent_run_id
    with _Run(client, exp_id, f"{benchmark}-{method}-k{k}-s{seed}", run_tags) as run:
        all_params = {"benchmark": benchmark, "method": method, "k": k, "seed": seed, **params}
        client.log_batch(run.run_id, metrics=_metric_list(metrics),
                         params=[Param(key, _param_value(v)) for key, v in all_params.items()])
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            rows = [dict(a) for a in anchors]
            (folder / "anchors.json").write_text(json.dumps(rows, indent=1, default=str))
            if rows:
                pl.DataFrame(rows, infer_schema_length=None).write_csv(folder / "anchors.csv")
            client.log_artifacts(run.run_id, str(folder))
        if predictor_state_path is not None:  # a state file, or a whole predictor folder
            state = Path(predictor_state_path)
            if state.is_dir():
                client.log_artifacts(run.run_id, str(state), "predictor")
            else:
                client.log_artifact(run.run_id, str(state), "predictor")
        for path in extra_artifacts:
            path = Path(path)
            if path.is_dir():
                client.log_artifacts(run.run_id, str(path), path.name)
            else:
                client.log_artifact(run.run_id, str(path))
        return run.run_id


def log_comparison(cfg: TrackingConfig, *, benchmark: str, rows: Sequence[Mapping[str, Any]],
                   plot_path: Path | None = None, child_run_ids: Sequence[str] = (),
                   tags: Mapping[str, Any] | None = None) -> str:
    """A parent run holding a benchmark's method comparison table (and its plot); return its id.

    The table is logged both as an MLflow table (``comparison.json``, viewable in the UI) and as
    ``comparison.csv``. ``child_run_ids`` (the evaluation runs it summarises) are nested under it.
    """
    client = cfg.client()
    exp_id = ensure_experiment(cfg, client)
    run_tags = {"sparseeval.kind": "comparison", "benchmark": benchmark, **(tags or {})}
    with _Run(client, exp_id, f"{benchmark}-comparison", run_tags) as run:
        frame = pl.DataFrame([dict(r) for r in rows], infer_schema_length=None)
        client.log_batch(run.run_id, params=[Param("benchmark", benchmark), Param("n_rows", str(len(rows)))])
        if frame.height:
            client.log_table(run.run_id, data=frame.to_pandas(), artifact_file="comparison.json")
        with tempfile.TemporaryDirectory() as tmp:
            csv = Path(tmp) / "comparison.csv"
            frame.write_csv(csv)
            client.log_artifact(run.run_id, str(csv))
        if plot_path is not None:
            client.log_artifact(run.run_id, str(plot_path))
        for child in child_run_ids:
            client.set_tag(child, "mlflow.parentRunId", run.run_id)
        return run.run_id


def registered_model_name(benchmark: str) -> str:
    """Registry name of a benchmark's predictor."""
    return f"sparseeval-{benchmark}"


class SparseEvalPredictorModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper: loads the predictor folder and maps anchor answers to full-benchmark scores.

    Input: one row per model, one column per anchor in anchor order (0/1 or a score; NaN = not
    answered). Output: predicted scores in [0, 1]. The folder is a published predictor
    (:mod:`sparseeval.artifact`) or a bare estimator state (see :func:`load_estimator_from_folder`).
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
    """Rebuild the fitted :class:`~sparseeval.methods.base.AnchorEstimator` saved in ``folder``.

    A published predictor folder (``predictor.json`` + ``state.pt``) goes through
    :func:`sparseeval.artifact.load_predictor`, which verifies its content hash; a bare state file
    (``torch.save(estimator.get_state())``) is read directly.
    """
    import torch

    import sparseeval.methods as methods  # registers every method

    folder = Path(folder)
    if (folder / "predictor.json").is_file():
        from sparseeval.artifact import load_predictor

        return load_predictor(folder).estimator
    state = torch.load(_state_file(folder), map_location="cpu", weights_only=True)
    return methods.AnchorEstimator.from_state(state)


_MODEL_CODE = """\
import mlflow

from sparseeval.tracking import SparseEvalPredictorModel

mlflow.models.set_model(SparseEvalPredictorModel())
"""


def _signature(predictor_dir: Path) -> ModelSignature:
    """Input: (n_models, k) float32 anchor answers; output: (n_models,) float64 scores.

    Reading k from the saved state also checks, before anything is registered, that the folder
    really holds a loadable estimator; a folder in another layout gets an open column count.
    """
    try:
        k = int(load_estimator_from_folder(predictor_dir).k)
    except (FileNotFoundError, KeyError, ValueError, RuntimeError):
        k = -1
    return ModelSignature(inputs=Schema([TensorSpec(np.dtype("float32"), (-1, k))]),
                          outputs=Schema([TensorSpec(np.dtype("float64"), (-1,))]))


def register_predictor(cfg: TrackingConfig, *, benchmark: str, predictor_dir: Path, run_id: str,
                       alias: str = CHAMPION) -> str:
    """Log ``predictor_dir`` as a pyfunc model under ``run_id`` and register it as a new version of
    ``sparseeval-<benchmark>``; move ``alias`` to that version and return the version number.

    Only the files and a one-line model script are stored; loading the model needs sparseeval
    installed (declared in the model's requirements), which keeps the artifact small.
    """
    predictor_dir = Path(predictor_dir)
    if not predictor_dir.is_dir():
        raise FileNotFoundError(f"{predictor_dir}: predictor folder not found")
    client = cfg.client()
    run = client.get_run(run_id)
    import torch

    from sparseeval import __version__

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        # "models from code": the model is this one-line script, not a cloudpickled object, so the
        # artifact holds no pickled code and loads with any compatible sparseeval
        code = Path(tmp) / "sparseeval_predictor.py"
        code.write_text(_MODEL_CODE)
        # MLflow keeps an artifact folder's own name; copy it to a fixed one so the stored layout
        # is always model/artifacts/predictor whatever the caller's folder is called
        staged = Path(tmp) / "predictor"
        shutil.copytree(predictor_dir, staged)
        with warnings.catch_warnings():
            # the explicit signature is the documentation; an input example would only make MLflow
            # load and run the model once more at save time
            warnings.filterwarnings("ignore", message=".*input example was not provided.*")
            mlflow.pyfunc.save_model(
                path=str(model_dir),
                python_model=str(code),
                artifacts={"predictor": str(staged)},
                signature=_signature(predictor_dir),
                pip_requirements=[f"sparseeval=={__version__}", f"mlflow=={mlflow.__version__}",
                                  f"torch=={torch.__version__.split('+')[0]}", f"numpy=={np.__version__}"],
                metadata={"benchmark": benchmark},
            )
        client.log_artifacts(run_id, str(model_dir), "model")
    name = registered_model_name(benchmark)
    try:
        client.create_registered_model(name, tags={"benchmark": benchmark},
                                       description=f"SparseEval anchor predictor for {benchmark}")
    except MlflowException as err:
        if err.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = client.create_model_version(name, source=f"{run.info.artifact_uri}/model", run_id=run_id,
                                          tags={"benchmark": benchmark})
    client.set_registered_model_alias(name, alias, version.version)
    return str(version.version)


def download_predictor(cfg: TrackingConfig, *, benchmark: str, dst: Path, alias: str = CHAMPION) -> Path:
    """Download the predictor folder of the version under ``alias`` into ``dst``; return the folder."""
    client = cfg.client()
    version = client.get_model_version_by_alias(registered_model_name(benchmark), alias)
    Path(dst).mkdir(parents=True, exist_ok=True)
    local = mlflow.artifacts.download_artifacts(artifact_uri=f"{version.source}/artifacts/predictor",
                                                dst_path=str(dst))
    return Path(local)
