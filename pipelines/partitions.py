"""Benchmark partitions: discovered from the data, never configured.

Dynamic partitions: ingest reports which benchmarks (and benchmark variants such as ``arc@0shot``)
the store holds; the sensor and ``make run`` add the new ones, so a new benchmark in a dropped file
gets its own partition without editing anything.
"""

from __future__ import annotations

import dagster as dg

BENCHMARK_PARTITIONS = "benchmark"
benchmark_partitions = dg.DynamicPartitionsDefinition(name=BENCHMARK_PARTITIONS)


def add_benchmarks(instance: dg.DagsterInstance, benchmarks: list[str]) -> list[str]:
    """Add the benchmarks that have no partition yet; return those added."""
    known = set(instance.get_dynamic_partitions(BENCHMARK_PARTITIONS))
    new = sorted(set(benchmarks) - known)
    if new:
        instance.add_dynamic_partitions(BENCHMARK_PARTITIONS, new)
    return new
