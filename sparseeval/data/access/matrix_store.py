"""Each benchmark's response matrix on disk, kept in step with the DuckDB store by appending new models.

Why: the refresh reads a benchmark's matrix every day. Built from every stored row, a leaderboard of
7,000 models x 30,000 items (210 M rows) takes ~40 s and ~5 GB each time, while a day adds a few dozen
models. So the matrix is stored once, beside the DuckDB file (``<db>.matrices/<benchmark>/<version>/``),
and a refresh appends the rows of the new runs to it, as long as that is provably the matrix a full
build would give; otherwise it rebuilds and says why. The data version (the store's fingerprint of
every current run) still names the whole matrix, whichever way it was made.

**When an append is exact.** Run ids only grow, and a run never becomes current again once replaced.
So with the stored matrix's largest run id ``r``: the store's current runs now are the current runs
of then plus those after ``r`` exactly when the data version of then combined with the fingerprint of
the runs after ``r`` (count added, hashes XOR-ed) is the data version now. If, in addition, the runs
after ``r`` belong only to models the matrix neither holds nor dropped, each of those models' rows
comes from those runs alone, and the other rows are unchanged: :func:`sparseeval.data.matrix.append_models`
merges them in (models and items stay sorted). Anything else (a corrected file that replaced a run,
a new score for a model already there, a stored matrix of another format) rebuilds from every row.
The reported target is always the model's reported score (the store never declares a row mean to be
the score), so a new item column cannot change an earlier row's target.

**Files.** A version folder holds ``values.npy``, ``observed.npy``, ``scores.npy`` (plain ``.npy``:
read back memory-mapped, without a copy or a decompression) and ``meta.json`` (names, data version,
largest run id, how it was made). It is written into a private staging folder and renamed into place
whole, so a reader sees a complete version or none; ``latest.json`` names the newest. The newest
:data:`KEEP` versions of each benchmark are kept (a step of a running refresh may still read the one
before), older ones removed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sparseeval.core.atomic import atomic_write_text
from sparseeval.core.errors import UserError
from sparseeval.data.matrix import EmptyMatrixError, ResponseMatrix, append_models, build_matrix
from sparseeval.data.names import slug
from sparseeval.data.store.locking import pid_alive

if TYPE_CHECKING:
    from sparseeval.data.store import Store

FORMAT = "sparseeval-matrix"
FORMAT_VERSION = 1
#: versions of one benchmark kept on disk (the newest; a running step may still read an older one)
KEEP = 3
_ARRAYS = ("values", "observed", "scores")
_SAFE_VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_-]{0,80}$")


class MatrixStoreError(UserError, RuntimeError):
    """A stored matrix that cannot be read (removed, damaged, or of another format)."""


@dataclass(frozen=True)
class MatrixUpdate:
    """What :meth:`MatrixStore.update` did: the current matrix (memory-mapped from its version folder),
    ``how`` (``unchanged``, ``appended`` or ``rebuilt``), why, and the models it added."""

    matrix: ResponseMatrix
    how: str
    reason: str
    added_models: int
    seconds: float

    def describe(self) -> str:
        return f"{self.how} ({self.reason}) in {self.seconds:.1f} s"


def _combine(version: str, delta: str) -> str:
    """The data version of two disjoint sets of runs from theirs (``count-xorhash``, as the store writes)."""
    (n1, h1), (n2, h2) = (v.split("-", 1) for v in (version, delta))
    return f"{int(n1) + int(n2)}-{int(h1, 16) ^ int(h2, 16):016x}"


class MatrixStore:
    """The stored matrices of one DuckDB store (see the module docstring)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    @classmethod
    def beside(cls, store: Store) -> MatrixStore:
        """The matrix store of ``store``: ``<db stem>.matrices`` next to its DuckDB file (like its snapshot)."""
        path = Path(store.path)
        return cls(path.with_name(path.name.removesuffix(".duckdb") + ".matrices"))

    # --- reading ------------------------------------------------------------------------------------

    def _bench_dir(self, benchmark: str) -> Path:
        return self.folder / slug(benchmark)

    def latest(self, benchmark: str) -> tuple[Path, dict[str, Any]] | None:
        """The newest stored version of ``benchmark`` and its metadata, None when there is none (or it
        is unreadable: the caller then rebuilds)."""
        pointer = self._bench_dir(benchmark) / "latest.json"
        try:
            folder = self._bench_dir(benchmark) / json.loads(pointer.read_text(encoding="utf-8"))["version"]
            return folder, _meta(folder)
        except (OSError, ValueError, KeyError, MatrixStoreError):
            return None

    @staticmethod
    def load(folder: str | Path) -> ResponseMatrix:
        """The matrix stored in ``folder``, memory-mapped (read-only arrays: nothing is copied until used)."""
        folder = Path(folder)
        meta = _meta(folder)
        try:
            values, observed = (np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)
                                for name in ("values", "observed"))
            scores = np.load(folder / "scores.npy", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise MatrixStoreError(f"{folder}: stored matrix unreadable ({exc}); the next refresh rebuilds it") \
                from exc
        shape = (len(meta["models"]), len(meta["items"]))
        if values.shape != shape or observed.shape != shape or scores.shape != (shape[0],):
            raise MatrixStoreError(f"{folder}: arrays of shape {values.shape} for {shape[0]} models x "
                                   f"{shape[1]} items; the next refresh rebuilds it")
        return ResponseMatrix(benchmark=meta["benchmark"], models=meta["models"], items=meta["items"], values=values,
                              observed=observed, scores=scores, score_source=meta["score_source"],
                              dropped_models=meta["dropped_models"], data_version=meta["data_version"],
                              stored_at=str(folder))

    @staticmethod
    def newest(folder: str | Path) -> Path:
        """``folder`` (a stored version), or the newest stored version of the same benchmark when that one
        has seen more runs: what a step reading a matrix stored by an earlier run uses, so a matrix brought
        up to date by another writer meanwhile (``sparseeval refresh`` on the same store) is not read behind
        it. A version is only ever written for the store's state at that moment, so more runs seen is newer
        data, never another branch of it."""
        folder = Path(folder)
        meta = _meta(folder)
        found = MatrixStore(folder.parent.parent).latest(meta["benchmark"])
        if found is None or found[0] == folder or found[1]["max_run_id"] <= meta["max_run_id"]:
            return folder
        return found[0]

    @staticmethod
    def holds(matrix: ResponseMatrix) -> bool:
        """Whether ``matrix`` is exactly a stored version (its folder's data version and shape)."""
        if not matrix.stored_at:
            return False
        try:
            meta = _meta(Path(matrix.stored_at))
        except MatrixStoreError:
            return False
        return (meta["benchmark"], meta["data_version"], len(meta["models"]), len(meta["items"])) == (
            matrix.benchmark, matrix.data_version or meta["data_version"], *matrix.shape)

    # --- writing ------------------------------------------------------------------------------------

    def update(self, store: Store, benchmark: str, *, incremental: bool = True) -> MatrixUpdate:
        """``benchmark``'s matrix as the store holds it now: the stored one when the data version is
        unchanged, else the stored one with the new models appended when that is exact, else rebuilt
        from every row. Read in one state of the store (:meth:`~sparseeval.data.store.Store.pinned`)."""
        t0 = time.perf_counter()
        with store.pinned():
            version = store.data_version(benchmark)
            max_run = store.max_run_id(benchmark)
            found = self.latest(benchmark)
            if found is not None and found[1]["data_version"] == version and found[1]["max_run_id"] == max_run:
                return MatrixUpdate(self.load(found[0]), "unchanged", f"data version {version}", 0,
                                    time.perf_counter() - t0)
            why = "incremental updates turned off" if not incremental else self._no_append(store, benchmark, found,
                                                                                              version)
            if why is None:
                assert found is not None
                try:
                    delta = build_matrix(*store.load_long_since(benchmark, found[1]["max_run_id"]), benchmark)
                except EmptyMatrixError as exc:  # new runs without responses, or without any score
                    why = f"the new runs alone give no matrix rows ({exc})"
                else:
                    old = self.load(found[0])
                    matrix = self._write(old.benchmark, version, max_run, "appended",
                                         lambda alloc: append_models(old, delta, alloc=alloc))
                    added = len(delta.models) + len(delta.dropped_models)
                    return MatrixUpdate(matrix, "appended", f"{added} new models onto {len(old.models)}", added,
                                        time.perf_counter() - t0)
            built = store.read_matrix(benchmark)
        matrix = self._write(benchmark, version, max_run, "rebuilt", lambda alloc: built)
        return MatrixUpdate(matrix, "rebuilt", why or "", len(built.models), time.perf_counter() - t0)

    def _no_append(self, store: Store, benchmark: str, found: tuple[Path, dict[str, Any]] | None,
                   version: str) -> str | None:
        """Why the stored matrix cannot simply be appended to (None when it can)."""
        if found is None:
            return "no stored matrix"
        meta = found[1]
        delta, models = store.runs_after(benchmark, meta["max_run_id"])
        if _combine(meta["data_version"], delta) != version:
            return "runs of the stored matrix were replaced since (a corrected or re-run file)"
        touched = set(models) & (set(meta["models"]) | set(meta["dropped_models"]))
        if touched:
            return f"new runs for {len(touched)} model(s) already in the matrix (e.g. {sorted(touched)[0]})"
        return None

    def save(self, matrix: ResponseMatrix, *, max_run_id: int = 0) -> ResponseMatrix:
        """Store ``matrix`` as its own version (named by its data version, or its content digest when it
        has none); the stored, memory-mapped matrix. An identical version already there is reused."""
        version = matrix.data_version or f"digest-{matrix.digest()[:24]}"
        return self._write(matrix.benchmark, version, max_run_id, "saved", lambda alloc: matrix)

    def _write(self, benchmark: str, version: str, max_run_id: int, how: str, make: Any) -> ResponseMatrix:
        name = version if _SAFE_VERSION.match(version) else "v-" + re.sub(r"[^0-9A-Za-z_-]", "_", version)[:60]
        root = self._bench_dir(benchmark)
        final = root / name
        if final.is_dir():
            try:
                stored = self.load(final)
            except MatrixStoreError:
                shutil.rmtree(final, ignore_errors=True)
            else:
                if stored.data_version == version:
                    self._point(root, name)
                    return stored
        root.mkdir(parents=True, exist_ok=True)
        staging = root / f".staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            def alloc(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
                name = "values" if np.dtype(dtype) == np.float32 else "observed"
                return np.lib.format.open_memmap(staging / f"{name}.npy", mode="w+", dtype=dtype, shape=shape)

            matrix = make(alloc)
            for array_name in _ARRAYS:
                array = getattr(matrix, array_name)
                if isinstance(array, np.memmap) and Path(array.filename or "").parent == staging:
                    array.flush()
                else:
                    np.save(staging / f"{array_name}.npy", np.asarray(array), allow_pickle=False)
            meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "benchmark": benchmark,
                    "data_version": version, "max_run_id": int(max_run_id), "how": how,
                    "models": matrix.models, "items": matrix.items, "score_source": matrix.score_source,
                    "dropped_models": matrix.dropped_models}
            (staging / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
            del matrix
            for path in staging.iterdir():
                with path.open("rb") as fh:
                    os.fsync(fh.fileno())
            try:
                os.replace(staging, final)
            except OSError:  # another writer stored the same version meanwhile: theirs is as good
                if not final.is_dir():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self._point(root, name)
        self._prune(root, keep=name)
        return self.load(final)

    @staticmethod
    def _point(root: Path, name: str) -> None:
        atomic_write_text(root / "latest.json", json.dumps({"version": name}))

    @staticmethod
    def _prune(root: Path, *, keep: str) -> None:
        """Remove all but the newest :data:`KEEP` versions (never ``keep``), and dead staging folders."""
        versions = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                          key=lambda p: p.stat().st_mtime, reverse=True)
        for old in [p for p in versions if p.name != keep][KEEP - 1:]:
            shutil.rmtree(old, ignore_errors=True)
        for staging in root.glob(".staging-*"):
            pid = staging.name.split("-")[1]
            if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
                shutil.rmtree(staging, ignore_errors=True)


def _meta(folder: Path) -> dict[str, Any]:
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MatrixStoreError(f"{folder}: no readable stored matrix ({exc})") from exc
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        raise MatrixStoreError(f"{folder}: a stored matrix of format {meta.get('format')} "
                               f"{meta.get('format_version')}, this sparseeval reads {FORMAT} {FORMAT_VERSION}")
    return meta
