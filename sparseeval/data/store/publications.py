"""The DuckDB half of publishing: decisions, publication intents and their steps.

:mod:`sparseeval.publish.publishing` owns a publication end to end (DuckDB, the MLflow registry, the
published folder); these are its DuckDB writes, each one transaction, so every state the three
stores can be left in by a crash is a row here that the next publication reads and resumes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from sparseeval.data.store.connection import Connections
from sparseeval.data.store.results import promote, set_role
from sparseeval.data.store.transactions import _now, _run, _transaction

#: publication steps, in order; ``done`` and ``abandoned`` end one
STEPS = ("intent", "registered", "swapped", "done")
OPEN_STEPS = ("intent", "registered", "swapped")


def _decide(con: duckdb.DuckDBPyConnection, benchmark: str, fit_key: str, data_version: str | None,
            outcome: str, anchor_set_id: int | None, reason: str) -> None:
    _run(con, "INSERT INTO fit_decisions VALUES (?, ?, ?, ?, ?, ?, ?)",
         [benchmark, fit_key, data_version, outcome, anchor_set_id, reason, _now()])


def _retire_pending(con: duckdb.DuckDBPyConnection, benchmark: str, keep: Sequence[int],
                    reason: str) -> list[int]:
    """Inside a transaction: abandon ``benchmark``'s publications still at ``intent`` and retire the
    candidate or proposed sets not in ``keep`` (a newer refresh decided: they are stale)."""
    rows = _run(con, "SELECT publication_id, anchor_set_id FROM publications WHERE benchmark = ? AND step = 'intent'",
                [benchmark])
    for pub_id, set_id in rows:
        if int(set_id) not in keep:
            _run(con, "UPDATE publications SET step = 'abandoned', reason = ?, finished_at = ? "
                      "WHERE publication_id = ?", [reason, _now(), pub_id])
    stale = [int(i) for (i,) in _run(con, "SELECT anchor_set_id FROM anchor_sets WHERE benchmark = ? "
                                          "AND role IN ('candidate', 'proposed') ORDER BY 1", [benchmark])
             if int(i) not in keep]
    for set_id in stale:
        set_role(con, set_id, "retired", reason)
    return stale


class PublicationRecords(Connections):
    """Decisions of the fit step and the steps of each publication (see :mod:`sparseeval.publish.publishing`)."""

    def record_proposal(self, benchmark: str, proposals: Sequence[tuple[int, str, str]], *, fit_key: str,
                        data_version: str | None, reason: str) -> list[int]:
        """One transaction: the sets ``(anchor_set_id, alias, content_hash)`` become proposed with a
        publication intent each (an open intent for the same set and alias is kept, not doubled), and
        every other pending proposal of ``benchmark`` is retired as stale. Returns the stale ids."""
        keep = [p[0] for p in proposals]
        with self._write() as con, _transaction(con):
            stale = _retire_pending(con, benchmark, keep, f"stale: superseded before publication by the "
                                                          f"refresh of fit key {fit_key[:12]}")
            for anchor_set_id, alias, content_hash in proposals:
                set_role(con, anchor_set_id, "proposed", reason)
                _run(con, "UPDATE anchor_sets SET fit_key = ? WHERE anchor_set_id = ?", [fit_key, anchor_set_id])
                if not _run(con, "SELECT 1 FROM publications WHERE anchor_set_id = ? AND alias = ? AND step IN "
                                 "('intent', 'registered', 'swapped')", [anchor_set_id, alias]):
                    _run(con, "INSERT INTO publications (benchmark, anchor_set_id, alias, content_hash, fit_key, "
                              "step, created_at) VALUES (?, ?, ?, ?, ?, 'intent', ?)",
                         [benchmark, anchor_set_id, alias, content_hash, fit_key, _now()])
        return stale

    def record_rejection(self, benchmark: str, anchor_set_ids: Sequence[int], *, fit_key: str,
                         data_version: str | None, reason: str) -> list[int]:
        """One transaction: the sets failed the publishing checks (rejected, with ``reason``), older pending
        proposals are retired as stale, and the fit key is decided (a refresh with it skips)."""
        with self._write() as con, _transaction(con):
            for anchor_set_id in anchor_set_ids:
                set_role(con, anchor_set_id, "rejected", reason)
                _run(con, "UPDATE anchor_sets SET fit_key = ? WHERE anchor_set_id = ?", [fit_key, anchor_set_id])
            stale = _retire_pending(con, benchmark, list(anchor_set_ids),
                                    f"stale: a newer refresh (fit key {fit_key[:12]}) was rejected")
            _decide(con, benchmark, fit_key, data_version, "rejected",
                    anchor_set_ids[0] if anchor_set_ids else None, reason)
        return stale

    def record_unchanged(self, benchmark: str, *, fit_key: str, data_version: str | None, anchor_set_id: int | None,
                         reason: str) -> None:
        """The refresh of ``fit_key`` needs no publication (its fit reproduced the champion): decided."""
        with self._write() as con, _transaction(con):
            _retire_pending(con, benchmark, [anchor_set_id] if anchor_set_id is not None else [],
                            f"stale: the refresh of fit key {fit_key[:12]} reproduced the champion")
            _decide(con, benchmark, fit_key, data_version, "unchanged", anchor_set_id, reason)

    def open_publications(self, benchmark: str) -> list[dict[str, Any]]:
        """``benchmark``'s publications not yet done or abandoned, champion first, oldest first."""
        frame = self.query("SELECT * FROM publications WHERE benchmark = $b AND step IN "
                           "('intent', 'registered', 'swapped') "
                           "ORDER BY alias = 'champion' DESC, publication_id", {"b": benchmark})
        return frame.to_dicts()

    def record_step(self, publication_id: int, step: str, **fields: Any) -> None:
        """A publication step completed (``registered`` with its registry version and run, ``swapped``)."""
        if step not in STEPS[1:-1]:
            raise ValueError(f"unknown publication step {step!r}")
        allowed = {"registry_version", "mlflow_run_id"}
        if set(fields) - allowed:
            raise ValueError(f"unknown publication field(s): {', '.join(sorted(set(fields) - allowed))}")
        sets = ", ".join(["step = ?", *(f"{k} = ?" for k in fields)])
        with self._write() as con, _transaction(con):
            _run(con, f"UPDATE publications SET {sets} WHERE publication_id = ?",
                 [step, *fields.values(), publication_id])

    def complete_publication(self, publication: dict[str, Any]) -> int | None:
        """One transaction: the set takes its alias's role (the previous holder retired), its registry ids
        are recorded, the publication is done; when it was the benchmark's last open one, its fit key is
        decided. Returns the previous holder of the role."""
        bench, set_id = publication["benchmark"], int(publication["anchor_set_id"])
        with self._write() as con, _transaction(con):
            previous = promote(con, bench, set_id, publication["alias"],
                               registry_version=publication["registry_version"],
                               mlflow_run_id=publication["mlflow_run_id"])
            _run(con, "UPDATE publications SET step = 'done', finished_at = ?, registry_version = ?, "
                      "mlflow_run_id = ? WHERE publication_id = ?",
                 [_now(), publication["registry_version"], publication["mlflow_run_id"],
                  publication["publication_id"]])
            still_open = _run(con, "SELECT count(*) FROM publications WHERE benchmark = ? AND step IN "
                                   "('intent', 'registered', 'swapped')", [bench])[0][0]
            if not still_open and publication.get("fit_key"):
                version = _run(con, "SELECT data_version FROM anchor_sets WHERE anchor_set_id = ?", [set_id])[0][0]
                _decide(con, bench, publication["fit_key"], version, "published", set_id,
                        f"anchor set #{set_id} published as {publication['alias']} (registry version "
                        f"{publication['registry_version']})")
        return previous

    def rewrite_artifact_uris(self, benchmark: str, moved: dict[str, str]) -> None:
        """Folders of ``benchmark``'s versions moved (old path -> new path): the stored ``artifact_uri``
        values follow them, in one transaction."""
        with self._write() as con, _transaction(con):
            for old, new in moved.items():
                _run(con, "UPDATE anchor_sets SET artifact_uri = ? WHERE artifact_uri = ?", [new, old])

    def latest_fit_keys(self) -> dict[str, str]:
        """Every benchmark's latest decided fit key."""
        frame = self.query("SELECT benchmark, arg_max(fit_key, decided_at) AS fit_key FROM fit_decisions "
                           "GROUP BY benchmark")
        return dict(zip(frame["benchmark"].to_list(), frame["fit_key"].to_list(), strict=True))

    def comparison_keys(self) -> set[tuple[str, str]]:
        """(benchmark, comparison key) of every stored comparison."""
        frame = self.query("SELECT DISTINCT benchmark, run_key FROM evaluations WHERE run_key IS NOT NULL")
        return set(zip(frame["benchmark"].to_list(), frame["run_key"].to_list(), strict=True))

    def latest_decision(self, benchmark: str) -> dict[str, Any] | None:
        """The last fit decision of ``benchmark`` (fit key, outcome, reason), or None."""
        frame = self.query("SELECT * FROM fit_decisions WHERE benchmark = $b ORDER BY decided_at DESC, "
                           "rowid DESC LIMIT 1", {"b": benchmark})
        return frame.row(0, named=True) if frame.height else None
