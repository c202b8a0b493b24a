"""From a reader's rows to one :class:`~sparseeval.data.readers.base.ParsedResults`, the same for every harness.

The harness readers gather frames run by run; what they return must follow one set of rules whatever the
format: the canonical schemas plus the settings columns, the latest run of a key wins, a score is kept only
with per-item rows of its benchmark (else said in a note), and a source that yields nothing is refused with
the reason. Those rules live here, so lm-eval and lighteval output cannot drift apart on them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from sparseeval.data.readers.base import (
    MODELS_SCHEMA,
    RESPONSES_SCHEMA,
    SCORES_SCHEMA,
    SETTINGS_SCHEMA,
    InputError,
    ParsedResults,
    PartNote,
)


def settings_frame(frame: pl.DataFrame, **settings: Any) -> pl.DataFrame:
    """Add the settings columns (typed as SETTINGS_SCHEMA) as literals to ``frame``."""
    return frame.with_columns([pl.lit(settings.get(c), dtype=t).alias(c) for c, t in SETTINGS_SCHEMA.items()])


def build_parsed(responses: pl.DataFrame, scores: pl.DataFrame, models: pl.DataFrame,
                 sources: list[Path], notes: list[PartNote] | None = None,
                 fmt: str | None = None) -> ParsedResults:
    """Cast frames to the canonical schemas plus the settings columns, keeping the latest run per key
    (column ``_run`` orders runs; later wins)."""
    def latest(frame: pl.DataFrame, keys: list[str], schema: Mapping[str, pl.DataType],
               settings: bool) -> pl.DataFrame:
        full = {**schema, **(SETTINGS_SCHEMA if settings else {})}
        if frame.height == 0:
            return pl.DataFrame(schema=full)
        if "_run" in frame.columns:
            frame = frame.sort("_run", maintain_order=True).unique(keys, keep="last", maintain_order=True)
        cols = [pl.col(c).cast(t) if c in frame.columns else pl.lit(None, dtype=t).alias(c)
                for c, t in full.items()]
        return frame.select(cols).sort(keys)

    kept_responses = latest(responses, ["model", "benchmark", "item_id"], RESPONSES_SCHEMA, True)
    kept_scores, dropped = scores_with_items(latest(scores, ["model", "benchmark"], SCORES_SCHEMA, True),
                                             kept_responses, sources)
    return ParsedResults(
        responses=kept_responses,
        scores=kept_scores,
        models=latest(models, ["model"], MODELS_SCHEMA, False),
        sources=sources,
        notes=[*(notes or []), *dropped],
        format=fmt,
    )


def scores_with_items(scores: pl.DataFrame, responses: pl.DataFrame, sources: Sequence[Path],
                      ) -> tuple[pl.DataFrame, list[PartNote]]:
    """Scores of a results folder whose benchmark has per-item rows in it, and a note per score dropped.

    A folder of per-item files (lm-eval samples, leaderboard details) whose results file reports a task
    with no per-item file of it (not logged, or not downloaded: a Hub source with wanted tasks fetches
    only their files) would otherwise be refused as a whole (a score needs items); the rest of the
    folder is good, so only that score is left out, and said. A folder with no per-item rows at all is
    a results-only source: its scores are kept.
    """
    if responses.height == 0 or scores.height == 0:
        return scores, []
    held = responses.select("model", "benchmark").unique()
    orphans = scores.join(held, on=["model", "benchmark"], how="anti")
    if orphans.height == 0:
        return scores, []
    where = os.path.commonpath([str(p) for p in sources]) if sources else "?"
    notes = [PartNote(f"{where}: {bench}", "skipped",
                      f"reported score of {model} not stored: the folder holds no per-item file of {bench} "
                      "(not logged, or not downloaded), so the score has no items to learn from")
             for model, bench in orphans.select("model", "benchmark").sort("benchmark", "model").iter_rows()]
    return scores.join(held, on=["model", "benchmark"], how="semi"), notes


def refuse_empty(path: Path, parsed: ParsedResults, errors: Sequence[InputError] = ()) -> ParsedResults:
    """A source that yields no rows raises: the one error if a single part failed, else a summary."""
    if parsed.responses.height or parsed.scores.height:
        return parsed
    if len(errors) == 1:
        raise errors[0]
    refused = parsed.refused_parts
    if refused:
        detail = "; ".join(f"{n.part}: {n.reason}" for n in refused[:3])
        more = f" (and {len(refused) - 3} more)" if len(refused) > 3 else ""
        raise InputError(path, f"every part was refused: {detail}{more}")
    skipped = "; ".join(f"{n.part}: {n.reason}" for n in parsed.notes[:3])
    raise InputError(path, "no responses or scores in this source" + (f" ({skipped})" if skipped else ""))
