"""Benchmark partitions: discovered from the data, never configured.

Dynamic partitions: ingest reports which benchmarks (and benchmark variants such as ``arc@0shot``)
the store holds; the sensor and ``make run`` add the new ones, so a new benchmark in a dropped file
gets its own partition without editing anything.

A partition key is the benchmark's :func:`sparseeval.data.names.slug` (``arc`` is ``arc``): Dagster's
UI reads ``...`` in a key as a range and the IO manager makes the key a file name, so a name from a
file (``../x``, ``a...b``, 300 characters) never reaches either as it is. Assets turn the key back
into the stored name with :func:`benchmark_of`.
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

from sparseeval.data.names import benchmark_for, slug

BENCHMARK_PARTITIONS = "benchmark"
benchmark_partitions = dg.DynamicPartitionsDefinition(name=BENCHMARK_PARTITIONS)


def partition_key(benchmark: str) -> str:
    """The partition key of ``benchmark`` (its slug)."""
    return slug(benchmark)


def benchmark_of(key: str, stored: Iterable[str]) -> str:
    """The stored benchmark of partition ``key``; a failure naming the key when the store has none."""
    name = benchmark_for(key, stored)
    if name is None:
        raise dg.Failure(description=f"partition {key!r}: the store holds no benchmark of that name")
    return name


def add_benchmarks(instance: dg.DagsterInstance, benchmarks: list[str]) -> list[str]:
    """Add the partitions of the benchmarks that have none yet; return the keys added."""
    known = set(instance.get_dynamic_partitions(BENCHMARK_PARTITIONS))
    new = sorted({partition_key(b) for b in benchmarks} - known)
    if new:
        instance.add_dynamic_partitions(BENCHMARK_PARTITIONS, new)
    return new
