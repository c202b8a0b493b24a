"""Device choice: CUDA when present, else CPU, so the same code runs on a laptop and on a GPU box.

Only fitting asks for a device, so torch is imported inside the functions: importing this module
(as the method modules do) costs nothing in an install without the ``[fit]`` extra."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from sparseeval.core import settings

if TYPE_CHECKING:
    import torch


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """Map ``"auto"`` to ``cuda`` when available, else ``cpu``; pass explicit devices through.

    An explicit ``"cuda"`` without a GPU raises instead of silently running on the CPU, so a
    benchmark that claims GPU figures really measured a GPU.
    """
    import torch

    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was requested but no CUDA device is available")
    return resolved


#: environment variable capping the CPU threads of one fit (e.g. 1 when several fits run side by side)
THREADS_ENV = settings.SETTINGS["threads"].env


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, which containers and ``taskset`` narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def cpu_threads(requested: int | None = None) -> int:
    """Threads for one fit: ``requested``, else ``$SPARSEEVAL_THREADS``, else every available CPU;
    never more than the available CPUs.

    The default is a property of the machine, never of its momentary load: the thread count changes
    how floating-point sums are split, which can flip a near-tie in the anchor search, so a count
    chosen from the load average gave the same seed different anchors on a busy and on a quiet
    machine (measured: a joint fit on the real sample, 1 vs 2 threads, 20 vs 21 swaps and mmlu MAE
    1.33 vs 1.36). Same data, seed and thread count give the same fit. The price: several fits
    side by side each spin as many OpenMP threads as there are cores (a fit on a busy 2-core machine
    measured 9 s with 1 thread, 24 s with 2), so whoever runs fits side by side sets
    ``SPARSEEVAL_THREADS`` (the test suite gives each worker its share; the pipeline runs one fit at
    a time through its ``sparseeval_fit`` pool)."""
    cpus = available_cpus()
    if requested is None:
        requested = settings.SETTINGS["threads"].value()  # a bad value: a SettingError (a ValueError)
    if requested is None or requested <= 0:
        return cpus
    return min(int(requested), cpus)


@contextlib.contextmanager
def thread_limit(threads: int | None = None) -> Iterator[int]:
    """Run the block with at most :func:`cpu_threads` threads in torch and in the BLAS/OpenMP pools
    (NumPy, scikit-learn), restoring the previous settings afterwards."""
    import torch
    from threadpoolctl import threadpool_limits

    n = cpu_threads(threads)
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n):
            yield n
    finally:
        torch.set_num_threads(before)
