"""MLflow model registry: registering a predictor folder as a pyfunc model version, and its aliases.

Split from :mod:`sparseeval.publish.tracking` (the configuration, and the pyfunc model class the
registered script loads) so that the registry reads on its own; with
:mod:`sparseeval.publish.tracking_runs` these are the modules of the library that import mlflow.
:func:`register_predictor` logs and registers ``sparseeval-<benchmark>`` versions with their
descriptions and tags; :func:`set_alias`, :func:`alias_version`, :func:`find_registered_version`,
:func:`registered_versions` and :func:`download_predictor` are what the publisher and the audit read
and move (the ``champion`` alias is the published version).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sparseeval.data.benchmarks import registered_model_name  # (also imported from here)

# first: importing sparseeval.publish.tracking sets mlflow's environment and log levels before mlflow loads
from sparseeval.publish.tracking import TrackingConfig, load_estimator_from_folder

# isort: split
import mlflow
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.types import Schema, TensorSpec

#: alias moved to the newest registered predictor version of a benchmark
CHAMPION = "champion"


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
