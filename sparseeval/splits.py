"""Train / validation / test splits of *models* (never of items).

Three policies: ``random`` (seeded, each seed a different split), ``family`` (whole organisations,
the ``org`` of ``org/name``, go to one side, so near-duplicate fine-tunes cannot leak across), and
``date`` (train on older models, test on newer ones: the real use case of scoring new releases).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

SplitPolicy = Literal["random", "family", "date"]


@dataclass(frozen=True)
class Split:
    """Row indices of the training, validation and test models (disjoint, sorted)."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test)}


def model_family(model: str) -> str:
    """The organisation of ``org/name`` (the whole name when there is no ``/``)."""
    return model.split("/", 1)[0] if "/" in model else model


def _check_fractions(val_frac: float, test_frac: float) -> None:
    if not (0 <= val_frac < 1 and 0 < test_frac < 1 and val_frac + test_frac < 1):
        raise ValueError(f"need 0 <= val_frac, 0 < test_frac and val_frac + test_frac < 1; "
                         f"got val_frac={val_frac}, test_frac={test_frac}")


def _sorted_split(train: np.ndarray, val: np.ndarray, test: np.ndarray) -> Split:
    return Split(np.sort(train), np.sort(val), np.sort(test))


def make_split(models: Sequence[str], *, policy: SplitPolicy = "random", val_frac: float = 0.1,
               test_frac: float = 0.2, seed: int = 0,
               dates: Sequence[np.datetime64 | None] | None = None) -> Split:
    """Split ``models`` (row order of the matrix) into train / val / test index arrays.

    ``family``: organisations are shuffled with ``seed`` and assigned whole to test, then val,
    until each reaches its fraction of models; no organisation appears on two sides.
    ``date``: models sorted by date (ties broken by the seed); the newest ``test_frac`` are test,
    the next newest ``val_frac`` validation; models without a date count as oldest (training).
    """
    _check_fractions(val_frac, test_frac)
    n = len(models)
    if n < 3:
        raise ValueError(f"need at least 3 models to split, got {n}")
    rng = np.random.default_rng(seed)
    n_test = max(1, round(test_frac * n))
    n_val = round(val_frac * n)
    if policy == "random":
        order = rng.permutation(n)
        return _sorted_split(order[n_test + n_val:], order[n_test:n_test + n_val], order[:n_test])
    if policy == "family":
        families = np.array([model_family(m) for m in models])
        uniq, inverse = np.unique(families, return_inverse=True)
        if len(uniq) < 2:
            raise ValueError("split by family needs models from at least two organisations")
        sizes = np.bincount(inverse)
        side = np.zeros(len(uniq), dtype=np.int8)  # 0 train, 1 val, 2 test
        filled = {1: 0, 2: 0}
        for fam in rng.permutation(len(uniq)):
            if filled[2] < n_test:
                side[fam] = 2
                filled[2] += sizes[fam]
            elif filled[1] < n_val:
                side[fam] = 1
                filled[1] += sizes[fam]
        if not (side == 0).any():  # a huge family swallowed everything: give training one family back
            side[np.argmax(sizes * (side == 1) if (side == 1).any() else sizes)] = 0
        model_side = side[inverse]
        idx = np.arange(n)
        return _sorted_split(idx[model_side == 0], idx[model_side == 1], idx[model_side == 2])
    if policy == "date":
        if dates is None or len(dates) != n:
            raise ValueError("split by date needs one date (or None) per model")
        stamp = np.array([np.datetime64(d, "s").astype(np.int64) if d is not None and not
                          np.isnat(np.datetime64(d)) else np.iinfo(np.int64).min for d in dates])
        if (stamp == np.iinfo(np.int64).min).all():
            raise ValueError("split by date: no model has a date")
        tiebreak = rng.random(n)
        order = np.lexsort((tiebreak, stamp))[::-1]  # newest first
        return _sorted_split(order[n_test + n_val:], order[n_test:n_test + n_val], order[:n_test])
    raise ValueError(f"unknown split policy {policy!r}; choose random, family or date")
