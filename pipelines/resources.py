"""Dagster resources: thin handles on the library's DuckDB store, MLflow tracking and settings.

Every setting, its default and its environment variable is declared in :mod:`sparseeval.core.settings` (the
CLI reads the same declarations). :func:`default_resources` reads every variable once, when the code location
loads, checked by its declared type (a bad value is refused naming the variable); a run's config can change
any of them in the UI, checked the same way when the run starts (:meth:`SettingsResource.settings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field, create_model

from sparseeval.core import settings as defaults
from sparseeval.core.settings import RefreshSettings
from sparseeval.data.access.hub_sources import HubSource, parse_sources, parse_tasks
from sparseeval.data.access.matrix_store import MatrixStore
from sparseeval.data.store import Store
from sparseeval.data.synthetic import generate_leaderboard, write_leaderboard
from sparseeval.publish.tracking import TrackingConfig


class StoreResource(dg.ConfigurableResource):
    """The DuckDB store (writers hold it only per transaction; analysts read the snapshot)."""

    path: str

    def store(self) -> Store:
        return Store(self.path)

    def matrices(self) -> MatrixStore:
        """The stored matrices beside the DuckDB file (kept up to date by appending new models)."""
        return MatrixStore.beside(self.store())


class TrackingResource(dg.ConfigurableResource):
    """MLflow: local sqlite store with an explicit artifact folder by default, any URI by setting."""

    data_dir: str
    tracking_uri: str | None = None
    experiment: str = TrackingConfig.experiment

    def config(self) -> TrackingConfig:
        return TrackingConfig(tracking_uri=self.tracking_uri or None, experiment=self.experiment,
                              data_dir=Path(self.data_dir))


class SourceResource(dg.ConfigurableResource):
    """Where raw results come from: comma-separated sources (:func:`sparseeval.data.access.hub_sources.parse_sources`):
    folders of result units (files or unit folders) in any supported format, ``hf://datasets/ORG/REPO[@rev]``
    and ``hf://datasets/ORG/GLOB``. Every folder is ingested and watched; Hub repos are fetched incrementally.

    Empty ``path`` means ``<data dir>/source``, seeded with the embedded synthetic leaderboard in
    ``<data dir>/source/synthetic``; files dropped beside it are ingested too (the sensor sees them).
    """

    path: str = ""
    data_dir: str = defaults.SETTINGS["data_dir"].default
    synthetic_seed: int = 0
    #: SPARSEEVAL_HUB_TASKS: the tasks whose files a Hub source downloads ('' = all)
    hub_tasks: str = defaults.SETTINGS["hub_tasks"].default

    def hub(self) -> list[HubSource]:
        """The ``hf://datasets/...`` sources among the comma-separated ``path``."""
        return [s for s in parse_sources(self.path) if isinstance(s, HubSource)]

    def wanted_tasks(self) -> list[str]:
        return parse_tasks(self.hub_tasks)

    def folders(self) -> list[Path]:
        """Every local folder among the comma-separated ``path`` (none when only Hub sources are named)."""
        local = [s for s in parse_sources(self.path) if isinstance(s, Path)]
        if local or self.path:
            return local
        return [self._embedded()]

    def _embedded(self) -> Path:
        root = Path(self.data_dir) / "source"
        embedded = root / "synthetic"
        if not (embedded / "responses.parquet").is_file():
            # deterministic (seeded) and written atomically, so regenerating is harmless
            write_leaderboard(generate_leaderboard(seed=self.synthetic_seed), embedded)
        return root


def _resource_fields() -> dict[str, Any]:
    """The Dagster config fields of :class:`SettingsResource`, one per field of
    :class:`~sparseeval.core.settings.RefreshSettings`: its type (a list as its comma-separated text: Dagster's
    config has no tuples), default and description."""
    fields: dict[str, Any] = {}
    for name, declared in RefreshSettings.model_fields.items():
        kind, default = declared.annotation, declared.default
        if isinstance(default, tuple):
            kind, default = str, ",".join(map(str, default))
        fields[name] = (kind, Field(default, description=declared.description))
    return fields


class _SettingsBase(dg.ConfigurableResource):
    """What :class:`SettingsResource` adds to the declared settings: where predictors are published, and the
    settings as the library takes them."""

    predictor_dir: str = str(Path(defaults.SETTINGS["data_dir"].default) / defaults.PREDICTORS_FOLDER)

    def settings(self) -> RefreshSettings:
        """The refresh's settings, checked by their declared types (a bad value in the run's config is
        refused naming the setting)."""
        return RefreshSettings.from_values({name: getattr(self, name) for name in RefreshSettings.model_fields})


#: every refresh setting as Dagster config the UI shows and edits (generated: a setting is declared once, in
#: :class:`sparseeval.core.settings.RefreshSettings`), plus the predictors folder
SettingsResource = create_model("SettingsResource", __base__=_SettingsBase, __module__=__name__,
                                __doc__="Every refresh setting of a run, as Dagster config (generated from "
                                        "sparseeval.core.settings.RefreshSettings), and the predictors folder.",
                                **_resource_fields())


def _config_value(value: Any) -> Any:
    """A setting's value as Dagster config holds it (a list as its comma-separated text)."""
    return ",".join(map(str, value)) if isinstance(value, tuple) else value


def default_resources() -> dict[str, Any]:
    """Resources configured from :mod:`sparseeval.core.settings` (environment variables or defaults)."""
    from pipelines.io_managers import MatrixIOManager

    root = defaults.data_dir()
    refresh = RefreshSettings.from_environment()
    return {
        "store": StoreResource(path=str(defaults.db_path())),
        "tracking": TrackingResource(data_dir=str(root), tracking_uri=defaults.foreign("MLFLOW_TRACKING_URI") or None),
        "source": SourceResource(path=defaults.SETTINGS["source"].get(), data_dir=str(root),
                                 hub_tasks=defaults.SETTINGS["hub_tasks"].get()),
        "settings": SettingsResource(predictor_dir=str(defaults.predictor_dir()),
                                     **{name: _config_value(value) for name, value in refresh}),
        "io_manager": MatrixIOManager(base_dir=str(root / "dagster_io")),
    }

