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

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
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
from mlflow.entities import Dataset as DatasetEntity  # noqa: E402
from mlflow.entities import DatasetInput, InputTag, Metric, Param, RunTag  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.models import ModelSignature  # noqa: E402
from mlflow.types import Schema, TensorSpec  # noqa: E402

from sparseeval.data.benchmarks import registered_model_name  # noqa: E402  (also imported from here)

#: alias moved to the newest registered predictor version of a benchmark
CHAMPION = "champion"
#: experiment tag read by the MLflow 3 UI: "custom_model_development" opens the experiment on its
#: runs (model training), not on traces (GenAI); see mlflow/server/js ExperimentKind
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
EXPERIMENT_DESCRIPTION = (
    "sparseeval: anchor items that predict full LLM benchmark scores. One run per refresh step and "
    "benchmark (tag `sparseeval.step`: candidate, champion, evaluation), each wrapping the actual work, "
    "with the response matrix as its dataset input; registered models `sparseeval-<benchmark>` carry the "
    "`champion` alias.")
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
    """Context manager around one explicitly created run: FINISHED on success, FAILED on error.

    With ``run_id`` it writes into that already open run (a :func:`tracked_run`) and leaves its
    status alone: whoever opened the run closes it.
    """

    def __init__(self, client: MlflowClient, experiment_id: str, name: str, tags: Mapping[str, Any],
                 run_id: str | None = None) -> None:
        self.client = client
        self.owned = run_id is None
        if run_id is None:
            self.run = client.create_run(experiment_id, run_name=name,
                                         tags={k: str(v) for k, v in tags.items()})
        else:
            self.run = client.get_run(run_id)
            client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()
                                           if k not in self.run.data.tags])
        self.run_id = self.run.info.run_id

    def __enter__(self) -> _Run:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self.owned:
            self.client.set_terminated(self.run_id, status="FAILED" if exc_type else "FINISHED")


# --- runs that wrap the work of a refresh step --------------------------------------------------------

class TrackedRun:
    """An open MLflow run (see :func:`tracked_run`): what a refresh step logs while it works."""

    def __init__(self, cfg: TrackingConfig, client: MlflowClient, run_id: str) -> None:
        self.cfg, self.client, self.run_id = cfg, client, run_id
        self._params: dict[str, str] = {}

    @property
    def artifact_uri(self) -> str:
        return self.client.get_run(self.run_id).info.artifact_uri

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Params (JSON for non-strings). A key already logged with the same value is skipped; MLflow
        refuses a changed value (params are immutable: put what changes into metrics)."""
        new = {k: _param_value(v) for k, v in params.items() if v is not None}
        todo = [Param(k, v) for k, v in new.items() if self._params.get(k) != v]
        for start in range(0, len(todo), 100):
            self.client.log_batch(self.run_id, params=todo[start:start + 100])
        self._params.update(new)

    def log_metrics(self, metrics: Mapping[str, Any], *, step: int = 0) -> None:
        """Numeric metrics (None and NaN skipped). Keep the keys the same across refreshes (``test_mae``,
        ``mae/<method>/k<k>``): the UI's chart view then compares successive refreshes run by run."""
        rows = [m for m in _metric_list(metrics) if np.isfinite(m.value)]
        rows = [Metric(m.key, m.value, m.timestamp, step) for m in rows]
        for start in range(0, len(rows), 1000):
            self.client.log_batch(self.run_id, metrics=rows[start:start + 1000])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items() if v is not None])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """A file (or a whole folder, keeping its name) under ``artifact_path``."""
        path = Path(path)
        if path.is_dir():
            self.client.log_artifacts(self.run_id, str(path), "/".join(p for p in (artifact_path, path.name) if p))
        else:
            self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        self.client.log_dict(self.run_id, obj, artifact_file)

    def log_table(self, frame: pl.DataFrame, artifact_file: str) -> None:
        """A table the UI shows (``.json`` artifact in MLflow's table format)."""
        if frame.height:
            self.client.log_table(self.run_id, data=frame.to_pandas(), artifact_file=artifact_file)

    def log_matrix(self, matrix: Any, *, source: str | Path, digest: str | None = None, name: str | None = None,
                   context: str = "training") -> DatasetInput:
        """Log a :class:`~sparseeval.data.matrix.ResponseMatrix` as this run's dataset input.

        ``source``: where it was read from (the DuckDB store file); ``digest``: the store's data version
        of the benchmark (so the UI's digest matches DuckDB), else a hash of the matrix. The profile
        holds the rows (models), items, observed share and score range; the schema, the tensor shape.
        """
        return log_matrix_input(self.client, self.run_id, matrix, source=source, digest=digest, name=name,
                                context=context)


def _matrix_digest(matrix: Any) -> str:
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(matrix.values, dtype=np.float32).tobytes())
    h.update(np.ascontiguousarray(matrix.observed).tobytes())
    h.update(np.ascontiguousarray(matrix.scores, dtype=np.float32).tobytes())
    h.update("\x1f".join(matrix.models).encode())
    h.update("\x1f".join(matrix.items).encode())
    return h.hexdigest()[:16]


def log_matrix_input(client: MlflowClient, run_id: str, matrix: Any, *, source: str | Path,
                     digest: str | None = None, name: str | None = None, context: str = "training") -> DatasetInput:
    """Log ``matrix`` (models x items responses + scores) as a dataset input of ``run_id`` (see
    :meth:`TrackedRun.log_matrix`); returns what was logged."""
    import mlflow.data
    from mlflow.data.sources import LocalArtifactDatasetSource

    source_uri = str(source) if "://" in str(source) else Path(source).resolve().as_uri()
    n_models, n_items = matrix.values.shape
    dataset = mlflow.data.from_numpy(matrix.values, targets=matrix.scores,
                                     source=LocalArtifactDatasetSource(source_uri),
                                     name=name or f"response_matrix/{matrix.benchmark}",
                                     digest=(digest or _matrix_digest(matrix))[:36])
    entity = dataset._to_mlflow_entity()
    observed = float(np.mean(matrix.observed)) if matrix.observed.size else 0.0
    profile = {"num_rows": int(n_models), "num_items": int(n_items), "benchmark": matrix.benchmark,
               "observed_share": round(observed, 6),
               "score_min": float(np.min(matrix.scores)) if n_models else None,
               "score_max": float(np.max(matrix.scores)) if n_models else None,
               "dropped_models": len(getattr(matrix, "dropped_models", []) or [])}
    entity = DatasetEntity(name=entity.name, digest=entity.digest, source_type=entity.source_type,
                           source=entity.source, schema=entity.schema, profile=json.dumps(profile))
    logged = DatasetInput(dataset=entity, tags=[InputTag("mlflow.data.context", context),
                                                InputTag("benchmark", matrix.benchmark)])
    client.log_inputs(run_id, datasets=[logged])
    return logged


@contextlib.contextmanager
def tracked_run(cfg: TrackingConfig, step: str, *, benchmark: str | None = None, name: str | None = None,
                params: Mapping[str, Any] | None = None, tags: Mapping[str, Any] | None = None,
                parent_run_id: str | None = None) -> Iterator[TrackedRun]:
    """One MLflow run around the work of one refresh step: opened on entry (its start time is when
    the work starts), FINISHED on a clean exit, FAILED on an exception (KILLED on Ctrl-C), so its
    duration in the UI is the step's real duration.

    Tags ``sparseeval.kind = "refresh"``, ``sparseeval.step = step``, ``benchmark`` (group or filter by
    them in the UI); the run name is ``<benchmark>/<step>``. The :class:`TrackedRun` logs params,
    metrics, the matrix as dataset input and artifacts; its ``run_id`` can be passed to
    :func:`log_evaluation_run`, :func:`log_comparison` and :func:`register_predictor` so they write
    into this run instead of making their own.
    """
    client = cfg.client()
    exp_id = ensure_experiment(cfg, client)
    run_tags = {"sparseeval.kind": "refresh", "sparseeval.step": step, **(tags or {})}
    if benchmark is not None:
        run_tags["benchmark"] = benchmark
    if parent_run_id:
        run_tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(exp_id, run_name=name or "/".join(p for p in (benchmark, step) if p),
                            tags={k: str(v) for k, v in run_tags.items() if v is not None})
    handle = TrackedRun(cfg, client, run.info.run_id)
    try:
        if params:
            handle.log_params(params)
        yield handle
    except BaseException as exc:
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        with contextlib.suppress(Exception):  # never hide the step's own error behind a tracking one
            client.set_terminated(handle.run_id, status=status)
        raise
    client.set_terminated(handle.run_id, status="FINISHED")


def log_evaluation_run(cfg: TrackingConfig, *, benchmark: str, method: str, k: int, seed: int,
                       params: Mapping[str, Any], metrics: Mapping[str, Any],
                       anchors: Sequence[Mapping[str, Any]], predictor_state_path: Path | None = None,
                       extra_artifacts: Sequence[Path] = (), tags: Mapping[str, Any] | None = None,
                       parent_run_id: str | None = None, run_id: str | None = None) -> str:
    """Record one (benchmark, method, k, seed) evaluation as its own run; return the run id.

    ``metrics`` typically holds mae, tau, rho, max_error and seconds; ``anchors`` the chosen items
    as dicts (position, item_id, weight), saved as ``anchors.json`` and ``anchors.csv`` so the
    anchor set can be read back without sparseeval. The predictor state goes under ``predictor/``.
    ``run_id``: write into that open run (a :func:`tracked_run`) instead of a new one.
    """
    client = cfg.client()
    exp_id = ensure_experiment(cfg, client)
    run_tags = {"sparseeval.kind": "evaluation", "benchmark": benchmark, "method": method,
                "k": k, "seed": seed, **(tags or {})}
    if parent_run_id:
        run_tags["mlflow.parentRunId"] = parent_run_id
    with _Run(client, exp_id, f"{benchmark}-{method}-k{k}-s{seed}", run_tags, run_id) as run:
        all_params = {"benchmark": benchmark, "method": method, "k": k, "seed": seed, **params}
        logged = run.run.data.params
        client.log_batch(run.run_id, metrics=_metric_list(metrics),
                         params=[Param(key, _param_value(v)) for key, v in all_params.items()
                                 if logged.get(key) != _param_value(v)])
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
                   tags: Mapping[str, Any] | None = None, run_id: str | None = None,
                   plots: Sequence[Path] = ()) -> str:
    """A parent run holding a benchmark's method comparison table (and its plot); return its id.

    The table is logged both as an MLflow table (``comparison.json``, viewable in the UI) and as
    ``comparison.csv``. ``child_run_ids`` (the evaluation runs it summarises) are nested under it.
    The mean over seeds of each (method, K) is logged as metrics ``mae/<method>/k<K>`` and
    ``tau/<method>/k<K>`` (the same keys every refresh, so the chart view compares refreshes), and
    ``best_mae/k<K>``. ``plots`` are logged under ``plots/``; ``run_id`` writes into that open run
    (a :func:`tracked_run`) instead of a new one.
    """
    client = cfg.client()
    exp_id = ensure_experiment(cfg, client)
    run_tags = {"sparseeval.kind": "comparison", "benchmark": benchmark, **(tags or {})}
    with _Run(client, exp_id, f"{benchmark}-comparison", run_tags, run_id) as run:
        frame = pl.DataFrame([dict(r) for r in rows], infer_schema_length=None)
        logged = run.run.data.params
        client.log_batch(run.run_id, params=[p for p in (Param("benchmark", benchmark), Param("n_rows", str(len(rows))))
                                             if logged.get(p.key) != p.value])
        summary = comparison_metrics(frame)
        if summary:
            client.log_batch(run.run_id, metrics=_metric_list(summary))
        if frame.height:
            client.log_table(run.run_id, data=frame.to_pandas(), artifact_file="comparison.json")
        with tempfile.TemporaryDirectory() as tmp:
            csv = Path(tmp) / "comparison.csv"
            frame.write_csv(csv)
            client.log_artifact(run.run_id, str(csv))
        if plot_path is not None:
            client.log_artifact(run.run_id, str(plot_path))
        for plot in plots:
            client.log_artifact(run.run_id, str(plot), "plots")
        for child in child_run_ids:
            client.set_tag(child, "mlflow.parentRunId", run.run_id)
        return run.run_id


def comparison_metrics(frame: pl.DataFrame) -> dict[str, float]:
    """Per (method, K) mean over seeds: ``mae/<method>/k<K>``, ``tau/<method>/k<K>``; per K the best
    method's MAE ``best_mae/k<K>``. Empty when the rows lack method, k or mae."""
    if frame.height == 0 or not {"method", "k", "mae"} <= set(frame.columns):
        return {}
    aggs = [pl.col("mae").mean().alias("mae")]
    if "tau" in frame.columns:
        aggs.append(pl.col("tau").mean().alias("tau"))
    means = frame.group_by("method", "k").agg(aggs).sort("k", "method")
    out: dict[str, float] = {}
    for row in means.iter_rows(named=True):
        for key in ("mae", "tau"):
            if row.get(key) is not None:
                out[f"{key}/{row['method']}/k{row['k']}"] = float(row[key])
    for row in means.group_by("k").agg(pl.col("mae").min()).iter_rows(named=True):
        if row["mae"] is not None:
            out[f"best_mae/k{row['k']}"] = float(row["mae"])
    return out


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


_MODEL_CODE = """\
import mlflow

from sparseeval.publish.tracking import SparseEvalPredictorModel

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


def predictor_facts(predictor_dir: Path) -> dict[str, Any]:
    """What a registry page should say about a predictor folder, read from its ``predictor.json``
    (empty for a bare state folder): method, K, interval level, training models, evaluation settings."""
    try:
        meta = json.loads((Path(predictor_dir) / "predictor.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    cal = meta.get("calibration") or {}
    train = meta.get("train_models") or {}
    settings = (meta.get("extra") or {}).get("settings") or {}
    facts: dict[str, Any] = {
        "method": meta.get("method"), "k": meta.get("k"),
        "interval_level": round(1.0 - float(cal["alpha"]), 4) if cal.get("alpha") is not None else None,
        "interval_mode": cal.get("mode"), "train_models": train.get("count"),
        "calibration_models": cal.get("n_calibration"),
        "calibration_mae_points": round(float(cal["calibration_mae_points"]), 3)
        if cal.get("calibration_mae_points") is not None else None,
        "mean_halfwidth_points": round(float(cal["mean_halfwidth_points"]), 3)
        if cal.get("mean_halfwidth_points") is not None else None,
        "content_hash": meta.get("content_hash"), "library_version": meta.get("library_version"),
    }
    for key in ("task", "n_shot", "metric", "filter", "harness", "harness_version"):
        if settings.get(key) is not None:
            facts[f"settings.{key}"] = settings[key]
    return {k: v for k, v in facts.items() if v is not None}


def _model_description(benchmark: str) -> str:
    name = registered_model_name(benchmark)
    return (f"SparseEval anchor predictor for **{benchmark}**: run a new model on the K anchor items only, "
            f"and this model maps its answers (one row per model, one column per anchor in anchor order; "
            f"NaN = not answered) to its predicted full {benchmark} score in [0, 1].\n\n"
            f"Alias `champion` is the published version (the one `sparseeval predict --benchmark {benchmark}` "
            f"uses); `challenger` a re-selected anchor set published for comparison. Load with "
            f"`mlflow.pyfunc.load_model(\"models:/{name}@champion\")`; intervals and OOD warnings come from "
            f"`sparseeval predict` on the predictor folder. Tags: benchmark, K, method and the evaluation "
            f"settings of the champion's training data.")


def _version_description(benchmark: str, facts: Mapping[str, Any], alias: str) -> str:
    parts = [f"{benchmark}: K = {facts.get('k', '?')} anchors chosen by `{facts.get('method', '?')}`"]
    if "train_models" in facts:
        parts.append(f"fitted on {facts['train_models']} models")
    if "calibration_mae_points" in facts:
        parts.append(f"held-out MAE {facts['calibration_mae_points']:.2f} points on "
                     f"{facts.get('calibration_models', '?')} calibration models")
    if "interval_level" in facts:
        parts.append(f"{facts['interval_level']:.0%} conformal intervals, mean half-width "
                     f"{facts.get('mean_halfwidth_points', float('nan')):.2f} points")
    settings = ", ".join(f"{k.removeprefix('settings.')}={v}" for k, v in facts.items() if k.startswith("settings."))
    if settings:
        parts.append(f"training data run with {settings}")
    return "; ".join(parts) + f". Registered as `{alias}`."


def register_predictor(cfg: TrackingConfig, *, benchmark: str, predictor_dir: Path, run_id: str,
                       alias: str = CHAMPION, description: str | None = None,
                       tags: Mapping[str, Any] | None = None, artifact_path: str = "model",
                       move_alias: bool = True) -> str:
    """Log ``predictor_dir`` as a pyfunc model under ``run_id`` and register it as a new version of
    ``sparseeval-<benchmark>``; move ``alias`` to that version (unless ``move_alias`` is false: the
    publisher moves it as its own step) and return the version number.

    Only the files and a one-line model script are stored; loading the model needs sparseeval
    installed (declared in the model's requirements), which keeps the artifact small.

    The registered model gets a description (what it does, how to load it) and, when ``alias`` is
    the champion, the champion's tags (benchmark, k, method, interval level, settings.*); the version
    gets a description (``description``, else one written from ``predictor.json``) and those tags
    plus ``tags`` (e.g. data_version, anchor_set_id, role). ``artifact_path``: where the model goes in
    the run (distinct per model when one run registers several).
    """
    predictor_dir = Path(predictor_dir)
    if not predictor_dir.is_dir():
        raise FileNotFoundError(f"{predictor_dir}: predictor folder not found")
    client = cfg.client()
    run = client.get_run(run_id)
    from sparseeval.core import __version__

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
                # a saved predictor runs in NumPy: loading the model needs no torch (sparseeval's light install)
                pip_requirements=[f"sparseeval=={__version__}", f"mlflow=={mlflow.__version__}",
                                  f"numpy=={np.__version__}"],
                metadata={"benchmark": benchmark},
            )
        client.log_artifacts(run_id, str(model_dir), artifact_path)
    name = registered_model_name(benchmark)
    facts = predictor_facts(predictor_dir)
    model_tags = {"benchmark": benchmark, **{k: str(v) for k, v in facts.items()
                                             if k in ("k", "method", "interval_level") or k.startswith("settings.")}}
    try:
        client.create_registered_model(name, tags=model_tags, description=_model_description(benchmark))
    except MlflowException as err:
        if err.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        if alias == CHAMPION:  # the model's tags describe its champion
            client.update_registered_model(name, description=_model_description(benchmark))
            for key, value in model_tags.items():
                client.set_registered_model_tag(name, key, value)
    version_tags = {"benchmark": benchmark, "registered_as": alias, **{k: str(v) for k, v in facts.items()},
                    **{k: str(v) for k, v in (tags or {}).items() if v is not None}}
    version = client.create_model_version(name, source=f"{run.info.artifact_uri}/{artifact_path}", run_id=run_id,
                                          tags=version_tags,
                                          description=description or _version_description(benchmark, facts, alias))
    if move_alias:
        client.set_registered_model_alias(name, alias, version.version)
    return str(version.version)


def find_registered_version(cfg: TrackingConfig, *, benchmark: str, content_hash: str) -> str | None:
    """The oldest registered version of ``benchmark``'s model whose predictor has ``content_hash``
    (its version tag), or None: a publication retried after a crash reuses it instead of
    registering the same predictor twice."""
    client = cfg.client()
    name = registered_model_name(benchmark)
    try:
        versions = client.search_model_versions(f"name = '{name}'")
    except MlflowException as err:
        if err.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    found = sorted(int(v.version) for v in versions if (v.tags or {}).get("content_hash") == content_hash)
    return str(found[0]) if found else None


def set_alias(cfg: TrackingConfig, *, benchmark: str, alias: str, version: str) -> None:
    """Point ``alias`` of ``benchmark``'s registered model at ``version`` (idempotent)."""
    cfg.client().set_registered_model_alias(registered_model_name(benchmark), alias, str(version))


def alias_version(cfg: TrackingConfig, *, benchmark: str, alias: str) -> str | None:
    """The version ``alias`` points to, or None when the model or the alias does not exist."""
    try:
        return str(cfg.client().get_model_version_by_alias(registered_model_name(benchmark), alias).version)
    except MlflowException as err:
        if err.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            return None
        raise


def registered_versions(cfg: TrackingConfig, *, benchmark: str) -> list[str]:
    """Every registered version of ``benchmark``'s model (the simulation counts them per day)."""
    try:
        versions = cfg.client().search_model_versions(f"name = '{registered_model_name(benchmark)}'")
    except MlflowException as err:
        if err.error_code == "RESOURCE_DOES_NOT_EXIST":
            return []
        raise
    return sorted((str(v.version) for v in versions), key=int)


def download_predictor(cfg: TrackingConfig, *, benchmark: str, dst: Path, alias: str = CHAMPION) -> Path:
    """Download the predictor folder of the version under ``alias`` into ``dst``; return the folder."""
    client = cfg.client()
    version = client.get_model_version_by_alias(registered_model_name(benchmark), alias)
    Path(dst).mkdir(parents=True, exist_ok=True)
    local = mlflow.artifacts.download_artifacts(artifact_uri=f"{version.source}/artifacts/predictor",
                                                dst_path=str(dst))
    return Path(local)


def runs_page_url(cfg: TrackingConfig, ui: str = "http://127.0.0.1:5000") -> str:
    """The URL of the experiment's runs in the MLflow UI at ``ui`` (for summaries and docs).

    MLflow 3.17's UI chooses between its GenAI and model-training pages with a browser-wide switch
    (GenAI in a fresh browser) that the ``workflowType`` URL parameter overrides, so the link says
    ``machine_learning``; the experiment itself is tagged ``custom_model_development``.
    """
    return f"{ui.rstrip('/')}/#/experiments/{ensure_experiment(cfg)}/runs?workflowType=machine_learning"
