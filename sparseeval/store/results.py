"""What the pipeline writes back: anchor sets, evaluations and predictions."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import polars as pl

from sparseeval.store.connection import Connections, _now, _run, _transaction


class ResultWriters(Connections):
    """Writers for the pipeline's results (each one transaction)."""

    def save_anchor_set(self, *, benchmark: str, method: str, k: int, items: Sequence[str],
                        weights: Sequence[float] | None = None, seed: int | None = None,
                        n_train_models: int | None = None, params: Mapping[str, Any] | None = None,
                        mlflow_run_id: str | None = None, artifact_uri: str | None = None) -> int:
        """Store an anchor set and its items in order; the same content again returns the same id."""
        if weights is not None and len(weights) != len(items):
            raise ValueError(f"{len(items)} anchors but {len(weights)} weights")
        if len(set(items)) != len(items):
            raise ValueError("anchor items repeat")
        payload = {"benchmark": benchmark, "method": method, "k": int(k), "seed": seed,
                   "items": [str(i) for i in items],
                   "weights": None if weights is None else [float(w) for w in weights]}
        content_hash = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        params_json = json.dumps(dict(params or {}), sort_keys=True, default=str)
        with self._write() as con, _transaction(con):
            found = _run(con, "SELECT anchor_set_id FROM anchor_sets WHERE content_hash = ?",
                                [content_hash])
            if found:
                anchor_set_id = int(found[0][0])
                _run(con, "UPDATE anchor_sets SET mlflow_run_id = coalesce(?, mlflow_run_id), "
                            "artifact_uri = coalesce(?, artifact_uri) WHERE anchor_set_id = ?",
                            [mlflow_run_id, artifact_uri, anchor_set_id])
            else:
                anchor_set_id = int(_run(
                    con,
                    "INSERT INTO anchor_sets (benchmark, method, k, seed, created_at, n_train_models, "
                    "params, content_hash, mlflow_run_id, artifact_uri) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING anchor_set_id",
                    [benchmark, method, int(k), seed, _now(), n_train_models, params_json, content_hash,
                     mlflow_run_id, artifact_uri])[0][0])
                con.executemany(
                    "INSERT INTO anchors VALUES (?, ?, ?, ?, ?)",
                    [[anchor_set_id, pos, benchmark, str(item), None if weights is None else float(w)]
                     for pos, (item, w) in enumerate(zip(items, weights or [None] * len(items),
                                                         strict=True))])
        return anchor_set_id

    def save_evaluations(self, rows: Iterable[Mapping[str, Any]] | pl.DataFrame) -> int:
        """Store evaluation rows; a rerun of (benchmark, method, k, seed, split_policy) replaces it."""
        cols = ("benchmark", "method", "k", "seed", "split_policy", "mae", "tau", "rho", "max_error",
                "seconds", "n_train", "n_val", "n_test", "mlflow_run_id")
        records = rows.to_dicts() if isinstance(rows, pl.DataFrame) else [dict(r) for r in rows]
        unknown = sorted({c for r in records for c in r} - set(cols) - {"created_at"})
        if unknown:
            raise ValueError(f"unknown evaluation column(s): {', '.join(unknown)}")
        values = [[r.get(c) for c in cols] + [_now()] for r in records]
        with self._write() as con, _transaction(con):
            con.executemany(
                "DELETE FROM evaluations WHERE benchmark = ? AND method = ? AND k = ? "
                "AND seed IS NOT DISTINCT FROM ? AND split_policy IS NOT DISTINCT FROM ?",
                [v[:5] for v in values])
            if values:
                con.executemany(f"INSERT INTO evaluations ({', '.join(cols)}, created_at) "
                                f"VALUES ({', '.join('?' * (len(cols) + 1))})", values)
        return len(values)

    def save_predictions(self, rows: Iterable[Mapping[str, Any]] | pl.DataFrame) -> int:
        """Upsert predictions keyed by (model, benchmark, anchor_set_id)."""
        cols = ("model", "benchmark", "anchor_set_id", "predicted", "lower", "upper", "n_anchors", "ood")
        records = rows.to_dicts() if isinstance(rows, pl.DataFrame) else [dict(r) for r in rows]
        values = [[r.get(c) for c in cols[:7]] + [bool(r.get("ood") or False), _now()] for r in records]
        bad = [v for v in values if v[3] is None or not 0.0 <= float(v[3]) <= 1.0]
        if bad:
            raise ValueError(f"prediction outside [0, 1] for model {bad[0][0]!r}: {bad[0][3]}")
        with self._write() as con, _transaction(con):
            if values:
                con.executemany(f"INSERT OR REPLACE INTO predictions ({', '.join(cols)}, created_at) "
                                f"VALUES ({', '.join('?' * (len(cols) + 1))})", values)
        return len(values)
