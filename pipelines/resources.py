"""Dagster resources: thin handles on the library's DuckDB store, MLflow tracking and settings.

Defaults come from environment variables (read once when the definitions load), so
``make run``, ``dagster dev`` and the schedule all use the same data folder:

* ``SPARSEEVAL_DATA_DIR`` (default ``data``): DuckDB file, MLflow store, predictors, embedded source
* ``SPARSEEVAL_SOURCE``: a results folder in any supported format; empty = the embedded synthetic
  leaderboard, generated into ``<data dir>/source/synthetic``
* ``SPARSEEVAL_DB``, ``MLFLOW_TRACKING_URI``: override the DuckDB file / the MLflow store
* ``SPARSEEVAL_K``, ``SPARSEEVAL_METHOD``, ``SPARSEEVAL_SEED``, ``SPARSEEVAL_DEVICE``: selection settings
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from sparseeval.evaluation import ProtocolConfig
from sparseeval.store import Store
from sparseeval.synthetic import generate_leaderboard, write_leaderboard
from sparseeval.tracking import TrackingConfig


def data_dir() -> Path:
    return Path(os.environ.get("SPARSEEVAL_DATA_DIR", "data"))


class StoreResource(dg.ConfigurableResource):
    """The DuckDB store (writers hold it only per transaction; analysts read the snapshot)."""

    path: str

    def store(self) -> Store:
        return Store(self.path)


class TrackingResource(dg.ConfigurableResource):
    """MLflow: local sqlite store with an explicit artifact folder by default, any URI by setting."""

    data_dir: str
    tracking_uri: str | None = None
    experiment: str = "sparseeval"

    def config(self) -> TrackingConfig:
        return TrackingConfig(tracking_uri=self.tracking_uri or None, experiment=self.experiment,
                              data_dir=Path(self.data_dir))


class SourceResource(dg.ConfigurableResource):
    """Where raw results come from: a folder of result units (files or unit folders) in any supported format.

    Empty ``path`` means ``<data dir>/source``, seeded with the embedded synthetic leaderboard in
    ``<data dir>/source/synthetic``; files dropped beside it are ingested too (the sensor sees them).
    """

    path: str = ""
    data_dir: str = "data"
    synthetic_seed: int = 0

    def resolve(self) -> Path:
        if self.path:
            return Path(self.path)
        root = Path(self.data_dir) / "source"
        embedded = root / "synthetic"
        if not (embedded / "responses.parquet").is_file():
            # deterministic (seeded) and written atomically, so regenerating is harmless
            write_leaderboard(generate_leaderboard(seed=self.synthetic_seed), embedded)
        return root


class SettingsResource(dg.ConfigurableResource):
    """Selection and evaluation settings shared by every asset of a run."""

    k: int = 20
    method: str = "sparseeval-mlp"
    seed: int = 0
    val_frac: float = 0.1
    test_frac: float = 0.2
    split_policy: str = "random"
    device: str = "auto"
    alpha: float = 0.1  #: 1 - interval coverage
    compare_methods: str = "random,random-linear,anchor-points,gp-irt,sparseeval-linear,sparseeval-mlp"
    compare_ks: str = "10,20"
    compare_seeds: int = 3
    predictor_dir: str = "data/predictors"

    def protocol(self) -> ProtocolConfig:
        return ProtocolConfig(split_policy=self.split_policy, val_frac=self.val_frac,  # type: ignore[arg-type]
                              test_frac=self.test_frac)

    def methods(self) -> list[str]:
        return [m.strip() for m in self.compare_methods.split(",") if m.strip()]

    def ks(self) -> list[int]:
        return [int(k) for k in self.compare_ks.split(",") if k.strip()]


def default_resources() -> dict[str, dg.ConfigurableResource]:
    """Resources configured from the environment (see module docstring)."""
    root = data_dir()
    env = os.environ
    return {
        "store": StoreResource(path=env.get("SPARSEEVAL_DB", str(root / "sparseeval.duckdb"))),
        "tracking": TrackingResource(data_dir=str(root), tracking_uri=env.get("MLFLOW_TRACKING_URI") or None),
        "source": SourceResource(path=env.get("SPARSEEVAL_SOURCE", ""), data_dir=str(root)),
        "settings": SettingsResource(
            k=int(env.get("SPARSEEVAL_K", "20")),
            method=env.get("SPARSEEVAL_METHOD", "sparseeval-mlp"),
            seed=int(env.get("SPARSEEVAL_SEED", "0")),
            device=env.get("SPARSEEVAL_DEVICE", "auto"),
            compare_seeds=int(env.get("SPARSEEVAL_COMPARE_SEEDS", "3")),
            compare_ks=env.get("SPARSEEVAL_COMPARE_KS", "10,20"),
            predictor_dir=str(root / "predictors"),
        ),
    }
