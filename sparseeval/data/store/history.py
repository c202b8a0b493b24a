"""What a refresh reads back of its own history: the frontier self-checks and the fits stored with earlier anchor
sets (reused while nothing they depend on changed), the anchor sets one fit key wrote, the comparisons already
run, and how many scored models have every one of several benchmarks (the joint predictor's). The SQL lives
here; the refresh (:mod:`sparseeval.publish`) decides what to reuse."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sparseeval.data.store.connection import Connections


@dataclass(frozen=True)
class StoredFit:
    """An anchor set whose predictor was saved: what a refresh may load instead of fitting again."""

    anchor_set_id: int
    params: dict[str, Any]
    items: list[str]
    artifact_uri: str


@dataclass(frozen=True)
class StoredComparison:
    """One comparison stored for a benchmark: under which key, at which data version, on how many models."""

    data_version: str
    run_key: str
    models: int


class History(Connections):
    """Reads of the refresh's own history (each one query, on the snapshot)."""

    def stored_selfchecks(self, benchmark: str, *, method: str, k: int, seed: int) -> Iterator[dict[str, Any]]:
        """The frontier self-checks stored with ``benchmark``'s anchor sets of this method, K and seed, newest
        first (as written: the JSON of :meth:`sparseeval.estimate.selfcheck.SelfCheck.to_json`)."""
        rows = self.query("SELECT params FROM anchor_sets WHERE benchmark = $b AND method = $m AND k = $k "
                          "AND seed = $s ORDER BY anchor_set_id DESC", {"b": benchmark, "m": method, "k": k, "s": seed})
        for (params,) in rows.iter_rows():
            stored = json.loads(params or "{}").get("frontier")
            if isinstance(stored, dict) and stored:
                yield stored

    def stored_fits(self, benchmark: str, *, data_version: str, origin: str, method: str, k: int,
                    seed: int) -> Iterator[StoredFit]:
        """The saved fits of ``benchmark`` on exactly this data version, origin, method, K and seed, newest
        first."""
        rows = self.query("SELECT anchor_set_id, params, artifact_uri FROM anchor_sets WHERE benchmark = $b "
                          "AND data_version = $v AND origin = $o AND method = $m AND k = $k AND seed = $s "
                          "AND artifact_uri IS NOT NULL ORDER BY anchor_set_id DESC",
                          {"b": benchmark, "v": data_version, "o": origin, "m": method, "k": k, "s": seed})
        for anchor_set_id, params, uri in rows.iter_rows():
            yield StoredFit(int(anchor_set_id), json.loads(params or "{}"),
                            self.query("SELECT item_id FROM anchors WHERE anchor_set_id = $i ORDER BY position",
                                       {"i": anchor_set_id}).get_column("item_id").to_list(), str(uri))

    def anchor_sets_of_fit_key(self, benchmark: str, fit_key: str) -> list[dict[str, Any]]:
        """The anchor sets one fit key of ``benchmark`` wrote (id, origin, role, params), in order."""
        return self.query("SELECT anchor_set_id, origin, role, params FROM anchor_sets WHERE benchmark = $b "
                          "AND fit_key = $k ORDER BY anchor_set_id", {"b": benchmark, "k": fit_key}).to_dicts()

    def stored_comparisons(self, benchmark: str) -> list[StoredComparison]:
        """``benchmark``'s comparisons, newest first: each key, its data version and how many models it had."""
        frame = self.query("SELECT data_version, run_key, max(n_train + n_val + n_test) AS models, max(created_at) "
                           "AS compared_at FROM evaluations WHERE benchmark = $b AND run_key IS NOT NULL "
                           "AND data_version IS NOT NULL GROUP BY ALL ORDER BY compared_at DESC", {"b": benchmark})
        return [StoredComparison(str(v), str(key), int(n or 0)) for v, key, n, _ in frame.iter_rows()]

    def models_with_every(self, benchmarks: Sequence[str]) -> int:
        """How many models have current responses and a reported score for every one of ``benchmarks`` (the
        rows each benchmark's matrix has: :meth:`~sparseeval.data.store.reading.Reading.scored_model_count`)."""
        if not benchmarks:
            return 0
        return int(self.query("SELECT count(*) FROM (SELECT model FROM current_runs WHERE benchmark IN "
                              "(SELECT unnest($b)) GROUP BY model HAVING count(DISTINCT benchmark || '/' || kind) "
                              "= $n)", {"b": list(benchmarks), "n": 2 * len(benchmarks)}).item())
