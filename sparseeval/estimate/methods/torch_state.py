"""Format version 1 predictor states (``state.pt``, written by ``torch.save``): read with torch, the one
place a saved predictor needs it. Newer predictors keep their arrays in safetensors, read with NumPy
(:mod:`sparseeval.estimate.artifact`)."""

from __future__ import annotations

import io
from typing import Any


def load_torch_state(raw: bytes) -> Any:
    """The nested state ``torch.save`` wrote (tensors as torch tensors); ImportError without torch."""
    import torch

    return torch.load(io.BytesIO(raw), weights_only=True)
