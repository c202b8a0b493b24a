"""Read a data path (a file, a unit folder, or a folder of many units) into one ParsedResults.

The commands that work straight from files (``evaluate``, ``fit``) and the pipeline's
``raw_results`` asset share this, so every format the store ingests is also accepted there, with
the same validation and the same errors.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from sparseeval.readers.base import InputError, ParsedResults
from sparseeval.readers.detect import detect_format, iter_sources, read_source
from sparseeval.validation import validate_results


def _units(path: Path) -> list[Path]:
    try:
        detect_format(path)
        return [path]
    except InputError:
        if not path.is_dir():
            raise
    units = iter_sources(path)
    if not units:
        raise InputError(path, "no results files found in this folder")
    return units


def read_data(path: str | Path) -> ParsedResults:
    """Read and validate every unit under ``path``; refuse the whole path on the first bad unit.

    (The store's ingest is the forgiving path: it keeps the good units and reports the bad ones.)
    """
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such file or folder")
    parts = [validate_results(read_source(unit), unit) for unit in _units(path)]
    if len(parts) == 1:
        return parts[0]
    return ParsedResults(
        responses=pl.concat([p.responses for p in parts], how="vertical_relaxed").unique(
            ["model", "benchmark", "item_id"], keep="last", maintain_order=True),
        scores=pl.concat([p.scores for p in parts], how="vertical_relaxed").unique(
            ["model", "benchmark"], keep="last", maintain_order=True),
        models=pl.concat([p.models for p in parts], how="vertical_relaxed").unique(
            ["model"], keep="last", maintain_order=True),
        sources=[s for p in parts for s in p.sources],
    )


def model_dates(models_meta: pl.DataFrame, models: list[str]) -> list[object] | None:
    """Submission dates from model metadata (``model``, ``submitted_at``) aligned with ``models``
    (None where unknown); None if no model has one, so a date split can refuse clearly."""
    if models_meta.height == 0 or models_meta["submitted_at"].null_count() == models_meta.height:
        return None
    lookup = dict(zip(models_meta["model"].to_list(), models_meta["submitted_at"].to_list(), strict=True))
    return [lookup.get(m) for m in models]
