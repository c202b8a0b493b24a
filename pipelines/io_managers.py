"""The one IO manager: the response matrix between steps, as a reference to its stored version.

A benchmark's matrix lives in the library's matrix store (:mod:`sparseeval.data.access.matrix_store`: plain
``.npy`` arrays and a JSON of names in one folder per data version, beside the DuckDB file), where the
``response_matrix`` step keeps it up to date by appending new models. What passes between steps is
``<base>/response_matrix/<benchmark>.json``, naming that version's folder; the reading step maps the
arrays from disk (no copy, no decompression, no pickle). A matrix that is not a stored version yet
(built in memory elsewhere) is stored under ``<base>/matrices`` first. Everything else the steps share
has its own home (the DuckDB store, the predictor folders), so the other assets return
``MaterializeResult`` and Dagster stores nothing for them. A step reads the newest stored version of
the benchmark when another writer (``sparseeval refresh``) stored one since the reference was written.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import numpy as np

from sparseeval.core.atomic import atomic_write_text
from sparseeval.data.access.matrix_store import MatrixStore
from sparseeval.data.matrix import ResponseMatrix


def load_matrix(path: Path) -> ResponseMatrix:
    """A matrix written as one ``.npz`` by an earlier release of this IO manager (read without pickle)."""
    with np.load(path, allow_pickle=False) as data:
        names = json.loads(data["names"].tobytes().decode("utf-8"))
        return ResponseMatrix(benchmark=names["benchmark"], models=names["models"], items=names["items"],
                              values=data["values"], observed=data["observed"], scores=data["scores"],
                              score_source=names["score_source"], dropped_models=names["dropped_models"],
                              data_version=names.get("data_version", ""))


class MatrixIOManager(dg.ConfigurableIOManager):
    """Response matrices as references to stored versions (one JSON per benchmark partition)."""

    base_dir: str

    def _path(self, context: dg.OutputContext | dg.InputContext, partition: str | None = None) -> Path:
        """``<base>/<asset>/<partition key>.json``; a key is a benchmark's slug, one safe file name."""
        key = context.asset_key.path[-1]
        return Path(self.base_dir) / key / f"{partition or context.asset_partition_key}.json"

    def handle_output(self, context: dg.OutputContext, obj: ResponseMatrix) -> None:
        matrix = obj if MatrixStore.holds(obj) else MatrixStore(Path(self.base_dir) / "matrices").save(obj)
        path = self._path(context)
        atomic_write_text(path, json.dumps({"folder": matrix.stored_at, "benchmark": matrix.benchmark,
                                            "data_version": matrix.data_version}))
        context.add_output_metadata({"path": dg.MetadataValue.path(matrix.stored_at)})

    def _load(self, path: Path, context: dg.InputContext) -> ResponseMatrix:
        """The referenced version, or a newer one of the same benchmark stored since by another writer
        (:meth:`~sparseeval.data.access.matrix_store.MatrixStore.newest`: ``sparseeval refresh`` on the same store);
        otherwise the joint predictor and the comparison would read a matrix behind the store, and their
        sensors, which key on the store, would ask for them again on every tick."""
        legacy = path.with_suffix(".npz")
        if not path.is_file() and legacy.is_file():
            return load_matrix(legacy)
        folder = Path(json.loads(path.read_text(encoding="utf-8"))["folder"])
        newest = MatrixStore.newest(folder)
        if newest != folder:
            context.log.info("%s: a newer stored matrix than this pipeline's last one (%s): read instead",
                             path.stem, newest.name)
        return MatrixStore.load(newest)

    def load_input(self, context: dg.InputContext) -> ResponseMatrix | dict[str, ResponseMatrix]:
        """One partition's matrix; for a step that reads every partition (the joint predictor), a dict
        benchmark -> matrix of the partitions that have been materialized (the step says which it used)."""
        if not context.has_partition_key:  # an unpartitioned step reading all partitions
            keys = context.asset_partition_keys if context.has_asset_partitions else []
            paths = {key: self._path(context, key) for key in keys}
            present = {key: p for key, p in paths.items() if p.is_file() or p.with_suffix(".npz").is_file()}
            missing = sorted(set(paths) - set(present))
            if missing:
                context.log.warning("no matrix yet for %s (not refreshed): left out", ", ".join(missing))
            matrices = [self._load(path, context) for path in present.values()]
            return {m.benchmark: m for m in matrices}  # keyed by name: a key is the name's slug
        return self._load(self._path(context), context)
