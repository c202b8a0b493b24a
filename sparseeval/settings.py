"""Every default of the product, and the environment variable that overrides it, in one place.

The CLI, the benches and the Dagster resources (through ``dg.EnvVar``) all read defaults from here,
so ``make run``, ``dagster dev``, the schedule and ``sparseeval predict --benchmark`` agree on one
data folder, one method, one interval level. Paths are resolved when asked (not at import), so a
changed environment is honoured by long-lived processes and tests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Setting:
    env: str
    default: str
    help: str

    def get(self) -> str:
        return os.environ.get(self.env) or self.default


#: name -> (environment variable, default, what it is)
SETTINGS: dict[str, Setting] = {s.env.removeprefix("SPARSEEVAL_").lower(): s for s in (
    Setting("SPARSEEVAL_DATA_DIR", "data", "folder of the DuckDB store, MLflow store, predictors, embedded source"),
    Setting("SPARSEEVAL_DB", "", "DuckDB file (default <data dir>/sparseeval.duckdb)"),
    Setting("SPARSEEVAL_PREDICTORS", "", "published predictors (default <data dir>/predictors)"),
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
    Setting("SPARSEEVAL_K", "20", "anchors per benchmark"),
    Setting("SPARSEEVAL_JOINT_BENCHMARKS", "",
            "benchmarks of the joint predictor, comma-separated (default: every benchmark without a "
            "variant suffix; 'none' turns the joint predictor off)"),
    Setting("SPARSEEVAL_SEED", "0", "seed of the published split and fit"),
    Setting("SPARSEEVAL_DEVICE", "auto", "auto (CUDA when present), cpu or cuda"),
    Setting("SPARSEEVAL_ALPHA", "0.1", "interval miscoverage (0.1: 90 % intervals)"),
    Setting("SPARSEEVAL_COMPARE_METHODS", "random,random-linear,anchor-points,gp-irt,sparseeval-linear,"
                                          "sparseeval-mlp", "methods in the comparison"),
    Setting("SPARSEEVAL_COMPARE_KS", "10,20", "anchor counts in the comparison"),
    Setting("SPARSEEVAL_COMPARE_SEEDS", "3", "seeds (splits) in the comparison"),
    Setting("SPARSEEVAL_COMPARE_BUDGET_S", "300",
            "seconds the method comparison may take per benchmark (0: no budget); above it fewer seeds, "
            "methods, Ks are run and the asset says so"),
    Setting("SPARSEEVAL_COMPARE_NEW_SHARE", "0.1",
            "the method comparison runs right after a refresh only when the models added since the last "
            "comparison are at least this share of the benchmark; below it, it waits for its weekly schedule "
            "(the last comparison stands)"),
    Setting("SPARSEEVAL_CHALLENGER_MARGIN", "0.05",
            "a re-selected anchor set replaces the champion only if its held-out MAE is this fraction lower"),
    Setting("SPARSEEVAL_CHALLENGER_MIN_DAYS", "30", "at most one champion change per this many days"),
    Setting("SPARSEEVAL_DUCKDB_MEMORY", "4GB",
            "memory limit of every DuckDB connection (it spills to disk beyond): the leaderboard's 210 M rows "
            "ingest in ~4 GB instead of DuckDB's default 80 % of RAM"),
    Setting("SPARSEEVAL_COVERAGE_TOLERANCE", "0.1",
            "publishing check: held-out interval coverage within this of nominal (finite-sample slack)"),
    Setting("SPARSEEVAL_FRONTIER_SILENT_MAX", "0.15",
            "publishing check: on a frontier split of the candidate's own fitting models (fitted on the weakest "
            "90 %, scored on the strongest 10 %), at most this share of the stronger models may fall outside "
            "their interval without an OOD flag (the interval's own miscoverage, 0.1 at 90 %, counts in it)"),
    Setting("SPARSEEVAL_SENSOR_INTERVAL", "30",
            "seconds between two evaluations of each sensor by the Dagster daemon (new files, stale benchmarks, "
            "joint predictor)"),
)}

DEFAULT_METHOD = SETTINGS["method"].default
DEFAULT_K = int(SETTINGS["k"].default)
DEFAULT_ALPHA = float(SETTINGS["alpha"].default)


def data_dir() -> Path:
    return Path(SETTINGS["data_dir"].get())


def db_path() -> Path:
    """``$SPARSEEVAL_DB``, else ``<data dir>/sparseeval.duckdb``."""
    return Path(SETTINGS["db"].get() or data_dir() / "sparseeval.duckdb")


def predictor_dir() -> Path:
    """``$SPARSEEVAL_PREDICTORS``, else ``<data dir>/predictors``: where published predictors live."""
    return Path(SETTINGS["predictors"].get() or data_dir() / "predictors")


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
