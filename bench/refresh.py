"""How long a refresh takes when nothing changed, and when new models arrive (issue: refresh the Dagster way).

Builds a store from the embedded synthetic leaderboard (6 benchmarks x 600 models, the ``make run``
default) with the real Dagster jobs, then times, each from a fresh process' point of view:

1. a scheduled refresh on unchanged data: the ``ingest`` job, the ``stale_benchmarks_sensor``
   tick, and (to show the skip path) a forced ``refresh`` of every benchmark partition;
2. a refresh after new models arrive for one benchmark: ingest, sensor, the requested refresh;
   and what it republished (anchor sets, registry versions).

    python bench/refresh.py [--workdir DIR] [--quick]

Prints a table; nothing is asserted (timings live in benches, not tests).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import dagster as dg
import polars as pl
from mlflow.tracking import MlflowClient

from pipelines.assets import candidate, champion, evaluation, predictions, raw_results, response_matrix
from pipelines.automation import stale_benchmarks_sensor
from pipelines.io_managers import MatrixIOManager
from pipelines.partitions import BENCHMARK_PARTITIONS
from pipelines.resources import SettingsResource, SourceResource, StoreResource, TrackingResource
from sparseeval.data.store import Store
from sparseeval.data.synthetic import generate_leaderboard, write_leaderboard

PARTITIONED = [response_matrix, candidate, champion, evaluation, predictions]


def resources(root: Path, source: Path, quick: bool) -> dict:
    compare = {"compare_methods": "random-linear,sparseeval-linear", "compare_ks": "10", "compare_seeds": 1} \
        if quick else {}
    return {"store": StoreResource(path=str(root / "sparseeval.duckdb")),
            "tracking": TrackingResource(data_dir=str(root)),
            "source": SourceResource(path=str(source)),
            "settings": SettingsResource(predictor_dir=str(root / "predictors"),
                                         method="sparseeval-linear" if quick else "sparseeval-mlp", **compare),
            "io_manager": MatrixIOManager(base_dir=str(root / "io"))}


def tick(instance: dg.DagsterInstance, res: dict) -> list[str]:
    """The benchmarks one tick of the sensor that turns stale benchmarks into refresh runs requests."""
    context = dg.build_sensor_context(instance=instance, resources={k: res[k] for k in ("store", "settings")})
    result = stale_benchmarks_sensor(context)
    return sorted(r.partition_key for r in result.run_requests) if isinstance(result, dg.SensorResult) else []


def counts(root: Path) -> tuple[int, int]:
    store = Store(root / "sparseeval.duckdb")
    client = MlflowClient(f"sqlite:///{(root / 'mlflow.db').resolve()}")
    versions = sum(len(client.search_model_versions(f"name = '{m.name}'")) for m in client.search_registered_models())
    return store.query("SELECT count(*) FROM anchor_sets").item(), versions


def refresh(res: dict, instance: dg.DagsterInstance, keys: list[str]) -> float:
    t0 = time.perf_counter()
    for key in keys:
        assert dg.materialize(PARTITIONED, partition_key=key, resources=res, instance=instance,
                              selection=PARTITIONED).success
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="sparseeval-linear and a small comparison")
    args = ap.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-refresh-"))
    source = root / "source"
    lb = generate_leaderboard(seed=0)
    write_leaderboard(lb, source / "synthetic")
    res = resources(root, source, args.quick)
    rows = []
    with dg.instance_for_test() as instance:
        t0 = time.perf_counter()
        assert dg.materialize([raw_results], resources=res, instance=instance).success
        keys = tick(instance, res)
        instance.add_dynamic_partitions(BENCHMARK_PARTITIONS, keys)  # the sensor's keys, as they are
        rows.append(("first refresh (build everything)", time.perf_counter() - t0 + refresh(res, instance, keys),
                     *counts(root)))

        t0 = time.perf_counter()
        assert dg.materialize([raw_results], resources=res, instance=instance).success
        requested = tick(instance, res)
        rows.append((f"scheduled refresh, unchanged data (ingest + sensor: {len(requested)} run(s) requested)",
                     time.perf_counter() - t0, *counts(root)))
        rows.append((f"forced refresh of all {len(keys)} benchmarks, unchanged data (skip path)",
                     refresh(res, instance, keys), *counts(root)))

        new = generate_leaderboard(n_families=6, models_per_family=10, benchmarks={"arc": 300}, seed=11)
        rename = pl.col("model") + "-new"
        new = replace(new, responses=new.responses.with_columns(rename), scores=new.scores.with_columns(rename),
                      models=new.models.with_columns(rename, base_model=pl.col("base_model") + "-new"))
        write_leaderboard(new, source / "new_models")
        t0 = time.perf_counter()
        assert dg.materialize([raw_results], resources=res, instance=instance).success
        requested = tick(instance, res)
        seconds = time.perf_counter() - t0 + refresh(res, instance, requested)
        rows.append((f"new models for arc: ingest + sensor ({', '.join(requested)}) + refresh", seconds,
                     *counts(root)))
    print(f"\nworkdir: {root}")
    print(f"{'step':<80} {'seconds':>8} {'anchor sets':>11} {'registry versions':>17}")
    for step, seconds, sets, versions in rows:
        print(f"{step:<80} {seconds:8.1f} {sets:>11} {versions:>17}")
    store = Store(root / "sparseeval.duckdb")
    print("\nanchor set history of arc:")
    print(store.query("SELECT anchor_set_id, role, origin, test_mae, baseline_mae, coverage, registry_version "
                      "FROM anchor_set_history WHERE benchmark = 'arc'"))
    if not args.workdir:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
