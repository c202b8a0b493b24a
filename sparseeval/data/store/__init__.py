"""The DuckDB store: transactional, idempotent ingest with run history, and the read path.

One concern per module: :mod:`.connection` (write transactions, the read-only snapshot, locks; built on
:mod:`.errors`, :mod:`.transactions`, :mod:`.locking`, :mod:`.snapshot` and :mod:`.schema`),
:mod:`.pinning` (read exactly the named bytes, once), :mod:`.bulk` (large long parquet checked and
read by DuckDB), :mod:`.ingest` (units -> runs -> rows, supersede / merge / conflict rules),
:mod:`.reading` (frames for the matrix, counts), :mod:`.results` (anchor sets, evaluations,
predictions), :mod:`.publications` (fit decisions and publication steps), :mod:`.hub` (Hub repos' ingested
commits), :mod:`.history` (what a refresh reads back of its own history), :mod:`.health` (what
``sparseeval doctor`` checks and repairs, below the store's API).
"""

from __future__ import annotations

from sparseeval.data.store.bulk import bulk_long
from sparseeval.data.store.connection import default_db_path
from sparseeval.data.store.errors import (
    PublishInterrupted,
    StoreDamagedError,
    StoreError,
    StoreLayoutError,
    StoreLockedError,
    StorePathError,
)
from sparseeval.data.store.history import History, StoredComparison, StoredFit
from sparseeval.data.store.hub import HubRecords
from sparseeval.data.store.ingest import FileReport, Ingesting, IngestReport, default_reader
from sparseeval.data.store.publications import PublicationRecords
from sparseeval.data.store.reading import TABLES, Reading
from sparseeval.data.store.results import ResultWriters

__all__ = ["TABLES", "FileReport", "IngestReport", "PublishInterrupted", "Store", "StoreDamagedError", "StoreError",
           "StoreLayoutError", "StoreLockedError", "StorePathError", "StoredComparison", "StoredFit", "bulk_long",
           "default_db_path", "default_reader"]


class Store(Ingesting, Reading, ResultWriters, PublicationRecords, HubRecords, History):
    """A DuckDB file holding results (with their run history), anchors, evaluations and predictions."""
