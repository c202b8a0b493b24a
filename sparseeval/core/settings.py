"""Every default of the product, and the environment variable that overrides it, in one place.

The CLI, the benches, the served mode and the Dagster resources (through ``dg.EnvVar``) all read
defaults from here, so ``make run``, ``dagster dev``, the schedule and ``sparseeval predict
--benchmark`` agree on one data folder, one method, one interval level. Three registries:

* :data:`SETTINGS`: the product's own ``SPARSEEVAL_*`` variables, each with its default, its type
  (:meth:`Setting.value` parses it and refuses a bad value naming the variable) and where it counts;
* :data:`FIXED`: defaults no variable overrides (split fractions, calibration share, the library's
  comparison methods): library arguments and CLI options take them from here;
* :data:`FOREIGN`: other tools' variables the product reads or sets (the Hub client's, MLflow's,
  Dagster's), each with why, and the default the product assumes when it has one.

Nothing outside this module reads an environment variable that is in none of them, and nothing
else spells one of these defaults (``tests/test_settings_home.py`` scans the code and checks the
README's table, which ``make settings-table`` regenerates from :func:`markdown_tables`). Values are
read when asked (not at import), so a changed environment is honoured by long-lived processes and
tests.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparseeval.core.errors import UsageError


class SettingError(UsageError):
    """An environment variable whose value cannot be what it sets (the message names both)."""


def csv(raw: str) -> tuple[str, ...]:
    """A comma-separated list (blanks and empty entries dropped)."""
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def int_csv(raw: str) -> tuple[int, ...]:
    """A comma-separated list of whole numbers."""
    return tuple(int(part) for part in csv(raw))


def cut_quantile(raw: str | float) -> float:
    """Where a frontier split cuts the score: a quantile in [0.5, 1) (above it: the stronger models); the
    setting's parser and :func:`sparseeval.estimate.splits.frontier_cut` both check with it."""
    q = float(raw)
    if not 0.5 <= q < 1.0:
        raise ValueError(raw)
    return q


def positive_int(raw: str) -> int:
    """A whole number of at least 1 (a count that 0 or less would turn into a quiet no-op or an error later)."""
    n = int(raw)
    if n < 1:
        raise ValueError(raw)
    return n


def non_negative_int(raw: str) -> int:
    """A whole number of at least 0 (0: the thing it counts is off)."""
    n = int(raw)
    if n < 0:
        raise ValueError(raw)
    return n


def unit(raw: str) -> float:
    """A share in [0, 1] (a fraction, never a percentage: 15 would silently mean every model)."""
    q = float(raw)
    if not 0.0 <= q <= 1.0:
        raise ValueError(raw)
    return q


def points(raw: str) -> float:
    """A half-width in percentage points, above 0 and at most 50."""
    q = float(raw)
    if not 0.0 < q <= 50.0:
        raise ValueError(raw)
    return q


def open_unit(raw: str) -> float:
    """A number strictly between 0 and 1 (a quantile that must leave models on both sides)."""
    q = float(raw)
    if not 0.0 < q < 1.0:
        raise ValueError(raw)
    return q


#: what each parser accepts, for the error message
KINDS: dict[Callable[[str], Any], str] = {str: "text", int: "a whole number", float: "a number",
                                          csv: "a comma-separated list", int_csv: "comma-separated whole numbers",
                                          cut_quantile: "a number in [0.5, 1)", positive_int: "a whole number >= 1",
                                          non_negative_int: "a whole number >= 0", unit: "a share in [0, 1]",
                                          points: "points in (0, 50]",
                                          open_unit: "a number in (0, 1)"}
#: where a setting counts (the README table says it)
SCOPES = {"refresh": "the refresh and the CLI", "pipeline": "the Dagster daemon", "runtime": "every process",
          "serve": "make serve", "test": "crash tests only"}


@dataclass(frozen=True)
class Setting:
    """One ``SPARSEEVAL_*`` variable: its default (as text, as it would be written in the
    environment; empty: derived, the help says from what), what it is, how its text is parsed and
    where it counts."""

    env: str
    default: str
    help: str
    parse: Callable[[str], Any] = str
    scope: str = "refresh"

    def get(self) -> str:
        """The variable's text, or the default's when it is unset or empty."""
        return os.environ.get(self.env) or self.default

    def is_set(self) -> bool:
        return bool(os.environ.get(self.env))

    def value(self) -> Any:
        """The current value, parsed (None for an unset numeric setting without a default); a bad
        value is refused with a :class:`SettingError` naming the variable and what it holds."""
        if self.parse is str:
            return self.get()
        return self._parse(os.environ.get(self.env, "").strip() or self.default, f"${self.env}")

    @property
    def default_value(self) -> Any:
        """The default, parsed: what library arguments and dataclass fields take."""
        return self._parse(self.default, f"the default of {self.env}")

    def _parse(self, raw: str, what: str) -> Any:
        if self.parse is str:
            return raw
        if not raw.strip():
            return None
        try:
            return self.parse(raw.strip())
        except ValueError:
            raise SettingError(f"{what} must be {KINDS.get(self.parse, 'valid')}, got {raw!r}") from None


#: short name (the variable without ``SPARSEEVAL_``, lower case) -> the setting
SETTINGS: dict[str, Setting] = {s.env.removeprefix("SPARSEEVAL_").lower(): s for s in (
    Setting("SPARSEEVAL_DATA_DIR", "data", "folder of the DuckDB store, MLflow store, predictors, embedded source",
            scope="runtime"),
    Setting("SPARSEEVAL_DB", "", "DuckDB file (default <data dir>/sparseeval.duckdb)", scope="runtime"),
    Setting("SPARSEEVAL_PREDICTORS", "", "published predictors (default <data dir>/predictors)", scope="runtime"),
    Setting("SPARSEEVAL_SOURCE", "",
            "sources to ingest, comma-separated: results folders, hf://datasets/ORG/REPO[@revision] (one Hub "
            "dataset repo) and hf://datasets/ORG/GLOB (an org's matching repos); an unchanged repo costs one "
            "metadata call per refresh, a new commit downloads only its new files (default: the embedded "
            "synthetic leaderboard)"),
    Setting("SPARSEEVAL_HUB_TASKS", "",
            "tasks whose files a Hub source downloads, comma-separated: leaderboard benchmarks (arc, mmlu, bbh, "
            "...), lm-eval task names, or globs of them (toy_*: a group's files carry its subtasks' names); the "
            "aggregate results_*.json always come (default: every result file)"),
    Setting("SPARSEEVAL_METHOD", "sparseeval-headroom", "anchor method the pipeline publishes"),
    Setting("SPARSEEVAL_K", "20", "anchors per benchmark", int),
    Setting("SPARSEEVAL_JOINT_BENCHMARKS", "",
            "benchmarks of the joint predictor, comma-separated (default: every benchmark without a "
            "variant suffix; 'none' turns the joint predictor off)"),
    Setting("SPARSEEVAL_SEED", "0", "seed of the published split and fit", int),
    Setting("SPARSEEVAL_DEVICE", "auto", "auto (CUDA when present), cpu or cuda"),
    Setting("SPARSEEVAL_ALPHA", "0.1", "interval miscoverage (0.1: 90 % intervals)", float),
    Setting("SPARSEEVAL_COMPARE_METHODS", "random,random-linear,anchor-points,gp-irt,sparseeval-linear,"
                                          "sparseeval-mlp", "methods in the comparison", csv),
    Setting("SPARSEEVAL_COMPARE_KS", "10,20", "anchor counts in the comparison", int_csv),
    Setting("SPARSEEVAL_COMPARE_SEEDS", "3", "seeds (splits) in the comparison", int),
    Setting("SPARSEEVAL_COMPARE_BUDGET_S", "300",
            "seconds the method comparison may take per benchmark (0: no budget); above it fewer seeds, "
            "methods, Ks are run and the asset says so", float),
    Setting("SPARSEEVAL_COMPARE_NEW_SHARE", "0.1",
            "the method comparison runs right after a refresh only when the models added since the last "
            "comparison are at least this share of the benchmark; below it, it waits for its weekly schedule "
            "(the last comparison stands)", float),
    Setting("SPARSEEVAL_CHALLENGER_MARGIN", "0.05",
            "a re-selected anchor set replaces the champion only if its held-out MAE is this fraction lower", float),
    Setting("SPARSEEVAL_CHALLENGER_MIN_DAYS", "30", "at most one champion change per this many days", float),
    Setting("SPARSEEVAL_DUCKDB_MEMORY", "4GB",
            "memory limit of every DuckDB connection (it spills to disk beyond): the leaderboard's 210 M rows "
            "ingest in ~4 GB instead of DuckDB's default 80 % of RAM", scope="runtime"),
    Setting("SPARSEEVAL_COVERAGE_TOLERANCE", "0.1",
            "publishing check: held-out interval coverage within this of nominal (finite-sample slack)", float),
    Setting("SPARSEEVAL_FRONTIER_SILENT_MAX", "0.15",
            "publishing check: on a frontier split of the candidate's own fitting models (fitted at or below "
            "SPARSEEVAL_FRONTIER_QUANTILE of the score, scored on the stronger rest), at most this share of the "
            "stronger models may fall outside their interval without an OOD flag (the interval's own "
            "miscoverage, 0.1 at 90 %, counts in it). Raised to publish a refused predictor knowingly, it does "
            "not silence `predict`: above the cut the self-check failed, a prediction is still warned at the default",
            unit),
    Setting("SPARSEEVAL_FRONTIER_QUANTILE", "0.9",
            "where that frontier self-check cuts the candidate's fitting models by score (0.9: fitted on the "
            "weakest 90 %, scored on the strongest 10 %); lower it (0.8) where new models are expected further "
            "beyond the strongest ones: farther beyond, the intervals miss more often (docs/results/frontier.md)",
            cut_quantile),
    Setting("SPARSEEVAL_PROBE_ITEMS", "40",
            "the probe's first batch: random items beyond the anchors that a model the anchors place at the top "
            "answers (`sparseeval next` names them, per model), its estimate and interval then come from them by "
            "design (sparseeval/estimate/probe.py); 0 publishes predictors without a probe", non_negative_int),
    Setting("SPARSEEVAL_PROBE_BATCH", "20",
            "items the probe adds per step while its sampling half-width is above SPARSEEVAL_PROBE_TARGET",
            positive_int),
    Setting("SPARSEEVAL_PROBE_MAX", "200", "the most items a probe asks of one model", positive_int),
    Setting("SPARSEEVAL_PROBE_TARGET", "5",
            "the probe's target: it asks for more items while its sampling half-width is above this many points "
            "(the interval adds a subset pool's line error, which more items do not shrink)", points),
    Setting("SPARSEEVAL_PROBE_FROM", "0.8",
            "the quantile of the calibration models' predictions from which a model is asked the probe (0.8: a "
            "fifth of ordinary models, more where many tie at the top), besides any the anchors flag as possibly "
            "above the training range", open_unit),
    Setting("SPARSEEVAL_SENSOR_INTERVAL", "30",
            "seconds between two evaluations of each sensor by the Dagster daemon (new files, stale benchmarks, "
            "joint predictor)", int, "pipeline"),
    Setting("SPARSEEVAL_THREADS", "",
            "CPU threads per fit (0 or unset: every available CPU); the count changes floating-point sums, so the "
            "same seed gives the same fit at the same thread count on one machine (set it, e.g. to 1, to run fits "
            "side by side). Not across CPUs whose math kernels differ: there the same seed and count gave the same "
            "anchors on 4 of 5 shared benchmarks (mmlu's differed) and weights equal to about 1e-4",
            int, "runtime"),
    Setting("SPARSEEVAL_PG_BIN", "/usr/lib/postgresql/15/bin",
            "folder of the PostgreSQL binaries (initdb, pg_ctl, psql) of the served mode's local cluster",
            scope="serve"),
    Setting("SPARSEEVAL_SERVE_DAGSTER_PORT", "3000", "port of the Dagster webserver (make serve)", int, "serve"),
    Setting("SPARSEEVAL_SERVE_MLFLOW_PORT", "5000", "port of the MLflow tracking server (make serve)", int, "serve"),
    Setting("SPARSEEVAL_SERVE_MLFLOW_HOST", "127.0.0.1",
            "interface the MLflow server binds (make serve); anything but 127.0.0.1 turns on its basic-auth app "
            "and needs MLFLOW_AUTH_ADMIN_PASSWORD", scope="serve"),
    Setting("SPARSEEVAL_SERVICE", "",
            "set by make serve on every process a service starts (its name and data folder), never by hand: "
            "how a restart or make serve-stop finds a service's leftovers (read from /proc/PID/environ)",
            scope="serve"),
    Setting("SPARSEEVAL_FAILPOINT", "",
            "test-only hook: the publication step boundary (before-register, after-register, ..., after-alias) "
            "where the process kills itself (SIGKILL), so crash tests prove every boundary recoverable",
            scope="test"),
)}

DEFAULT_METHOD: str = SETTINGS["method"].default_value
DEFAULT_K: int = SETTINGS["k"].default_value
DEFAULT_ALPHA: float = SETTINGS["alpha"].default_value
DEFAULT_SEED: int = SETTINGS["seed"].default_value
DEFAULT_DEVICE: str = SETTINGS["device"].default_value
#: files and folders inside the data folder (the defaults of ``$SPARSEEVAL_DB`` and ``$SPARSEEVAL_PREDICTORS``)
DB_FILE, PREDICTORS_FOLDER = "sparseeval.duckdb", "predictors"


@dataclass(frozen=True)
class Fixed:
    """A default no environment variable overrides (a library argument's, a CLI option's)."""

    value: Any
    help: str


#: short name -> a default without a variable
FIXED: dict[str, Fixed] = {
    "split_policy": Fixed("random", "how models are split into train / val / test (random, family, date, frontier)"),
    "val_frac": Fixed(0.1, "share of the models held out for validation (early stopping, swaps)"),
    "test_frac": Fixed(0.2, "share of the models held out to score a fit (the held-out MAE and coverage)"),
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
DEFAULT_SPLIT_POLICY: str = FIXED["split_policy"].value
DEFAULT_VAL_FRAC: float = FIXED["val_frac"].value
DEFAULT_TEST_FRAC: float = FIXED["test_frac"].value
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


# --------------------------------------------------------------------------------- the README table

README_BEGIN = "<!-- settings table: generated by `make settings-table` from sparseeval/core/settings.py -->"
README_END = "<!-- end of settings table -->"


def _cell(text: str) -> str:
    """Plain help text as a Markdown table cell: ``|``, ``<`` and ``*`` escaped (a cell separator, an HTML
    tag, emphasis otherwise)."""
    return re.sub(r"([|<*])", r"\\\1", text)


def _code(value: Any) -> str:
    return f"`{','.join(map(str, value)) if isinstance(value, tuple) else value}`"


def markdown_tables() -> str:
    """The README's settings tables: every variable of :data:`SETTINGS`, every default of :data:`FIXED`
    and the allow-list :data:`FOREIGN`, in declaration order."""
    lines = ["| variable | default | where | meaning |", "|---|---|---|---|"]
    lines += [f"| `{s.env}` | {_code(s.default) if s.default else 'unset'} | {SCOPES[s.scope]} | {_cell(s.help)} |"
              for s in SETTINGS.values()]
    lines += ["", "Defaults that no variable overrides (library arguments and the CLI options that take them):", "",
              "| default | value | meaning |", "|---|---|---|"]
    lines += [f"| `{name}` | {_code(f.value)} | {_cell(f.help)} |" for name, f in FIXED.items()]
    lines += ["", "Other tools' variables the product reads or sets (nothing else is read from the environment):", "",
              "| variable | tool | assumed when unset | why |", "|---|---|---|---|"]
    lines += [f"| `{name}` | {f.owner} | {_code(f.default) if f.default else '-'} | {_cell(f.why)} |"
              for name, f in FOREIGN.items()]
    return "\n".join(lines)


def _readme_span(readme: str) -> re.Match[str]:
    match = re.search(re.escape(README_BEGIN) + r"\n(.*?)\n" + re.escape(README_END), readme, re.S)
    if match is None:
        raise SettingError(f"the README has no settings table between {README_BEGIN!r} and {README_END!r}")
    return match


def readme_block(readme: str) -> str:
    """The generated part of ``readme`` (between the markers), or a :class:`SettingError` when it has none."""
    return _readme_span(readme).group(1)


def write_readme(path: Path) -> bool:
    """Regenerate the settings table of the README at ``path`` (only between its markers); whether it changed."""
    text = path.read_text()
    span = _readme_span(text)
    updated = text[:span.start(1)] + markdown_tables() + text[span.end(1):]
    if updated != text:
        path.write_text(updated)
    return updated != text


if __name__ == "__main__":  # make settings-table
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "README.md")
    print(f"{target}: settings table {'rewritten' if write_readme(target) else 'already up to date'}")
