"""Device choice: CUDA when present, else CPU, so the same code runs on a laptop and on a GPU box."""

from __future__ import annotations

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
