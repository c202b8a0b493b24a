"""Read helpers: long frames for the matrix (eager or streamed), counts and metadata."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import polars as pl

from sparseeval.data.interchange import to_polars
from sparseeval.data.readers.base import RESPONSES_SCHEMA, SCORES_SCHEMA
from sparseeval.data.store.connection import Connections

TABLES = ("models", "items", "responses", "scores", "runs", "ingests", "anchor_sets", "anchors",
          "evaluations", "predictions")


class Reading(Connections):
    """Reads on the latest published snapshot."""

    def load_long(self, benchmark: str | None = None, *, lazy: bool = False
                  ) -> tuple[pl.DataFrame, pl.DataFrame] | tuple[pl.LazyFrame, pl.LazyFrame]:
        """(responses, scores) as long Polars frames, for :func:`sparseeval.data.matrix.build_matrix`.

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

    def response_metrics(self, benchmark: str) -> dict[str | None, int]:
        """The metrics ``benchmark``'s current responses were scored by (None: a run that names none),
        with their number of runs, most runs first."""
        return dict(self.query("SELECT metric, count(*) FROM current_runs WHERE benchmark = $b "
                               "AND kind = 'responses' GROUP BY metric ORDER BY 2 DESC", {"b": benchmark}).rows())

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

    def scored_model_count(self, benchmark: str) -> int:
        """Models with current responses and a reported score for ``benchmark``: the rows its matrix has
        (from the runs table alone, without reading a response row)."""
        return int(self.query(
            "SELECT count(*) FROM (SELECT model FROM current_runs WHERE benchmark = $b AND kind = 'responses' "
            "INTERSECT SELECT model FROM current_runs WHERE benchmark = $b AND kind = 'score')",
            {"b": benchmark}).item())

    def max_run_id(self, benchmark: str) -> int:
        """The largest run id of ``benchmark`` (current or not; 0 without runs): run ids only grow, so
        it marks how far a matrix built now has seen (:meth:`runs_after`)."""
        return int(self.query("SELECT coalesce(max(run_id), 0) FROM runs WHERE benchmark = $b",
                              {"b": benchmark}).item())

    def runs_after(self, benchmark: str, run_id: int) -> tuple[str, list[str]]:
        """The fingerprint (as :meth:`data_version` writes it) of ``benchmark``'s current runs after
        ``run_id``, and their models: with the data version of then, what proves the change since is
        exactly those runs (see :mod:`sparseeval.data.access.matrix_store`), and whom it touches."""
        params = {"b": benchmark, "r": run_id}
        row = self.query("SELECT count(*) AS n, coalesce(bit_xor(hash(run_id, kind, n_rows, score)), 0) AS h "
                         "FROM current_runs WHERE benchmark = $b AND run_id > $r", params).row(0, named=True)
        models = self.query("SELECT DISTINCT model FROM current_runs WHERE benchmark = $b AND run_id > $r "
                            "ORDER BY 1", params).get_column("model").to_list()
        return f"{row['n']}-{int(row['h']):016x}", models

    def load_long_since(self, benchmark: str, after_run_id: int) -> tuple[pl.LazyFrame, pl.LazyFrame]:
        """:meth:`load_long` (lazy) of the current runs after ``after_run_id`` only: the rows an append
        adds. New rows sit at the end of ``response_rows``; the ``run_id`` bound lets DuckDB's zone maps
        skip every older row group instead of scanning the whole table."""
        params = {"b": benchmark, "r": after_run_id}
        responses = ("SELECT model, benchmark, item_id, score FROM response_rows WHERE benchmark = $b "
                     "AND run_id > $r AND run_id IN (SELECT run_id FROM runs WHERE kind = 'responses' "
                     "AND superseded_in IS NULL AND benchmark = $b AND run_id > $r)")
        scores = ("SELECT model, benchmark, score FROM runs WHERE kind = 'score' AND superseded_in IS NULL "
                  "AND benchmark = $b AND run_id > $r")
        return self._scan(responses, params, RESPONSES_SCHEMA), self._scan(scores, params, SCORES_SCHEMA)

    def read_benchmark(self, benchmark: str) -> Any:
        """``benchmark``'s :class:`~sparseeval.data.matrix.ResponseMatrix` with its ``data_version``, both read
        in one state of the store (:meth:`pinned`): an ingest landing meanwhile can never label a
        matrix of old data with the new version."""
        from sparseeval.data.matrix import build_matrix

        with self.pinned():
            version = self.data_version(benchmark)
            matrix = build_matrix(*self.load_long(benchmark, lazy=True), benchmark)
        return dataclasses.replace(matrix, data_version=version)

    def read_matrix(self, benchmark: str) -> Any:
        """:meth:`read_benchmark`, with DuckDB coding the cells: the same matrix (``tests/
        test_matrix_store.py``), built in a third of the time and memory at leaderboard scale.

        The sorted model and item names are read first (their distinct values, the models' from the runs
        table, sorted in Python as
        :func:`~sparseeval.data.matrix.build_matrix` sorts them: by code point, i.e. UTF-8 byte order);
        DuckDB then joins every current row to its row and column number and streams (cell, score)
        pairs, scattered batch by batch into the dense array: neither the id strings nor the codes of
        all rows (210 M at 7,000 x 30,000) are ever held at once. Stored rows are unique per cell and
        never null or NaN (the store's constraints), so nothing is filtered here."""
        import numpy as np

        from sparseeval.data.matrix import EmptyMatrixError, assemble_matrix

        params = {"b": benchmark}
        with self.pinned():
            version = self.data_version(benchmark)
            con = self.open_readonly()
            try:
                # the models from the (small) runs table: a current responses run holds its rows (n_rows > 0)
                models = sorted(r[0] for r in con.sql(
                    "SELECT DISTINCT model FROM current_runs WHERE benchmark = $b AND kind = 'responses' "
                    "AND n_rows > 0", params=params).fetchall())
                items = sorted(r[0] for r in con.sql("SELECT DISTINCT item_id FROM responses WHERE benchmark = $b",
                                                     params=params).fetchall())
                if not models:
                    raise EmptyMatrixError(f"benchmark {benchmark!r} has no responses")
                con.register("_matrix_rows", pl.DataFrame({"model": models, "r": np.arange(len(models),
                                                                                            dtype=np.uint64)}))
                con.register("_matrix_cols", pl.DataFrame({"item_id": items, "c": np.arange(len(items),
                                                                                             dtype=np.uint64)}))
                values = np.full((len(models), len(items)), np.nan, dtype=np.float32)
                flat = values.reshape(-1)
                reader = con.sql(
                    f"SELECT r * {len(items)}::UBIGINT + c AS cell, score::FLOAT AS score FROM responses "
                    "JOIN _matrix_rows USING (model) JOIN _matrix_cols USING (item_id) WHERE benchmark = $b",
                    params=params).fetch_record_batch(1 << 22)
                for batch in reader:
                    flat[batch.column(0).to_numpy()] = batch.column(1).to_numpy()
                scores = con.sql("SELECT model, score FROM scores WHERE benchmark = $b", params=params).pl()
            finally:
                for name in ("_matrix_rows", "_matrix_cols"):
                    with contextlib.suppress(Exception):
                        con.unregister(name)
                con.close()
        return dataclasses.replace(assemble_matrix(benchmark, models, items, values, scores), data_version=version)

    def anchor_answers_without_score(self, benchmark: str, items: list[str]) -> pl.DataFrame:
        """Current answers to ``items`` of models that have no reported score for ``benchmark``:
        the models a published predictor should score. Their runs are found in the (small) runs table
        first: with none, no response row is read (a leaderboard's 200 M rows cost seconds to scan);
        otherwise only theirs, bounded by run id so DuckDB's zone maps skip older row groups."""
        with self.pinned():  # the runs and their rows from one state
            runs = self.query(
                "SELECT run_id FROM current_runs r WHERE benchmark = $b AND kind = 'responses' AND NOT EXISTS "
                "(SELECT 1 FROM current_runs s WHERE s.kind = 'score' AND s.model = r.model AND s.benchmark = $b)",
                {"b": benchmark}).get_column("run_id").to_list()
            if not runs:
                return pl.DataFrame(schema={"model": pl.String, "benchmark": pl.String, "item_id": pl.String,
                                            "score": pl.Float64})
            return self.query(
                "SELECT model, benchmark, item_id, score FROM response_rows WHERE run_id >= $lo "
                "AND run_id IN (SELECT unnest($r::BIGINT[])) AND item_id IN (SELECT unnest($i::VARCHAR[])) "
                "ORDER BY model, item_id", {"lo": min(runs), "r": runs, "i": list(items)})
