"""Device choice: CUDA when present, else CPU, so the same code runs on a laptop and on a GPU box."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """Map ``"auto"`` to ``cuda`` when available, else ``cpu``; pass explicit devices through.

    An explicit ``"cuda"`` without a GPU raises instead of silently running on the CPU, so a
    benchmark that claims GPU figures really measured a GPU.
    """
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was requested but no CUDA device is available")
    return resolved


#: environment variable capping the CPU threads of one fit (e.g. 1 when several fits run side by side)
THREADS_ENV = "SPARSEEVAL_THREADS"


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, which containers and ``taskset`` narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def idle_cpus(cpus: int | None = None) -> int:
    """CPUs not already busy with other processes: the available CPUs minus the one-minute load
    beyond this process's own (at most one CPU), at least 1."""
    cpus = cpus or available_cpus()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cpus
    return max(1, min(cpus, round(cpus - max(0.0, load - 1.0))))


def cpu_threads(requested: int | None = None) -> int:
    """Threads for one fit: ``requested``, else ``$SPARSEEVAL_THREADS``, else the idle CPUs
    (:func:`idle_cpus`); never more than the available CPUs. More threads than free cores only
    makes them wait for each other: OpenMP's spinning workers made a fit on a loaded 2-core machine
    6-10x slower with 2 threads than with 1."""
    cpus = available_cpus()
    if requested is None:
        raw = os.environ.get(THREADS_ENV, "").strip()
        if raw:
            try:
                requested = int(raw)
            except ValueError:
                raise ValueError(f"{THREADS_ENV} must be a whole number of threads, got {raw!r}") from None
    if requested is None or requested <= 0:
        return idle_cpus(cpus)
    return min(int(requested), cpus)


@contextlib.contextmanager
def thread_limit(threads: int | None = None) -> Iterator[int]:
    """Run the block with at most :func:`cpu_threads` threads in torch and in the BLAS/OpenMP pools
    (NumPy, scikit-learn), restoring the previous settings afterwards."""
    from threadpoolctl import threadpool_limits

    n = cpu_threads(threads)
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n):
            yield n
    finally:
        torch.set_num_threads(before)
