"""Train / validation / test splits of *models* (never of items).

Spellings of one model that differ only by case, Unicode form or zero-width characters
(:func:`model_identity`) always land on the same side. Three policies: ``random`` (seeded, each
seed a different split), ``family`` (whole organisations,
the ``org`` of ``org/name``, go to one side, so near-duplicate fine-tunes cannot leak across), and
``date`` (train on older models, test on newer ones: the real use case of scoring new releases).
Two more put the test models *outside* the training range of the target score: ``frontier`` (train
on models at or below the q-th quantile of the score, test on the stronger rest: the models a
leaderboard refresh exists for) and ``frontier-low`` (its mirror: test on the weakest ``1 - q``).
Validation models of both come from the training side only, so nothing chosen or calibrated ever
sees a model beyond the cut.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from sparseeval.core import setting_kinds
from sparseeval.core import settings as defaults
from sparseeval.core.errors import UsageError

SplitPolicy = Literal["random", "family", "date", "frontier", "frontier-low"]
#: the policies whose test models lie beyond the training models' score range
FRONTIER_POLICIES = ("frontier", "frontier-low")
#: default quantile of the frontier cut: train on the weakest 90 %, test on the strongest 10 % (the pipeline's
#: self-check cuts there too: one default, ``SPARSEEVAL_FRONTIER_QUANTILE``)
FRONTIER_QUANTILE: float = defaults.SETTINGS["frontier_quantile"].default_value
_INVISIBLE = re.compile("[\u200b-\u200f\u2060-\u2064\ufeff]")


@dataclass(frozen=True)
class Split:
    """Row indices of the training, validation and test models (disjoint, sorted)."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test)}


def model_family(model: str) -> str:
    """The organisation of ``org/name`` (the whole name when there is no ``/``), case-folded and
    Unicode-normalised: ``Org`` and ``org`` are one organisation."""
    name = model_identity(model)
    return name.split("/", 1)[0] if "/" in name else name


def model_identity(model: str) -> str:
    """The key under which spellings of one model meet: NFKC-normalised, case-folded, without
    zero-width characters. The real leaderboard data holds case-only pairs (``Org/Model-7B`` and
    ``org/model-7b``) with identical answers: on both sides of a split they would leak the test
    model's answers into training."""
    return _INVISIBLE.sub("", unicodedata.normalize("NFKC", model)).casefold()


def _grouped_order(models: Sequence[str], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Models in a seeded random order that keeps spellings of one model together, and the group of
    each position (with no such spellings this is exactly ``rng.permutation(n)``)."""
    keys = [model_identity(m) for m in models]
    first: dict[str, int] = {}
    group = np.array([first.setdefault(k, len(first)) for k in keys])
    members: list[list[int]] = [[] for _ in first]
    for i, g in enumerate(group):
        members[g].append(i)
    order = np.array([i for g in rng.permutation(len(members)) for i in members[g]], dtype=np.int64)
    return order, group[order]


def _cut(order: np.ndarray, groups: np.ndarray, n_take: int) -> int:
    """Smallest position >= ``n_take`` that does not split a group of ``order``."""
    cut = min(n_take, len(order))
    while 0 < cut < len(order) and groups[cut] == groups[cut - 1]:
        cut += 1
    return cut


def _check_fractions(val_frac: float, test_frac: float) -> None:
    if not (0 <= val_frac < 1 and 0 < test_frac < 1 and val_frac + test_frac < 1):
        raise UsageError(f"need 0 <= val_frac, 0 < test_frac and val_frac + test_frac < 1; "
                         f"got val_frac={val_frac}, test_frac={test_frac}")


def _sorted_split(train: np.ndarray, val: np.ndarray, test: np.ndarray) -> Split:
    return Split(np.sort(train), np.sort(val), np.sort(test))


def make_split(models: Sequence[str], *, policy: SplitPolicy = defaults.DEFAULT_SPLIT_POLICY,  # type: ignore[assignment]
               val_frac: float = defaults.DEFAULT_VAL_FRAC, test_frac: float = defaults.DEFAULT_TEST_FRAC,
               seed: int = defaults.DEFAULT_SEED,
               dates: Sequence[np.datetime64 | None] | None = None, scores: np.ndarray | None = None,
               frontier_quantile: float = FRONTIER_QUANTILE) -> Split:
    """Split ``models`` (row order of the matrix) into train / val / test index arrays.

    ``family``: organisations are shuffled with ``seed`` and assigned whole to test, then val,
    until each reaches its fraction of models; no organisation appears on two sides.
    ``date``: models sorted by date (ties broken by the seed); the newest ``test_frac`` are test,
    the next newest ``val_frac`` validation; models without a date count as oldest (training).
    ``frontier``: models whose score (``scores``, aligned with ``models``) is above the
    ``frontier_quantile`` quantile are test (``test_frac`` is ignored); ``val_frac`` of all models
    are drawn at random from the rest. ``frontier-low``: the same with the models below the
    ``1 - frontier_quantile`` quantile as test.
    """
    _check_fractions(val_frac, test_frac)
    n = len(models)
    if n < 3:
        raise UsageError(f"need at least 3 models to split, got {n}")
    rng = np.random.default_rng(seed)
    n_test = max(1, round(test_frac * n))
    n_val = round(val_frac * n)
    if policy == "random":
        order, groups = _grouped_order(models, rng)
        test_end = _cut(order, groups, n_test)
        val_end = _cut(order, groups, test_end + n_val)
        return _sorted_split(order[val_end:], order[test_end:val_end], order[:test_end])
    if policy == "family":
        families = np.array([model_family(m) for m in models])
        uniq, inverse = np.unique(families, return_inverse=True)
        if len(uniq) < 2:
            raise UsageError("split by family needs models from at least two organisations")
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
            raise UsageError("split by date needs one date (or None) per model")
        stamp = np.array([np.datetime64(d, "s").astype(np.int64) if d is not None and not
                          np.isnat(np.datetime64(d)) else np.iinfo(np.int64).min for d in dates])
        if (stamp == np.iinfo(np.int64).min).all():
            raise UsageError("split by date: no model has a date")
        tiebreak = rng.random(n)
        order = np.lexsort((tiebreak, stamp))[::-1]  # newest first
        return _sorted_split(order[n_test + n_val:], order[n_test:n_test + n_val], order[:n_test])
    if policy in FRONTIER_POLICIES:
        return _frontier_split(models, scores, frontier_quantile, val_frac, rng, low=policy == "frontier-low")
    raise UsageError(f"unknown split policy {policy!r}; choose random, family, date, frontier or frontier-low")


def frontier_cut(scores: np.ndarray, quantile: float, *, low: bool = False) -> tuple[float, np.ndarray]:
    """(cut score, mask of the models beyond it): above the ``quantile`` quantile of ``scores``
    (below the ``1 - quantile`` one when ``low``). Ties at the cut stay on the training side."""
    try:
        setting_kinds.cut_quantile(quantile)  # the one definition of a valid cut, shared with the setting
    except ValueError:
        raise UsageError(f"frontier quantile must be in [0.5, 1), got {quantile}") from None
    scores = np.asarray(scores, dtype=np.float64)
    if low:
        cut = float(np.quantile(scores, 1.0 - quantile))
        return cut, scores < cut
    cut = float(np.quantile(scores, quantile))
    return cut, scores > cut


def _frontier_split(models: Sequence[str], scores: np.ndarray | None, quantile: float, val_frac: float,
                    rng: np.random.Generator, *, low: bool) -> Split:
    """Test = the models beyond the score cut (with every spelling of them: a spelling below the cut
    must not train on a model the split calls new); validation drawn at random from the rest."""
    n = len(models)
    if scores is None or len(scores) != n:
        raise UsageError("a frontier split needs one score per model")
    _, beyond = frontier_cut(scores, quantile, low=low)
    keys = [model_identity(m) for m in models]
    beyond_keys = {k for k, b in zip(keys, beyond, strict=True) if b}
    test = np.array([i for i, k in enumerate(keys) if k in beyond_keys], dtype=np.int64)
    if test.size == 0 or test.size == n:
        raise UsageError(f"frontier split at quantile {quantile}: no models on one side (scores all equal?)")
    rest = np.setdiff1d(np.arange(n), test)
    order, groups = _grouped_order([models[i] for i in rest], rng)
    val_end = _cut(order, groups, round(val_frac * n))
    return _sorted_split(rest[order[val_end:]], rest[order[:val_end]], test)
