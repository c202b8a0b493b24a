"""What every reader returns, and the one error type every refusal uses.

Readers turn a source (long table, lm-eval output folder, leaderboard details) into three
Polars frames in one canonical layout, so the store validates and ingests them the same way
whatever their origin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from sparseeval.core.errors import UserError

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
#: Evaluation settings, optional columns of ``responses`` and ``scores`` (null where the source does
#: not say). They travel with every row so the store can keep them per run, split a benchmark run
#: under other settings into its own variant (``arc@0shot``) and never pool different settings.
#: ``task`` is the task name as run (``arc_challenge``, ``leaderboard_bbh_navigate``), ``limit`` the
#: harness' ``--limit`` (a count, or a fraction below 1), ``run_at`` the run's own timestamp (naive UTC).
SETTINGS_SCHEMA: dict[str, pl.DataType] = {
    "task": pl.String(),
    "n_shot": pl.Int64(),
    "metric": pl.String(),
    "filter": pl.String(),
    "harness": pl.String(),
    "harness_version": pl.String(),
    "limit": pl.Float64(),
    "run_at": pl.Datetime("us"),
}
#: canonical columns and dtypes of ParsedResults.models (metadata; every column but model nullable)
MODELS_SCHEMA: dict[str, pl.DataType] = {
    "model": pl.String(),
    "submitted_at": pl.Datetime("us"),
    "n_params": pl.Float64(),
    "base_model": pl.String(),
}


class InputError(UserError, ValueError):
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

    @classmethod
    def verbatim(cls, path: str | Path, message: str) -> InputError:
        """An error whose text is ``message`` as is (a refusal recorded earlier, already naming the file)."""
        err = cls(path, message)
        err.args = (message,)
        return err


@dataclass(frozen=True)
class PartNote:
    """A part of a source that was not stored, and why: ``status`` is ``refused`` (bad, missing or
    unreadable: the ingest is incomplete and exits non-zero) or ``skipped`` (deliberately not read:
    an older run superseded inside the same folder, a generative metric that is not a score).
    The store adds ``warning`` notes about what it stored (a model name that differs from a stored
    one only by case or Unicode form)."""

    part: str  #: the file (or ``file: task``) concerned
    status: str  #: ``refused`` | ``skipped`` | ``warning``
    reason: str


@dataclass
class ParsedResults:
    """Canonical long-format results read from one source file or folder.

    ``responses``: one row per (model, benchmark, item_id) with ``score`` in [0, 1] (0/1 for
    correctness). ``scores``: reported full-benchmark scores per (model, benchmark).
    ``models``: optional metadata for splits by date and family.
    ``sources``: the files read, for the ``ingests`` bookkeeping.
    ``notes``: parts of the source refused or skipped (one bad task of a folder refuses that task
    alone; the other tasks are stored).
    ``format``: the format recognised (``lm-eval-0.4``, ``lighteval-details``, ``long``...), recorded per ingest.

    ``responses`` and ``scores`` may also carry any of :data:`SETTINGS_SCHEMA`'s columns; the
    benchmark column is then the *base* benchmark (``arc``) and validation derives the variant
    (``arc@0shot``) from ``n_shot`` and ``metric`` through :func:`sparseeval.data.benchmarks.variant_name`.
    """

    responses: pl.DataFrame
    scores: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=SCORES_SCHEMA))
    models: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=MODELS_SCHEMA))
    sources: list[Path] = field(default_factory=list)
    notes: list[PartNote] = field(default_factory=list)
    format: str | None = None
    #: benchmark -> the settings its data was produced under (filled by ``read_data`` from the store)
    settings: dict[str, dict] = field(default_factory=dict)

    @property
    def refused_parts(self) -> list[PartNote]:
        return [n for n in self.notes if n.status == "refused"]
