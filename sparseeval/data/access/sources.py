"""Read a data path (a file, a unit folder, or a folder of many units) into one ParsedResults.

The commands that work straight from files (``evaluate``, ``fit``) and the pipeline's
``raw_results`` asset share this, so every format the store ingests is also accepted there, with
the same validation and the same errors.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from sparseeval.data.readers.base import InputError, ParsedResults

if TYPE_CHECKING:
    from sparseeval.data.store import Store


class DataSource:
    """A data path ingested into a private temporary store, read per benchmark.

    Large sources (the leaderboard's 7,000 models x 30,000 items, 210 M rows) never become one
    eager frame: :meth:`long` returns LazyFrames over the store that ``build_matrix`` streams.
    """

    def __init__(self, store: Store, files: list[Path]) -> None:
        self.store = store
        self.files = files

    def benchmarks(self) -> list[str]:
        return self.store.benchmarks()

    def long(self, benchmark: str | None = None, *, lazy: bool = True) -> tuple[Any, Any]:
        """(responses, scores) of ``benchmark`` (all when None), lazy by default."""
        return self.store.load_long(benchmark, lazy=lazy)

    def models(self) -> pl.DataFrame:
        return self.store.model_metadata().select("model", "submitted_at", "n_params", "base_model")

    def settings(self, benchmark: str) -> dict[str, Any]:
        return self.store.training_settings(benchmark)

    def metrics(self, benchmark: str) -> dict[str | None, int]:
        """The metrics ``benchmark``'s responses were scored by, with their number of runs."""
        return self.store.response_metrics(benchmark)


@contextlib.contextmanager
def open_data(path: str | Path) -> Iterator[DataSource]:
    """Ingest every unit under ``path`` exactly as ``ingest`` would, into a private temporary store.

    The data goes through the store's own ingest, so ``fit`` and ``evaluate`` see precisely what
    ``sparseeval ingest`` would store: the same readers, validation, glob-safe pinned reads, and
    the same rule for two files that disagree (refused, naming both, unless run times order them).
    Unlike the forgiving store, any refused unit or refused part of a unit refuses the whole path
    here: a fit on silently less data is worse than no fit.
    """
    from sparseeval.data.store import Store  # lazy: the store pulls in DuckDB's machinery

    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such file or folder")
    with tempfile.TemporaryDirectory(prefix="sparseeval-read-") as tmp:
        store = Store(Path(tmp) / "read.duckdb", snapshot=False)
        store.apply_schema()
        report = store.ingest(path)
        for entry in report.files:
            if entry.status == "refused":
                raise InputError.verbatim(entry.file, entry.reason or f"{entry.file}: refused")
            refused = [n for n in entry.notes if n.status == "refused"]
            if refused:
                raise InputError(refused[0].part, f"{refused[0].reason} ({len(refused)} part(s) of {entry.file} "
                                                  "refused; fix them, or ingest into the store, which keeps the rest)")
        stored = [e for e in report.files if e.status in ("ok", "partial")]
        if not stored:
            raise InputError(path, "no results found: " + "; ".join(
                f"{e.file}: {e.reason}" for e in report.files) if report.files else "empty folder")
        yield DataSource(store, [Path(e.file) for e in stored])


def read_data(path: str | Path) -> ParsedResults:
    """Everything under ``path`` as eager frames (see :func:`open_data`; prefer it for large data)."""
    with open_data(path) as data:
        responses, scores = data.long(lazy=False)
        return ParsedResults(responses=responses.select("model", "benchmark", "item_id", "score"),
                             scores=scores.select("model", "benchmark", "score"), models=data.models(),
                             sources=data.files, settings={b: data.settings(b) for b in data.benchmarks()})


def model_dates(models_meta: pl.DataFrame, models: list[str]) -> list[object] | None:
    """Submission dates from model metadata (``model``, ``submitted_at``) aligned with ``models``
    (None where unknown); None if no model has one, so a date split can refuse clearly."""
    if models_meta.height == 0 or models_meta["submitted_at"].null_count() == models_meta.height:
        return None
    lookup = dict(zip(models_meta["model"].to_list(), models_meta["submitted_at"].to_list(), strict=True))
    return [lookup.get(m) for m in models]
