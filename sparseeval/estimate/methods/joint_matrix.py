"""The joint matrix: several benchmarks' response matrices side by side, over the models that have all of them.

:class:`~sparseeval.estimate.methods.joint.JointSparseEval` selects one anchor set across benchmarks, so it
needs one matrix whose columns are every benchmark's items (``bench::item``) and whose targets are every
benchmark's score. Building it (and restricting each benchmark to the common models) is plain data work that
the fitting, evaluation and refresh code also do without fitting anything, so it lives apart from the estimator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sparseeval.core.errors import UsageError
from sparseeval.data.matrix import ResponseMatrix

#: separator of benchmark and item id in the joint matrix's column keys (``arc::17``)
JOINT_SEP = "::"


@dataclass(frozen=True)
class JointData:
    """Several benchmarks' results side by side for the models that have all of them.

    ``Y`` (models x all items, NaN = not observed), ``S`` (models x benchmarks) the scores,
    ``groups[j]`` the benchmark index of column ``j``, ``columns[j]`` its key ``bench::item``.
    """

    benchmarks: list[str]
    models: list[str]
    columns: list[str]
    groups: np.ndarray
    Y: np.ndarray
    S: np.ndarray

    def take(self, rows: np.ndarray) -> JointData:
        rows = np.asarray(rows)
        return JointData(self.benchmarks, [self.models[r] for r in rows], self.columns, self.groups,
                         self.Y[rows], self.S[rows])

    def item_ids(self, b: int) -> list[str]:
        return [c.split(JOINT_SEP, 1)[1] for c, g in zip(self.columns, self.groups, strict=True) if g == b]


def common_models(matrices: Sequence[ResponseMatrix]) -> list[str]:
    """Models present (with a score) in every matrix, sorted."""
    if not matrices:
        raise UsageError("need at least one benchmark")
    common = set(matrices[0].models)
    for m in matrices[1:]:
        common &= set(m.models)
    if len(common) < 3:
        raise UsageError(f"only {len(common)} model(s) have every benchmark "
                         f"({', '.join(m.benchmark for m in matrices)}); a joint fit needs at least 3")
    return sorted(common)


def restrict_models(matrix: ResponseMatrix, models: Sequence[str]) -> ResponseMatrix:
    """``matrix`` with exactly ``models`` as rows, in that order (each must be present)."""
    index = {m: i for i, m in enumerate(matrix.models)}
    return matrix.take_models(np.array([index[m] for m in models], dtype=np.int64))


def joint_data(matrices: Sequence[ResponseMatrix]) -> JointData:
    """The joint matrix of ``matrices`` over the models that have every benchmark."""
    models = common_models(matrices)
    parts = [restrict_models(m, models) for m in matrices]
    benches = [m.benchmark for m in parts]
    if len(set(benches)) != len(benches):
        raise UsageError(f"benchmarks repeat: {benches}")
    Y = np.concatenate([p.with_nan() for p in parts], axis=1).astype(np.float32)
    S = np.stack([p.scores for p in parts], axis=1).astype(np.float32)
    groups = np.concatenate([np.full(len(p.items), b, dtype=np.int64) for b, p in enumerate(parts)])
    columns = [f"{p.benchmark}{JOINT_SEP}{item}" for p in parts for item in p.items]
    return JointData(benches, models, columns, groups, Y, S)
