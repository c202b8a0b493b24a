"""The one IO manager: the response matrix between steps, in a format of ours (not a pickle).

Each benchmark's matrix is written once per run as ``<base>/response_matrix/<benchmark>.npz``
(compressed arrays: values, observed mask, targets) plus the names as JSON inside the same file,
and read back by the steps that need it. Everything else the steps share has its own home (the
DuckDB store, the predictor folders), so the other assets return ``MaterializeResult`` and Dagster
stores nothing for them.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import numpy as np

from sparseeval.atomic import atomic_write
from sparseeval.matrix import ResponseMatrix


def save_matrix(matrix: ResponseMatrix, path: Path) -> None:
    """Atomically write ``matrix`` as one ``.npz`` (no pickled objects: ``allow_pickle=False`` reads it)."""
    names = json.dumps({"benchmark": matrix.benchmark, "models": matrix.models, "items": matrix.items,
                        "score_source": matrix.score_source, "dropped_models": matrix.dropped_models,
                        "data_version": matrix.data_version})
    atomic_write(path, lambda tmp: np.savez_compressed(
        tmp, values=matrix.values, observed=matrix.observed, scores=matrix.scores,
        names=np.frombuffer(names.encode("utf-8"), dtype=np.uint8)), suffix=".npz")


def load_matrix(path: Path) -> ResponseMatrix:
    with np.load(path, allow_pickle=False) as data:
        names = json.loads(data["names"].tobytes().decode("utf-8"))
        return ResponseMatrix(benchmark=names["benchmark"], models=names["models"], items=names["items"],
                              values=data["values"], observed=data["observed"], scores=data["scores"],
                              score_source=names["score_source"], dropped_models=names["dropped_models"],
                              data_version=names.get("data_version", ""))


class MatrixIOManager(dg.ConfigurableIOManager):
    """Response matrices as ``.npz`` files under ``base_dir`` (one per benchmark partition)."""

    base_dir: str

    def _path(self, context: dg.OutputContext | dg.InputContext, partition: str | None = None) -> Path:
        """``<base>/<asset>/<partition key>.npz``; a key is a benchmark's slug, one safe file name."""
        key = context.asset_key.path[-1]
        return Path(self.base_dir) / key / f"{partition or context.asset_partition_key}.npz"

    def handle_output(self, context: dg.OutputContext, obj: ResponseMatrix) -> None:
        path = self._path(context)
        save_matrix(obj, path)
        context.add_output_metadata({"path": dg.MetadataValue.path(str(path))})

    def load_input(self, context: dg.InputContext) -> ResponseMatrix | dict[str, ResponseMatrix]:
        """One partition's matrix; for a step that reads every partition (the joint predictor), a dict
        benchmark -> matrix of the partitions that have been materialized (the step says which it used)."""
        if not context.has_partition_key:  # an unpartitioned step reading all partitions
            keys = context.asset_partition_keys if context.has_asset_partitions else []
            paths = {key: self._path(context, key) for key in keys}
            missing = sorted(key for key, path in paths.items() if not path.is_file())
            if missing:
                context.log.warning("no matrix yet for %s (not refreshed): left out", ", ".join(missing))
            matrices = [load_matrix(path) for path in paths.values() if path.is_file()]
            return {m.benchmark: m for m in matrices}  # keyed by name: a key is the name's slug
        return load_matrix(self._path(context))
