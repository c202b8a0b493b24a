"""Dagster resources: thin handles on the library's DuckDB store, MLflow tracking and settings.

Every default and its environment variable lives in :mod:`sparseeval.core.settings` (the CLI reads the
same module). A variable that is set is passed as ``dg.EnvVar`` (the UI shows it as coming from the
environment, and its value is read when the run starts); an unset one takes the default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

from sparseeval.core import settings as defaults
from sparseeval.data.access.hub_sources import HubSource, parse_sources, parse_tasks
from sparseeval.data.access.matrix_store import MatrixStore
from sparseeval.data.store import Store
from sparseeval.data.synthetic import generate_leaderboard, write_leaderboard
from sparseeval.publish.comparison import ComparisonSettings
from sparseeval.publish.refresh_policy import FitSettings
from sparseeval.publish.tracking import TrackingConfig


def _env_or(name: str, default: Any = None) -> Any:
    """``dg.EnvVar`` for a setting whose variable is set, else ``default`` (None: the setting's own,
    as the resource field holds it: a number parsed, a list as its comma-separated text)."""
    setting = defaults.SETTINGS[name]
    if setting.is_set():
        return dg.EnvVar.int(setting.env) if setting.parse is int else dg.EnvVar(setting.env)
    if default is not None:
        return default
    return setting.default_value if setting.parse in (int, float) else setting.default


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


_FIT, _COMPARE = FitSettings(), ComparisonSettings()


class SettingsResource(dg.ConfigurableResource):
    """Selection, publishing and comparison settings shared by every asset of a run
    (defaults: :mod:`sparseeval.core.settings`)."""

    # the library's defaults (FitSettings, ComparisonSettings), as Dagster config the UI shows and edits
    k: int = _FIT.k
    method: str = _FIT.method
    seed: int = _FIT.seed
    val_frac: float = _FIT.val_frac
    test_frac: float = _FIT.test_frac
    split_policy: str = _FIT.split_policy
    device: str = _FIT.device
    alpha: float = _FIT.alpha  #: 1 - interval coverage
    compare_methods: str = ",".join(_COMPARE.methods)
    compare_ks: str = ",".join(map(str, _COMPARE.ks))
    compare_seeds: int = _COMPARE.seeds
    #: seconds the comparison may take per benchmark (0: no budget); it decides which cells run
    compare_budget_s: float = _COMPARE.budget_s
    compare_new_share: float = _COMPARE.new_share
    challenger_margin: float = _FIT.challenger_margin
    challenger_min_days: float = _FIT.challenger_min_days
    coverage_tolerance: float = _FIT.coverage_tolerance
    frontier_silent_max: float = _FIT.frontier_silent_max
    frontier_quantile: float = _FIT.frontier_quantile  #: where the frontier self-check cuts the fitting models
    predictor_dir: str = str(Path(defaults.SETTINGS["data_dir"].default) / defaults.PREDICTORS_FOLDER)
    joint_benchmarks: str = _FIT.joint_benchmarks  #: benchmarks of the joint predictor ("" every plain one, "none" off)
    probe_items: int = _FIT.probe_items  #: the probe's first batch (0: predictors without a probe)
    probe_batch: int = _FIT.probe_batch  #: items per later step of the probe
    probe_max: int = _FIT.probe_max  #: the most probe items asked of one model
    probe_target: float = _FIT.probe_target  #: the probe's target sampling half-width, points
    probe_from: float = _FIT.probe_from  #: the calibration predictions' quantile from which the probe is asked

    def fit(self) -> FitSettings:
        """The refresh's settings as the library takes them."""
        return FitSettings(k=self.k, method=self.method, seed=self.seed, val_frac=self.val_frac,
                           test_frac=self.test_frac, split_policy=self.split_policy, alpha=self.alpha,
                           coverage_tolerance=self.coverage_tolerance, challenger_margin=self.challenger_margin,
                           challenger_min_days=self.challenger_min_days,
                           frontier_silent_max=self.frontier_silent_max, frontier_quantile=self.frontier_quantile,
                           device=self.device, joint_benchmarks=self.joint_benchmarks,
                           probe_items=self.probe_items, probe_batch=self.probe_batch, probe_max=self.probe_max,
                           probe_target=self.probe_target, probe_from=self.probe_from)

    def comparison(self) -> ComparisonSettings:
        """The comparison's settings as the library takes them."""
        return ComparisonSettings(methods=tuple(m.strip() for m in self.compare_methods.split(",") if m.strip()),
                                  ks=tuple(int(k) for k in self.compare_ks.split(",") if k.strip()),
                                  seeds=self.compare_seeds, seed=self.seed, split_policy=self.split_policy,
                                  val_frac=self.val_frac, test_frac=self.test_frac, device=self.device,
                                  budget_s=self.compare_budget_s, new_share=self.compare_new_share)

    def fit_settings(self) -> dict[str, Any]:
        """Every setting that changes a fit, its calibration or its publishing checks (the fit key)."""
        return self.fit().key_settings()

    def comparison_settings(self) -> dict[str, Any]:
        """Every setting that changes the comparison (its key); the budget decides which of its cells run."""
        return self.comparison().key_settings()

    def joint_settings(self) -> dict[str, Any]:
        """The joint predictor's fit key settings: a benchmark's, its benchmark list and reference method."""
        return self.fit().joint_key_settings()


def default_resources() -> dict[str, Any]:
    """Resources configured from :mod:`sparseeval.core.settings` (environment variables or defaults)."""
    from pipelines.io_managers import MatrixIOManager

    root = defaults.data_dir()
    return {
        "store": StoreResource(path=_env_or("db", str(defaults.db_path()))),
        "tracking": TrackingResource(data_dir=str(root), tracking_uri=defaults.foreign("MLFLOW_TRACKING_URI") or None),
        "source": SourceResource(path=_env_or("source"), data_dir=str(root), hub_tasks=_env_or("hub_tasks")),
        "settings": SettingsResource(
            **{name: _env_or(name) for name in ("k", "method", "seed", "device", "compare_methods", "compare_seeds",
                                                "compare_ks", "joint_benchmarks")},
            predictor_dir=_env_or("predictors", str(defaults.predictor_dir())),
            # floats and bounded numbers: read (and checked) once here (dg.EnvVar carries strings and ints only,
            # unchecked)
            **{name: defaults.SETTINGS[name].value() for name in (
                "alpha", "challenger_margin", "challenger_min_days", "coverage_tolerance", "compare_new_share",
                "compare_budget_s", "frontier_silent_max", "frontier_quantile", "probe_items", "probe_batch",
                "probe_max", "probe_target", "probe_from")},
        ),
        "io_manager": MatrixIOManager(base_dir=str(root / "dagster_io")),
    }

