"""MLflow runs: what a refresh step, an evaluation and a method comparison log.

Split from :mod:`sparseeval.publish.tracking` (the configuration and experiment it writes into) so
that run logging reads on its own; with :mod:`sparseeval.publish.tracking_registry` these are the
modules of the library that import mlflow. :func:`tracked_run` wraps one refresh step's work in a run
(a :class:`TrackedRun` logs params, metrics, the response matrix as dataset input and artifacts);
:func:`log_evaluation_run` and :func:`log_comparison` record an evaluation and a comparison table,
into a run of their own or into an open :func:`tracked_run`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

# first: importing sparseeval.publish.tracking sets mlflow's environment and log levels before mlflow loads
from sparseeval.publish.tracking import TrackingConfig, ensure_experiment

# isort: split
from mlflow import MlflowClient
from mlflow.entities import Dataset as DatasetEntity
from mlflow.entities import DatasetInput, InputTag, Metric, Param, RunTag

_MAX_PARAM_LEN = 6000  # MLflow's limit on a param value


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

