"""Read a data path (a file, a unit folder, or a folder of many units) into one ParsedResults.

The commands that work straight from files (``evaluate``, ``fit``) and the pipeline's
``raw_results`` asset share this, so every format the store ingests is also accepted there, with
the same validation and the same errors.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import polars as pl

from sparseeval.readers.base import InputError, ParsedResults


def read_data(path: str | Path) -> ParsedResults:
    """Read and validate every unit under ``path`` exactly as ``ingest`` would, into frames.

    The data goes through the store's own ingest into a private temporary store, so ``fit`` and
    ``evaluate`` see precisely what ``sparseeval ingest`` would store: the same readers, validation,
    glob-safe pinned reads, and the same rule for two files that disagree (refused, naming both,
    unless run times order them). Unlike the forgiving store, any refused unit or refused part of a
    unit refuses the whole path here: a fit on silently less data is worse than no fit.
    """
    from sparseeval.store import Store  # lazy: the store pulls in DuckDB's machinery

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
        responses, scores = store.load_long()
        models = store.model_metadata().select("model", "submitted_at", "n_params", "base_model")
        settings = {b: store.training_settings(b) for b in store.benchmarks()}
    return ParsedResults(responses=responses.select("model", "benchmark", "item_id", "score"),
                         scores=scores.select("model", "benchmark", "score"),
                         models=models, sources=[Path(e.file) for e in stored], settings=settings)


def model_dates(models_meta: pl.DataFrame, models: list[str]) -> list[object] | None:
    """Submission dates from model metadata (``model``, ``submitted_at``) aligned with ``models``
    (None where unknown); None if no model has one, so a date split can refuse clearly."""
    if models_meta.height == 0 or models_meta["submitted_at"].null_count() == models_meta.height:
        return None
    lookup = dict(zip(models_meta["model"].to_list(), models_meta["submitted_at"].to_list(), strict=True))
    return [lookup.get(m) for m in models]
