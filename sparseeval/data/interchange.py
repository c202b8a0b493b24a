"""DuckDB <-> Polars through the Arrow C stream interface, so neither direction needs pyarrow.

DuckDB's own ``.pl()`` and its scan of a registered Polars frame both go through pyarrow (156 MB
installed, most of the light install's budget); the Arrow PyCapsule protocol (``__arrow_c_stream__``)
that both libraries implement moves the same Arrow buffers without it. Measured on every DuckDB type
the store uses: the same Polars schema as ``.pl()``, and the same DuckDB types as registering the frame.
"""

from __future__ import annotations

from typing import Any

import polars as pl


def to_polars(relation: Any) -> pl.DataFrame:
    """A DuckDB relation's result as a Polars frame (what ``relation.pl()`` gives, without pyarrow)."""
    return pl.DataFrame(relation)


class ArrowView:
    """A Polars frame seen by DuckDB only as an Arrow C stream (``con.register(name, ArrowView(frame))``):
    DuckDB then reads it directly instead of converting it through pyarrow."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self.frame = frame

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.frame.__arrow_c_stream__(requested_schema)
