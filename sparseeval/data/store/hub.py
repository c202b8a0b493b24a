"""The store's record of Hub dataset repos: which commit of each repo, and which files, were ingested.

:mod:`sparseeval.data.access.hub_sources` asks these before calling the Hub, so an unchanged repo costs one
metadata call and a new commit downloads only the files whose blob id the store has not seen.
Written in one transaction after the repo's files were ingested: a failed or interrupted fetch
records nothing, and the next refresh fetches the repo again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparseeval.data.store.connection import Connections
from sparseeval.data.store.transactions import _now, _run, _transaction


class HubRecords(Connections):
    def hub_sha(self, repo: str, revision: str, wanted: str = "") -> str | None:
        """The commit of ``repo`` at ``revision`` last ingested for the wanted tasks ``wanted`` (None: never,
        or for other tasks: a refresh then lists the repo again, so a widened task list is fetched)."""
        rows = self.query("SELECT sha FROM hub_revisions WHERE repo = ? AND revision = ? AND coalesce(wanted, '') = ?",
                          [repo, revision, wanted])
        return rows["sha"][0] if rows.height else None

    def hub_blobs(self, repo: str) -> set[tuple[str, str]]:
        """(path, blob id) of every file of ``repo`` already ingested."""
        rows = self.query("SELECT path, blob_id FROM hub_files WHERE repo = ?", [repo])
        return set(zip(rows["path"].to_list(), rows["blob_id"].to_list(), strict=True))

    def record_hub_fetch(self, repo: str, revision: str, sha: str, files: Sequence[tuple[str, str, int]], *,
                         seconds: float, wanted: str = "") -> None:
        """``files`` (path, blob id, size) of ``repo`` at commit ``sha`` are ingested, for the wanted tasks
        ``wanted`` ('' = every result file); one transaction."""
        with self._write() as con, _transaction(con):
            for path, blob, size in files:
                _run(con, "INSERT INTO hub_files VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                     [repo, path, blob, sha, size])
            _run(con, "INSERT OR REPLACE INTO hub_revisions (repo, revision, sha, files, bytes, seconds, ingested_at, "
                      "wanted) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 [repo, revision, sha, len(files), sum(s for _, _, s in files), seconds, _now(), wanted])

    def hub_revisions(self) -> list[dict[str, Any]]:
        return self.query("SELECT * FROM hub_revisions ORDER BY repo, revision").to_dicts()
