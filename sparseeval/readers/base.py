"""What every reader returns, and the one error type every refusal uses.

Readers turn a source (long table, lm-eval output folder, leaderboard details) into three
Polars frames in one canonical layout, so the store validates and ingests them the same way
whatever their origin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

#: canonical columns and dtypes of ParsedResults.responses
RESPONSES_SCHEMA: dict[str, pl.DataType] = {
    "model": pl.String(),
    "benchmark": pl.String(),
    "item_id": pl.String(),
    "score": pl.Float64(),
}
#: canonical columns and dtypes of ParsedResults.scores
SCORES_SCHEMA: dict[str, pl.DataType] = {
    "model": pl.String(),
    "benchmark": pl.String(),
    "score": pl.Float64(),
}
#: canonical columns and dtypes of ParsedResults.models (metadata; every column but model nullable)
MODELS_SCHEMA: dict[str, pl.DataType] = {
    "model": pl.String(),
    "submitted_at": pl.Datetime("us"),
    "n_params": pl.Float64(),
    "base_model": pl.String(),
}


class InputError(ValueError):
    """Refused input. The message always names the file and the problem (and line/column if known)."""

    def __init__(self, path: str | Path, problem: str, *, line: int | None = None,
                 column: str | None = None) -> None:
        self.path = str(path)
        self.problem = problem
        self.line = line
        self.column = column
        where = self.path
        if line is not None:
            where += f", line {line}"
        if column is not None:
            where += f", column {column!r}"
        super().__init__(f"{where}: {problem}")


@dataclass
class ParsedResults:
    """Canonical long-format results read from one source file or folder.

    ``responses``: one row per (model, benchmark, item_id) with ``score`` in [0, 1] (0/1 for
    correctness). ``scores``: reported full-benchmark scores per (model, benchmark).
    ``models``: optional metadata for splits by date and family.
    ``sources``: the files read, for the ``ingests`` bookkeeping.
    """

    responses: pl.DataFrame
    scores: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=SCORES_SCHEMA))
    models: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=MODELS_SCHEMA))
    sources: list[Path] = field(default_factory=list)
