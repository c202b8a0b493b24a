"""Read helpers: long frames for the matrix (eager or streamed), counts and metadata."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import polars as pl

from sparseeval.interchange import to_polars
from sparseeval.readers.base import RESPONSES_SCHEMA, SCORES_SCHEMA
from sparseeval.store.connection import Connections

TABLES = ("models", "items", "responses", "scores", "runs", "ingests", "anchor_sets", "anchors",
          "evaluations", "predictions")


class Reading(Connections):
    """Reads on the latest published snapshot."""

    def load_long(self, benchmark: str | None = None, *, lazy: bool = False
                  ) -> tuple[pl.DataFrame, pl.DataFrame] | tuple[pl.LazyFrame, pl.LazyFrame]:
        """(responses, scores) as long Polars frames, for :func:`sparseeval.matrix.build_matrix`.

        ``lazy=True`` returns LazyFrames that read the latest snapshot only when collected, in Arrow
        batches, with projection pushed into the SQL: a benchmark of the full leaderboard (98 M
        rows) then never exists in memory as a frame of strings (~6 GB), since ``build_matrix``
        turns each batch into integer codes as it streams past.
        """
        where, params = ("WHERE benchmark = $b", {"b": benchmark}) if benchmark is not None else ("", None)
        responses_sql = f"SELECT model, benchmark, item_id, score FROM responses {where}"
        scores_sql = f"SELECT model, benchmark, score FROM scores {where}"
        if lazy:
            return (self._scan(responses_sql, params, RESPONSES_SCHEMA),
                    self._scan(scores_sql, params, SCORES_SCHEMA))
        con = self.open_readonly()
        try:
            responses = to_polars(con.sql(responses_sql, params=params))
            scores = to_polars(con.sql(scores_sql, params=params))
        finally:
            con.close()
        return responses, scores

    def _scan(self, sql: str, params: Mapping[str, Any] | None, schema: Mapping[str, pl.DataType]
              ) -> pl.LazyFrame:
        """A LazyFrame over a read-only query: each collect opens the snapshot, streams, closes."""
        from polars.io.plugins import register_io_source

        def batches(with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None,
                    batch_size: int | None) -> Iterator[pl.DataFrame]:
            columns = ", ".join(with_columns or list(schema))
            limit = f" LIMIT {int(n_rows)}" if n_rows is not None else ""
            con = self.open_readonly()
            try:
                reader = con.sql(f"SELECT {columns} FROM ({sql}){limit}", params=params).fetch_record_batch(
                    max(batch_size or 0, 1 << 20))
                for batch in reader:
                    frame = pl.from_arrow(batch)
                    assert isinstance(frame, pl.DataFrame)
                    yield frame if predicate is None else frame.filter(predicate)
            finally:
                con.close()

        return register_io_source(batches, schema=dict(schema))

    def benchmarks(self) -> list[str]:
        """Benchmarks with any responses or scores, sorted."""
        return self.query("SELECT benchmark FROM responses UNION SELECT benchmark FROM scores "
                          "ORDER BY 1").get_column("benchmark").to_list()

    def table_counts(self) -> dict[str, int]:
        """Row count of every table (one consistent snapshot)."""
        sql = " UNION ALL ".join(f"SELECT '{t}' AS t, count(*) AS n FROM {t}" for t in TABLES)
        return dict(self.query(sql).iter_rows())

    def model_metadata(self) -> pl.DataFrame:
        """models(model, family, submitted_at, n_params, base_model, first_seen)."""
        return self.query("SELECT model, family, submitted_at, n_params, base_model, first_seen "
                          "FROM models ORDER BY model")


    def training_settings(self, benchmark: str) -> dict[str, Any]:
        """The evaluation settings of the current responses of ``benchmark``: for each setting the
        most common value among its runs (None when no run says), and how many runs agree, so a
        predictor can record what its training data was produced under."""
        rows = self.query(
            'SELECT task, n_shot, metric, filter, harness, harness_version, count(*) AS runs FROM current_runs '
            "WHERE benchmark = $b AND kind = 'responses' GROUP BY ALL "
            "ORDER BY runs DESC, n_shot NULLS LAST, metric NULLS LAST LIMIT 1",
            {"b": benchmark})
        total = self.query("SELECT count(*) FROM current_runs WHERE benchmark = $b AND kind = 'responses'",
                           {"b": benchmark}).item()
        if rows.height == 0:
            return {}
        out = rows.row(0, named=True)
        out["runs_agreeing"] = out.pop("runs")
        out["runs"] = int(total)
        return out

    def data_version(self, benchmark: str) -> str:
        """A fingerprint of the benchmark's current data: its current runs (ids and row counts) and
        scores. It changes exactly when ingest adds, replaces or supersedes something of this
        benchmark, so the pipeline can tell an unchanged benchmark without building its matrix."""
        row = self.query(
            "SELECT count(*) AS n, coalesce(bit_xor(hash(run_id, kind, n_rows, score)), 0) AS h "
            "FROM current_runs WHERE benchmark = $b", {"b": benchmark}).row(0, named=True)
        return f"{row['n']}-{int(row['h']):016x}"

    def data_versions(self) -> dict[str, str]:
        """:meth:`data_version` of every benchmark, in one query (what the refresh sensor compares)."""
        frame = self.query(
            "SELECT benchmark, count(*) AS n, coalesce(bit_xor(hash(run_id, kind, n_rows, score)), 0) AS h "
            "FROM current_runs GROUP BY benchmark ORDER BY benchmark")
        return {r["benchmark"]: f"{r['n']}-{int(r['h']):016x}" for r in frame.iter_rows(named=True)}

    def read_benchmark(self, benchmark: str) -> Any:
        """``benchmark``'s :class:`~sparseeval.matrix.ResponseMatrix` with its ``data_version``, both read
        in one state of the store (:meth:`pinned`): an ingest landing meanwhile can never label a
        matrix of old data with the new version."""
        from sparseeval.matrix import build_matrix

        with self.pinned():
            version = self.data_version(benchmark)
            matrix = build_matrix(*self.load_long(benchmark, lazy=True), benchmark)
        return dataclasses.replace(matrix, data_version=version)

    def anchor_answers_without_score(self, benchmark: str, items: list[str]) -> pl.DataFrame:
        """Current answers to ``items`` of models that have no reported score for ``benchmark``:
        the models a published predictor should score."""
        return self.query(
            "SELECT r.model, r.benchmark, r.item_id, r.score FROM responses r "
            "WHERE r.benchmark = $b AND r.item_id IN (SELECT unnest($i::VARCHAR[])) "
            "AND NOT EXISTS (SELECT 1 FROM scores s WHERE s.model = r.model AND s.benchmark = r.benchmark) "
            "ORDER BY r.model, r.item_id", {"b": benchmark, "i": list(items)})
