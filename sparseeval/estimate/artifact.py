"""A published predictor as a versioned folder: ``predictor.json`` + ``state.safetensors``.

Why a folder and not a pickle: ``predictor.json`` is readable and diffable (anchors with their
lm-eval task and doc id, calibration, what it was trained on, and the estimator's plain parameters),
``state.safetensors`` holds only the arrays (a header and raw bytes: reading it executes nothing, and
it needs NumPy, not torch). The content hash (sha256 over the canonical JSON and the state bytes) is
the predictor's version: equal content means an equal hash, so re-publishing the same predictor
changes nothing, and any edit to either file is detected at load time instead of silently producing
wrong scores.

Format version 1 kept the state as ``state.pt`` (``torch.save``); such folders still load where
torch is installed (the ``[fit]`` extra), and are refused with that advice where it is not.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sparseeval.core import __version__
from sparseeval.core.atomic import atomic_folder
from sparseeval.core.errors import UserError
from sparseeval.data.benchmarks import split_variant
from sparseeval.data.tasks import SUBTASK_BENCHMARKS, harness_task
from sparseeval.estimate.methods.base import AnchorEstimator
from sparseeval.estimate.methods.inference import as_array

FORMAT = "sparseeval-predictor"
FORMAT_VERSION = 2
META_FILE = "predictor.json"
STATE_FILE = "state.safetensors"
#: format version 1's state file (``torch.save`` of the estimator state), read when torch is installed
LEGACY_STATE_FILE = "state.pt"
#: the key marking an array leaf of the state tree in ``predictor.json``: ``{"$array": "<safetensors key>"}``
ARRAY_REF = "$array"


class ArtifactError(UserError, ValueError):
    """A predictor folder that cannot be loaded: missing files, wrong format, or tampered content."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


@dataclass(frozen=True)
class AnchorInfo:
    """One anchor: its position in the predictor's input, its matrix column, and where to run it."""

    position: int
    column: int
    item_id: str
    task: str | None  #: lm-evaluation-harness task name (None: not runnable by the harness)
    doc_id: int | None  #: document index within that task
    benchmark: str | None = None  #: the anchor's benchmark in a joint predictor (None: the predictor's)


@dataclass(frozen=True)
class PredictorArtifact:
    """A fitted estimator with everything needed to score, export and audit it."""

    estimator: AnchorEstimator
    benchmark: str
    item_ids: list[str]
    anchors: list[AnchorInfo]
    calibration: dict[str, Any]
    train_models: dict[str, Any]
    library_version: str
    content_hash: str = ""
    folder: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: what the user named: a folder, or ``hf://ORG/REPO@rev/PATH`` (then ``folder`` is in the Hub cache)
    source: str | None = None

    @property
    def k(self) -> int:
        return len(self.anchors)

    @property
    def method(self) -> str:
        return self.estimator.method

    @property
    def is_joint(self) -> bool:
        """A ``sparseeval-joint`` predictor: several benchmarks, one row per benchmark plus the mean."""
        return "joint" in self.extra

    @property
    def benchmarks(self) -> list[str]:
        """The benchmarks whose answers this predictor reads (one, or a joint predictor's several)."""
        return list(self.extra["joint"]["benchmarks"]) if self.is_joint else [self.benchmark]

    def training_settings(self, benchmark: str | None = None) -> dict[str, Any]:
        """The settings (n_shot, metric, filter, harness...) the training data of ``benchmark`` (default:
        the predictor's) was run with, as recorded at fit time; empty when nothing was recorded."""
        recorded = self.extra.get("settings") or {}
        if self.is_joint:
            return dict(recorded.get(benchmark or "") or {})
        return dict(recorded)

    @property
    def anchor_item_ids(self) -> list[str]:
        return [a.item_id for a in self.anchors]

    def save(self, folder: str | Path) -> PredictorArtifact:
        """Write this artifact to ``folder`` (see :func:`save_predictor`)."""
        return save_predictor(folder, estimator=self.estimator, benchmark=self.benchmark,
                              item_ids=self.item_ids, train_models=self.train_models,
                              calibration=self.calibration,
                              harness_task=None if self.is_joint else
                              {a.item_id: (a.task, a.doc_id) for a in self.anchors},
                              extra=self.extra)


def harness_location(benchmark: str, item_id: str) -> tuple[str | None, int | None]:
    """lm-eval task name and doc index of an item.

    The benchmark's variant suffix (``arc@0shot``) is a setting, not part of the task name.
    Through :func:`sparseeval.data.tasks.harness_task`, the inverse of the readers' mapping: leaderboard
    benchmarks map to their harness task (``arc`` -> ``arc_challenge``); MMLU items ``subject.index`` to
    task ``mmlu_<subject>``; leaderboard v2 items ``subtask.index`` to ``leaderboard_<group>_<subtask>``,
    MMLU-Pro's to ``mmlu_pro_<subject>``; an item ``<task>.<index>`` of another grouped benchmark to
    that subtask (the readers keep the whole subtask name); any other benchmark is taken to be a harness
    task of the same name with the item id as doc index (what the lm-eval reader produces).
    """
    base = split_variant(benchmark)[0]
    prefix, _, index = item_id.rpartition(".")
    if prefix and index.isdigit():
        task = harness_task(base, prefix)
        if task is not None:
            return task, int(index)
        return (None, None) if base in SUBTASK_BENCHMARKS else (prefix, int(index))
    if item_id.isdigit() and base != "mmlu":
        return harness_task(base, None) or base, int(item_id)
    return None, None


def split_state(state: Any, prefix: str = "") -> tuple[Any, dict[str, np.ndarray]]:
    """An estimator state (nested dicts and lists of arrays and plain values) as a JSON tree whose
    array leaves are ``{"$array": key}`` references, and the arrays by key (dotted paths)."""
    arrays: dict[str, np.ndarray] = {}

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, dict):
            return {str(k): walk(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v, f"{path}.{i}") for i, v in enumerate(value)]
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray) or hasattr(value, "detach"):  # a torch tensor from a fit
            arrays[path] = np.ascontiguousarray(as_array(value))
            return {ARRAY_REF: path}
        if value is None or isinstance(value, bool | int | float | str):
            return value
        raise TypeError(f"cannot store a {type(value).__name__} in a predictor state ({path})")

    return walk(state, prefix), arrays


def join_state(tree: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Inverse of :func:`split_state`."""
    if isinstance(tree, dict):
        if set(tree) == {ARRAY_REF}:
            return arrays[tree[ARRAY_REF]]
        return {k: join_state(v, arrays) for k, v in tree.items()}
    if isinstance(tree, list):
        return [join_state(v, arrays) for v in tree]
    return tree


def _state_bytes(estimator: AnchorEstimator) -> tuple[Any, bytes]:
    """(JSON tree for ``predictor.json``, ``state.safetensors`` bytes) of a fitted estimator."""
    from safetensors.numpy import save

    tree, arrays = split_state(estimator.get_state())
    return tree, save(arrays)


def _canonical(meta: dict[str, Any]) -> bytes:
    return json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _hash(meta: dict[str, Any], state: bytes) -> str:
    body = {k: v for k, v in meta.items() if k != "content_hash"}
    return "sha256:" + hashlib.sha256(_canonical(body) + b"\0" + state).hexdigest()


def build_anchors(estimator: AnchorEstimator, benchmark: str, item_ids: list[str],
                  harness_task: dict[str, tuple[str | None, int | None]] | None = None) -> list[AnchorInfo]:
    """Anchor descriptions of a fitted estimator: matrix column, item id, harness task and doc id."""
    if estimator.anchors_ is None:
        raise ValueError("cannot save an unfitted estimator")
    joint = hasattr(estimator, "anchor_groups_")  # columns are "benchmark::item" keys of a joint matrix
    anchors = []
    for pos, col in enumerate(estimator.anchors_.tolist()):
        if not 0 <= col < len(item_ids):
            raise ValueError(f"anchor column {col} is outside the {len(item_ids)} item ids")
        item = item_ids[col]
        bench = None
        if joint:
            bench, _, item = item.partition("::")
        task, doc = (harness_task or {}).get(item) or harness_location(bench or benchmark, item)
        anchors.append(AnchorInfo(pos, int(col), item, task, doc, bench))
    return anchors


def save_predictor(folder: str | Path, *, estimator: AnchorEstimator, benchmark: str, item_ids: list[str],
                   train_models: dict[str, Any], calibration: dict[str, Any],
                   harness_task: dict[str, tuple[str | None, int | None]] | None = None,
                   library_version: str | None = None,
                   extra: dict[str, Any] | None = None) -> PredictorArtifact:
    """Write the predictor folder atomically and return the saved artifact.

    ``item_ids``: all matrix items (``estimator.anchors_`` index into them); ``harness_task``:
    optional override item id -> (task, doc id), default :func:`harness_location`. The folder is
    written to a temporary sibling and renamed into place, so a reader never sees half a predictor;
    if ``folder`` already holds the same content hash nothing is rewritten (idempotent).
    """
    folder = Path(folder)
    anchors = build_anchors(estimator, benchmark, list(item_ids), harness_task)
    version = library_version or __version__
    meta: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "library_version": version,
        "benchmark": benchmark,
        "method": estimator.method,
        "k": len(anchors),
        "item_ids": list(item_ids),
        # "benchmark" only for joint predictors: single-benchmark files stay exactly as before
        "anchors": [{k: v for k, v in a.__dict__.items() if not (k == "benchmark" and v is None)} for a in anchors],
        "train_models": train_models,
        "calibration": calibration,
        "extra": extra or {},
    }
    meta["state"], state = _state_bytes(estimator)
    meta["content_hash"] = _hash(meta, state)
    artifact = PredictorArtifact(estimator=estimator, benchmark=benchmark, item_ids=list(item_ids),
                                 anchors=anchors, calibration=calibration, train_models=train_models,
                                 library_version=version, content_hash=meta["content_hash"],
                                 folder=folder, extra=extra or {})
    existing = folder / META_FILE
    if existing.is_file():
        try:
            if json.loads(existing.read_text()).get("content_hash") == meta["content_hash"]:
                load_predictor(folder)  # same version, and intact: nothing to do
                return artifact
        except (ValueError, ArtifactError):
            pass  # unreadable or tampered: replace it
    def fill(tmp: Path) -> None:
        (tmp / STATE_FILE).write_bytes(state)
        (tmp / META_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True, allow_nan=False) + "\n")

    atomic_folder(folder, fill)
    return artifact


def load_predictor(folder: str | Path) -> PredictorArtifact:
    """Read a predictor folder (or ``hf://ORG/REPO[@revision][/PATH]``, fetched through the Hub client's
    cache: :mod:`sparseeval.data.access.predictor_hub`), verify its content hash, and rebuild the estimator.

    Raises :class:`ArtifactError` naming the folder when a file is missing, the format is unknown,
    or the hash does not match (an edited anchor list or state would silently mis-score models).
    Reads format versions 2 (``state.safetensors``, NumPy only) and 1 (``state.pt``, needs torch).
    """
    import sparseeval.estimate.methods  # noqa: F401  (registers every method so from_state can find it)
    from sparseeval.data.access import predictor_hub

    source = str(folder)
    folder = predictor_hub.resolve(folder)
    # a published path is a link that a publication swaps in one rename: resolve it once, so both
    # files come from the same version even if the link moves while they are read
    folder = Path(folder).resolve()
    meta_path = folder / META_FILE
    state_file = STATE_FILE if (folder / STATE_FILE).is_file() or not (folder / LEGACY_STATE_FILE).is_file() \
        else LEGACY_STATE_FILE
    state_path = folder / state_file
    if not meta_path.is_file() or not state_path.is_file():
        raise ArtifactError(folder, f"not a predictor folder (needs {META_FILE} and {STATE_FILE})")
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(meta_path, f"not valid JSON: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ArtifactError(meta_path, f"not a {FORMAT} file")
    version = meta.get("format_version")
    expected_file = {1: LEGACY_STATE_FILE, FORMAT_VERSION: STATE_FILE}.get(version)  # type: ignore[call-overload]
    if expected_file is None:
        raise ArtifactError(meta_path, f"format version {version} is not supported (this library reads versions "
                                       f"1 and {FORMAT_VERSION}; a newer sparseeval wrote it: upgrade sparseeval)")
    if expected_file != state_file:
        raise ArtifactError(folder, f"format version {version} keeps its state in {expected_file}, "
                                    f"but the folder holds {state_file}")
    state_raw = state_path.read_bytes()
    if _hash(meta, state_raw) != meta.get("content_hash"):
        raise ArtifactError(folder, f"content hash mismatch: {META_FILE} or {state_file} was modified "
                                    "after publishing; refusing to use it")
    state = _read_state(folder, meta, state_raw)
    try:
        estimator = AnchorEstimator.from_state(state)
    except ValueError as exc:
        raise ArtifactError(folder, f"cannot rebuild the estimator: {exc}") from None
    anchors = [AnchorInfo(**a) for a in meta["anchors"]]
    if [a.column for a in anchors] != estimator.anchors_.tolist():
        raise ArtifactError(folder, f"anchor list in {META_FILE} disagrees with {state_file}")
    return PredictorArtifact(estimator=estimator, benchmark=meta["benchmark"], item_ids=meta["item_ids"],
                             anchors=anchors, calibration=meta["calibration"],
                             train_models=meta["train_models"], library_version=meta["library_version"],
                             content_hash=meta["content_hash"], folder=folder, extra=meta.get("extra", {}),
                             source=source)


def _read_state(folder: Path, meta: dict[str, Any], raw: bytes) -> dict[str, Any]:
    """The estimator state of a verified folder: safetensors arrays joined with the JSON tree (version
    2), or a version-1 ``torch.save`` file read by torch with tensors turned into arrays."""
    if meta["format_version"] == FORMAT_VERSION:
        from safetensors import SafetensorError
        from safetensors.numpy import load

        try:
            return join_state(meta["state"], load(raw))
        except (SafetensorError, KeyError) as exc:
            raise ArtifactError(folder, f"{STATE_FILE} does not hold the arrays {META_FILE} names: {exc}") from None
    from sparseeval.estimate.methods.torch_state import load_torch_state

    try:
        tree, arrays = split_state(load_torch_state(raw))
    except ImportError:
        raise ArtifactError(folder, f"a format version 1 predictor ({LEGACY_STATE_FILE}, written with torch) needs "
                                    "torch to load: pip install 'sparseeval[fit]', or re-save it once where torch "
                                    "is installed (`python -m sparseeval.estimate.artifact FOLDER` writes version "
                                    f"{FORMAT_VERSION}, readable without torch)") from None
    return join_state(tree, arrays)


def upgrade(folder: str | Path) -> PredictorArtifact:
    """Re-save a predictor folder in the current format (same estimator, anchors and calibration; a new
    content hash, since the state file changed): a version-1 folder becomes readable without torch.
    The folder is rewritten whole and atomically (:func:`save_predictor`), so ``state.pt`` goes."""
    art = load_predictor(folder)
    if (Path(folder) / STATE_FILE).is_file():
        return art
    return art.save(folder)


if __name__ == "__main__":  # python -m sparseeval.estimate.artifact FOLDER...: upgrade folders to the current format
    import sys

    for name in sys.argv[1:]:
        done = upgrade(name)
        print(f"{name}: format version {FORMAT_VERSION} ({done.content_hash})")
