"""Machine-readable output of the commands: ``--json FILE`` and ``--csv FILE``, ``-`` for standard output.

One meaning in every command (predict, next, evaluate, sql): the records go to FILE, written
atomically, or to standard output with ``-``, in which case the command's human table is not printed
there (a pipe gets only the JSON or CSV).
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from sparseeval.core.atomic import atomic_write_text


def to_stdout(*targets: Path | str | None) -> bool:
    """Whether a ``--json``/``--csv`` target is standard output (the table then stays off it)."""
    return any(t == "-" for t in targets)


def _flat(value: Any) -> Any:
    """A CSV cell: lists joined with ``; `` (warnings, item ids), nested mappings as JSON text."""
    if isinstance(value, list | tuple):
        return "; ".join(str(v) for v in value)
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True)
    return value


def write_records(records: Sequence[Mapping[str, Any]], *, json_to: Path | str | None = None,
                  csv_to: Path | str | None = None) -> None:
    """Write ``records`` (one dict per row) as a JSON array and/or a CSV table."""
    if json_to is not None:
        _emit(json.dumps(list(records), indent=1, default=str) + "\n", json_to)
    if csv_to is not None:
        frame = pl.DataFrame([{k: _flat(v) for k, v in r.items()} for r in records], infer_schema_length=None)
        buf = io.StringIO()
        frame.write_csv(buf)
        _emit(buf.getvalue(), csv_to)


def _emit(text: str, target: Path | str) -> None:
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        atomic_write_text(Path(target), text)
