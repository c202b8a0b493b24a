"""Every setting of the product, declared once: its type, default, meaning, environment variable and the keys
it enters. Everything else is derived from these declarations.

Two declarations hold them, both pydantic models whose fields are the settings:

* :class:`RefreshSettings`: what a refresh computes (method, K, seed, interval level, checks, probe,
  comparison). Each field says which keys it enters (:data:`FIT`, :data:`JOINT`, :data:`COMPARISON`), so
  :meth:`RefreshSettings.key_settings` is the fit, joint and comparison key; the Dagster resource
  (``pipelines.resources.SettingsResource``) is generated from its fields; the CLI's options for them come
  from :func:`sparseeval.interfaces.commands.arguments.add_setting_arguments`;
* :class:`ProcessSettings`: where things live and how processes run (data folder, store, sources, served
  mode, threads).

From both, :data:`SETTINGS` is the table of every ``SPARSEEVAL_*`` variable (:meth:`Setting.value` parses a
variable's text with the field's own pydantic type, :mod:`sparseeval.core.setting_kinds`, and refuses a bad
value naming the variable), and the settings tables of docs/settings.md
(:mod:`sparseeval.core.settings_table`, ``make settings-table``). :data:`FIXED` holds the library
defaults no variable overrides, :data:`FOREIGN` other tools' variables the product reads or sets. Adding a
setting is one field here (``tests/test_settings_home.py`` proves a new field reaches the environment, the
resource, the CLI, the keys and the table). Values are read when asked (not at import), so a changed
environment is honoured by long-lived processes and tests.

Why pydantic and not pydantic-settings: the models parse and validate (lax, from the environment's text);
reading the declared variables is a loop over the fields, and pydantic-settings would add python-dotenv to
the light install for nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from sparseeval.core.errors import UsageError
from sparseeval.core.setting_kinds import (
    Counts,
    CutQuantile,
    Device,
    Kind,
    Margin,
    Names,
    NonNegative,
    NonNegativeInt,
    OpenShare,
    Points,
    PositiveInt,
    Seed,
    Share,
    Text,
)


class SettingError(UsageError):
    """An environment variable whose value cannot be what it sets (the message names both)."""


# --------------------------------------------------------------------------------- the declarations

#: the keys a refresh setting can enter: the fit key of a benchmark's predictor, the joint predictor's, the
#: comparison's (``sparseeval.publish.refresh.fit_key`` / ``comparison_key`` hash them with the data version)
FIT, JOINT, COMPARISON = "fit", "joint", "comparison"
#: where a setting counts (the settings table says it)
SCOPES = {"refresh": "the refresh and the CLI", "pipeline": "the Dagster daemon", "runtime": "every process",
          "serve": "make serve", "test": "crash tests only"}


def setting(default: Any, help: str, *, keys: tuple[str, ...] = (), env: bool = True, scope: str = "refresh",
            key_name: str | None = None, with_probe: bool = False, flags: tuple[str, ...] | None = None) -> Any:
    """One setting's declaration (a pydantic field): its ``default``, what it is (``help``), the ``keys`` it
    enters (under ``key_name``, default its own), whether a ``SPARSEEVAL_*`` variable sets it (``env``),
    where it counts (``scope``), whether it enters a key only when the probe is on (``with_probe``), and the
    CLI ``flags`` that set it (default ``--name``)."""
    return Field(default, description=help, json_schema_extra={
        "keys": list(keys), "env": env, "scope": scope, "key_name": key_name, "with_probe": with_probe,
        "flags": list(flags) if flags else None})


def meta(field: FieldInfo) -> dict[str, Any]:
    """A declared field's metadata (:func:`setting`)."""
    extra = field.json_schema_extra
    return dict(extra) if isinstance(extra, dict) else {}


def env_name(name: str) -> str:
    """The variable of setting ``name``."""
    return "SPARSEEVAL_" + name.upper()


class Declared(BaseModel):
    """What both declarations share: read from the environment, and refused naming the variable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def from_environment(cls, **given: Any) -> Self:
        """The settings as the environment sets them (blank: unset), ``given`` values over them; a bad value
        is refused with a :class:`SettingError` naming the variable (or the given name) and what it holds."""
        values: dict[str, Any] = {}
        for name, field in cls.model_fields.items():
            raw = os.environ.get(env_name(name), "").strip() if meta(field).get("env", True) else ""
            if raw:
                values[name] = raw
        return cls._validated(values, given)

    @classmethod
    def check(cls, name: str, raw: Any) -> Any:
        """Setting ``name``'s value ``raw`` checked by its declared type (a ValueError when it is not one): what
        the CLI's options for the setting parse with."""
        try:
            return getattr(cls.model_validate({name: raw}), name)
        except ValidationError:
            raise ValueError(raw) from None

    @classmethod
    def from_values(cls, given: Mapping[str, Any]) -> Self:
        """The settings ``given`` (a Dagster run's config), the rest at their defaults; a bad value is refused
        with a :class:`SettingError` naming the setting."""
        return cls._validated({}, dict(given))

    @classmethod
    def _validated(cls, environment: dict[str, Any], given: dict[str, Any]) -> Self:
        try:
            return cls.model_validate({**environment, **given})
        except ValidationError as exc:
            name = str(exc.errors()[0]["loc"][0])
            where, got = (name, given[name]) if name in given else (f"${env_name(name)}", environment.get(name))
            raise SettingError(f"{where} must be {kind_of(cls.model_fields[name])}, got {got!r}") from None


def kind_of(field: FieldInfo) -> str:
    """What a field's value must be, in words."""
    return next((m.words for m in field.metadata if isinstance(m, Kind)), "valid")


class RefreshSettings(Declared):
    """What a refresh computes: every setting its fit, calibration, checks, probe, decision and comparison
    read. A field's ``keys`` say which keys a change to it changes (a changed key refreshes what it keys)."""

    method: Text = setting("sparseeval-headroom", "anchor method the pipeline publishes", keys=(FIT, JOINT))
    k: PositiveInt = setting(20, "anchors per benchmark", keys=(FIT, JOINT), flags=("-k", "--k"))
    joint_benchmarks: Text = setting(
        "", "benchmarks of the joint predictor, comma-separated (default: every benchmark without a variant suffix; "
            "'none' turns the joint predictor off)", keys=(JOINT,))
    seed: Seed = setting(0, "seed of the published split and fit", keys=(FIT, JOINT, COMPARISON))
    device: Device = setting("auto", "auto (CUDA when present), cpu or cuda")
    alpha: OpenShare = setting(0.1, "interval miscoverage (0.1: 90 % intervals)", keys=(FIT, JOINT))
    split_policy: Text = setting("random", "how models are split into train / val / test (random, family, date, "
                                           "frontier)", keys=(FIT, JOINT, COMPARISON), env=False)
    val_frac: OpenShare = setting(0.1, "share of the models held out for validation (early stopping, swaps)",
                                  keys=(FIT, JOINT, COMPARISON), env=False)
    test_frac: OpenShare = setting(0.2, "share of the models held out to score a fit (the held-out MAE and "
                                        "coverage)", keys=(FIT, JOINT, COMPARISON), env=False)
    compare_methods: Names = setting(
        ("random", "random-linear", "anchor-points", "gp-irt", "sparseeval-linear", "sparseeval-mlp"),
        "methods in the comparison", keys=(COMPARISON,), key_name="methods")
    compare_ks: Counts = setting((10, 20), "anchor counts in the comparison", keys=(COMPARISON,), key_name="ks")
    compare_seeds: PositiveInt = setting(3, "seeds (splits) in the comparison", keys=(COMPARISON,), key_name="seeds")
    compare_budget_s: NonNegative = setting(
        300.0, "seconds the method comparison may take per benchmark (0: no budget); above it fewer seeds, "
               "methods, Ks are run and the asset says so", keys=(COMPARISON,), key_name="budget_s")
    compare_new_share: Share = setting(
        0.1, "the method comparison runs right after a refresh only when the models added since the last "
             "comparison are at least this share of the benchmark; below it, it waits for its weekly schedule (the "
             "last comparison stands)")
    challenger_margin: Margin = setting(
        0.05, "a re-selected anchor set replaces the champion only if its held-out MAE is this fraction lower",
        keys=(FIT, JOINT))
    challenger_min_days: NonNegative = setting(30.0, "at most one champion change per this many days",
                                               keys=(FIT, JOINT))
    coverage_tolerance: Share = setting(
        0.1, "publishing check: held-out interval coverage within this of nominal (finite-sample slack)",
        keys=(FIT, JOINT))
    frontier_silent_max: Share = setting(
        0.15, "publishing check: on a frontier split of the candidate's own fitting models (fitted at or below "
              "SPARSEEVAL_FRONTIER_QUANTILE of the score, scored on the stronger rest), at most this share of the "
              "stronger models may fall outside their interval without an OOD flag (the interval's own "
              "miscoverage, 0.1 at 90 %, counts in it). Raised to publish a refused predictor knowingly, it does "
              "not silence `predict`: above the cut the self-check failed, a prediction is still warned at the "
              "default", keys=(FIT, JOINT))
    frontier_quantile: CutQuantile = setting(
        0.9, "where that frontier self-check cuts the candidate's fitting models by score (0.9: fitted on the "
             "weakest 90 %, scored on the strongest 10 %); lower it (0.8) where new models are expected further "
             "beyond the strongest ones: farther beyond, the intervals miss more often (docs/results/frontier.md)",
        keys=(FIT, JOINT))
    probe_items: NonNegativeInt = setting(
        40, "the probe's first batch: random items beyond the anchors that a model the anchors place at the top "
            "answers (`sparseeval next` names them, per model), its estimate and interval then come from them by "
            "design (sparseeval/estimate/probe.py); 0 publishes predictors without a probe",
        keys=(FIT,), with_probe=True, flags=("--probe",))
    probe_batch: PositiveInt = setting(
        20, "items the probe adds per step while its sampling half-width is above SPARSEEVAL_PROBE_TARGET",
        keys=(FIT,), with_probe=True)
    probe_max: PositiveInt = setting(200, "the most items a probe asks of one model", keys=(FIT,), with_probe=True)
    probe_target: Points = setting(
        5.0, "the probe's target: it asks for more items while its sampling half-width is above this many points "
             "(the interval adds a subset pool's line error, which more items do not shrink)",
        keys=(FIT,), with_probe=True)
    probe_from: OpenShare = setting(
        0.8, "the quantile of the calibration models' predictions from which a model is asked the probe (0.8: a "
             "fifth of ordinary models, more where many tie at the top), besides any the anchors flag as possibly "
             "above the training range", keys=(FIT,), with_probe=True)

    KINDS: ClassVar[tuple[str, ...]] = (FIT, JOINT, COMPARISON)

    def key_settings(self, kind: str) -> dict[str, Any]:
        """Every setting of ``kind``'s key (:data:`FIT`, :data:`JOINT`, :data:`COMPARISON`), by its key name; the
        probe's enter only when there is one (``probe_items`` > 0), so a deployment without a probe keeps its
        keys whatever the other probe settings say."""
        out: dict[str, Any] = {}
        for name, field in type(self).model_fields.items():
            m = meta(field)
            if kind not in m.get("keys", ()) or (m.get("with_probe") and not self.probe_items):
                continue
            value = getattr(self, name)
            out[m.get("key_name") or name] = list(value) if isinstance(value, tuple) else value
        return out


class ProcessSettings(Declared):
    """Where things live and how processes run: read where they are used (:func:`data_dir`, :func:`db_path`,
    :data:`SETTINGS`), never part of a key."""

    data_dir: Text = setting("data", "folder of the DuckDB store, MLflow store, predictors, embedded source",
                             scope="runtime")
    db: Text = setting("", "DuckDB file (default <data dir>/sparseeval.duckdb)", scope="runtime")
    predictors: Text = setting("", "published predictors (default <data dir>/predictors)", scope="runtime")
    source: Text = setting(
        "", "sources to ingest, comma-separated: results folders, hf://datasets/ORG/REPO[@revision] (one Hub "
            "dataset repo) and hf://datasets/ORG/GLOB (an org's matching repos); an unchanged repo costs one "
            "metadata call per refresh, a new commit downloads only its new files (default: the embedded synthetic "
            "leaderboard)")
    hub_tasks: Text = setting(
        "", "tasks whose files a Hub source downloads, comma-separated: leaderboard benchmarks (arc, mmlu, bbh, "
            "...), lm-eval task names, or globs of them (toy_*: a group's files carry its subtasks' names); the "
            "aggregate results_*.json always come (default: every result file)")
    duckdb_memory: Text = setting(
        "4GB", "memory limit of every DuckDB connection (it spills to disk beyond): the leaderboard's 210 M rows "
               "ingest in ~4 GB instead of DuckDB's default 80 % of RAM", scope="runtime")
    sensor_interval: PositiveInt = setting(
        30, "seconds between two evaluations of each sensor by the Dagster daemon (new files, stale benchmarks, "
            "joint predictor)", scope="pipeline")
    threads: NonNegativeInt | None = setting(
        None, "CPU threads per fit (0 or unset: every available CPU); the count changes floating-point sums, so the "
              "same seed gives the same fit at the same thread count on one machine (set it, e.g. to 1, to run fits "
              "side by side). Not across CPUs whose math kernels differ: there the same seed and count gave the "
              "same anchors on 4 of 5 shared benchmarks (mmlu's differed) and weights equal to about 1e-4",
        scope="runtime")
    pg_bin: Text = setting("/usr/lib/postgresql/15/bin", "folder of the PostgreSQL binaries (initdb, pg_ctl, psql) "
                                                         "of the served mode's local cluster", scope="serve")
    serve_dagster_port: PositiveInt = setting(3000, "port of the Dagster webserver (make serve)", scope="serve")
    serve_mlflow_port: PositiveInt = setting(5000, "port of the MLflow tracking server (make serve)", scope="serve")
    serve_mlflow_host: Text = setting(
        "127.0.0.1", "interface the MLflow server binds (make serve); anything but 127.0.0.1 turns on its "
                     "basic-auth app and needs MLFLOW_AUTH_ADMIN_PASSWORD", scope="serve")
    service: Text = setting(
        "", "set by make serve on every process a service starts (its name and data folder), never by hand: how a "
            "restart or make serve-stop finds a service's leftovers (read from /proc/PID/environ)", scope="serve")
    failpoint: Text = setting(
        "", "test-only hook: the publication step boundary (before-register, after-register, ..., after-alias) "
            "where the process kills itself (SIGKILL), so crash tests prove every boundary recoverable",
        scope="test")


# --------------------------------------------------------------------------------- every variable, as a table

def _text(value: Any) -> str:
    """A default as it would be written in the environment (empty: unset)."""
    if value is None:
        return ""
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Setting:
    """One ``SPARSEEVAL_*`` variable, as its declaration (a field of :class:`RefreshSettings` or
    :class:`ProcessSettings`) makes it: its default as text (empty: derived, the help says from what), what it
    is, where it counts, and its value now, parsed by the field's own type."""

    name: str
    owner: type[Declared]

    @property
    def field(self) -> FieldInfo:
        return self.owner.model_fields[self.name]

    @property
    def env(self) -> str:
        return env_name(self.name)

    @property
    def default(self) -> str:
        return _text(self.field.default)

    @property
    def help(self) -> str:
        return self.field.description or ""

    @property
    def scope(self) -> str:
        return meta(self.field).get("scope", "refresh")

    @property
    def kind(self) -> str:
        return kind_of(self.field)

    def get(self) -> str:
        """The variable's text, or the default's when it is unset or empty."""
        return os.environ.get(self.env, "").strip() or self.default

    def is_set(self) -> bool:
        return bool(os.environ.get(self.env, "").strip())

    def value(self) -> Any:
        """The current value, parsed (the default's when unset); a bad value is refused with a
        :class:`SettingError` naming the variable and what it holds."""
        raw = os.environ.get(self.env, "").strip()
        if not raw:
            return self.default_value
        try:
            return getattr(self.owner.model_validate({self.name: raw}), self.name)
        except ValidationError:
            raise SettingError(f"${self.env} must be {self.kind}, got {raw!r}") from None

    @property
    def default_value(self) -> Any:
        """The default, typed: what library arguments and dataclass fields take."""
        return self.field.default


#: short name (the variable without ``SPARSEEVAL_``, lower case) -> the setting, for every declared variable
SETTINGS: dict[str, Setting] = {name: Setting(name, owner) for owner in (ProcessSettings, RefreshSettings)
                                for name, field in owner.model_fields.items() if meta(field).get("env", True)}

_REFRESH = RefreshSettings()
DEFAULT_METHOD: str = _REFRESH.method
DEFAULT_K: int = _REFRESH.k
DEFAULT_ALPHA: float = _REFRESH.alpha
DEFAULT_SEED: int = _REFRESH.seed
DEFAULT_DEVICE: str = _REFRESH.device
DEFAULT_SPLIT_POLICY: str = _REFRESH.split_policy
DEFAULT_VAL_FRAC: float = _REFRESH.val_frac
DEFAULT_TEST_FRAC: float = _REFRESH.test_frac
#: files and folders inside the data folder (the defaults of ``$SPARSEEVAL_DB`` and ``$SPARSEEVAL_PREDICTORS``)
DB_FILE, PREDICTORS_FOLDER = "sparseeval.duckdb", "predictors"


@dataclass(frozen=True)
class Fixed:
    """A default no environment variable overrides (a library argument's, a CLI option's)."""

    value: Any
    help: str


#: short name -> a default without a variable
FIXED: dict[str, Fixed] = {
    **{name: Fixed(getattr(_REFRESH, name), field.description or "")
       for name, field in RefreshSettings.model_fields.items() if not meta(field).get("env", True)},
    "calibration_frac": Fixed(0.2, "share of the models `sparseeval fit` holds out for conformal calibration"),
    "ood_percentile": Fixed(99.0, "percentile of the calibration models' anchor distances above which a model "
                                  "is flagged out of distribution"),
    "beyond_prior": Fixed(0.1, "share of the models being scored expected above the best training model: the tail "
                               "mass that lifts predictions at the top of the training range (0: no lift; "
                               "sparseeval/estimate/beyond.py)"),
    "protocol_methods": Fixed(("random", "random-linear", "anchor-points", "irt", "p-irt", "gp-irt",
                               "sparseeval-linear", "sparseeval-mlp", "sparseeval-headroom"),
                              "methods `sparseeval evaluate`'s library protocol and the comparison budget "
                              "take when none are named (every registered baseline and the SparseEval proxies)"),
}
DEFAULT_CALIBRATION_FRAC: float = FIXED["calibration_frac"].value
DEFAULT_OOD_PERCENTILE: float = FIXED["ood_percentile"].value
DEFAULT_BEYOND_PRIOR: float = FIXED["beyond_prior"].value
PROTOCOL_METHODS: tuple[str, ...] = FIXED["protocol_methods"].value


@dataclass(frozen=True)
class Foreign:
    """Another tool's environment variable the product reads or sets: whose it is, why the product
    touches it, and the value it assumes when unset (empty: the tool's own default or none)."""

    owner: str
    why: str
    default: str = ""


#: the allow-list: every variable outside :data:`SETTINGS` that the code may name, and why
FOREIGN: dict[str, Foreign] = {
    "HF_HUB_OFFLINE": Foreign("huggingface_hub", "read per call (the client reads it once, at import), so a "
                                                 "long-lived process follows the environment as it is now"),
    "HF_ENDPOINT": Foreign("huggingface_hub", "read per call for the same reason (tests point it at a stand-in Hub)"),
    "HF_TOKEN": Foreign("huggingface_hub", "read per call; unset: no token is sent (not the one a login left)"),
    "HF_HUB_CACHE": Foreign("huggingface_hub", "read per call: where Hub sources and predictors are cached"),
    "MLFLOW_TRACKING_URI": Foreign("MLflow", "the tracking server (unset: sqlite:///<data dir>/mlflow.db)"),
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": Foreign("MLflow", "set (if unset) to false: no progress bars in logs"),
    "MLFLOW_BACKEND_STORE_URI": Foreign("MLflow", "make serve: the tracking server's store (unset: the local "
                                                  "Postgres cluster's, or the external server's mlflow database)"),
    "MLFLOW_AUTH_ADMIN_PASSWORD": Foreign("MLflow", "make serve: the basic-auth app's admin password (needed when "
                                                    "MLflow binds anything but loopback)"),
    "MLFLOW_AUTH_ADMIN_USERNAME": Foreign("MLflow", "make serve: the basic-auth app's admin user", "admin"),
    "MLFLOW_SERVER_ALLOWED_HOSTS": Foreign("MLflow", "make serve: when set, MLflow's own Host-header allow-list is "
                                                     "left to it"),
    "DAGSTER_HOME": Foreign("Dagster", "the instance folder (unset: `make run` uses an ephemeral instance)"),
    "DAGSTER_PG_HOST": Foreign("Dagster", "make serve: an external Postgres server (unset: a local cluster)"),
    "DAGSTER_PG_PORT": Foreign("Dagster", "make serve: the external server's port", "5432"),
    "DAGSTER_PG_USER": Foreign("Dagster", "make serve: the external server's role", "dagster"),
    "DAGSTER_PG_DB": Foreign("Dagster", "make serve: the external server's Dagster database", "dagster"),
    "DAGSTER_PG_PASSWORD": Foreign("Dagster", "make serve: the external server's password"),
    "DAGSTER_PG_PASSWORD_FILE": Foreign("Dagster", "make serve: a 0600 file holding that password instead"),
}


def foreign(name: str) -> str:
    """Another tool's variable from :data:`FOREIGN`: its value, or the default the product assumes."""
    return os.environ.get(name) or FOREIGN[name].default


def data_dir() -> Path:
    return Path(SETTINGS["data_dir"].get())


def db_path() -> Path:
    """``$SPARSEEVAL_DB``, else ``<data dir>/sparseeval.duckdb``."""
    return Path(SETTINGS["db"].get() or data_dir() / DB_FILE)


def predictor_dir() -> Path:
    """``$SPARSEEVAL_PREDICTORS``, else ``<data dir>/predictors``: where published predictors live."""
    return Path(SETTINGS["predictors"].get() or data_dir() / PREDICTORS_FOLDER)


def describe(*names: str) -> str:
    """The settings (``names``: only these, by short name) as a table for ``--help`` epilogs and the docs."""
    chosen = [SETTINGS[n] for n in names] if names else list(SETTINGS.values())
    return "\n".join(f"  {s.env:<32} {s.help}" + (f" (default: {s.default})" if s.default else "") for s in chosen)


def overrides(name: str) -> str:
    """What an option's help says about the setting it overrides: ``overrides $SPARSEEVAL_K, default 20``."""
    s = SETTINGS[name]
    return f"overrides ${s.env}" + (f", default {s.default}" if s.default else "")


def duckdb_config() -> dict[str, str]:
    """Config for every DuckDB connection the library opens: bounded memory (DuckDB spills to its
    temp directory beyond it)."""
    return {"memory_limit": SETTINGS["duckdb_memory"].get()}
