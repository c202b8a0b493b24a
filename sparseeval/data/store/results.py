"""What the pipeline writes back: anchor sets, evaluations and predictions."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import duckdb
import polars as pl

from sparseeval.data.lifecycle import TERMINAL, check_transition
from sparseeval.data.store.connection import Connections
from sparseeval.data.store.transactions import _now, _run, _transaction

#: lifecycle fields of ``anchor_sets`` that :meth:`ResultWriters.update_anchor_set` may change
ANCHOR_SET_FIELDS = ("role", "reason", "origin", "data_version", "test_mae", "baseline_mae", "coverage",
                     "registry_version", "published_at", "mlflow_run_id", "artifact_uri", "n_train_models",
                     "fit_key", "checks", "frontier_mae", "frontier_bias", "frontier_coverage", "frontier_flagged",
                     "frontier_silent", "frontier_models")


def set_role(con: duckdb.DuckDBPyConnection, anchor_set_id: int, role: str, reason: str | None = None) -> str:
    """Change one anchor set's role inside the caller's transaction, as the state table allows
    (:func:`sparseeval.data.lifecycle.check_transition`), and append the change to ``role_changes``.
    Returns the old role; the same role again changes nothing and appends nothing."""
    found = _run(con, "SELECT role, benchmark FROM anchor_sets WHERE anchor_set_id = ?", [anchor_set_id])
    if not found:
        raise KeyError(f"no anchor set {anchor_set_id}")
    old, benchmark = found[0]
    check_transition(anchor_set_id, old, role)
    if old != role:
        _run(con, "UPDATE anchor_sets SET role = ?, reason = ? WHERE anchor_set_id = ?", [role, reason, anchor_set_id])
        _run(con, "INSERT INTO role_changes VALUES (?, ?, ?, ?, ?, ?)",
             [anchor_set_id, benchmark, old, role, reason, _now()])
    return str(old)


def _update(con: duckdb.DuckDBPyConnection, anchor_set_id: int, fields: Mapping[str, Any]) -> None:
    unknown = sorted(set(fields) - set(ANCHOR_SET_FIELDS))
    if unknown:
        raise ValueError(f"unknown anchor set field(s): {', '.join(unknown)}")
    fields = dict(fields)
    if "role" in fields:
        set_role(con, anchor_set_id, fields.pop("role"), fields.pop("reason", None))
    if fields:
        sets = ", ".join(f"{name} = ?" for name in fields)
        _run(con, f"UPDATE anchor_sets SET {sets} WHERE anchor_set_id = ?", [*fields.values(), anchor_set_id])


class ResultWriters(Connections):
    """Writers for the pipeline's results (each one transaction)."""

    def save_anchor_set(self, *, benchmark: str, method: str, k: int, items: Sequence[str],
                        weights: Sequence[float] | None = None, seed: int | None = None,
                        n_train_models: int | None = None, params: Mapping[str, Any] | None = None,
                        mlflow_run_id: str | None = None, artifact_uri: str | None = None,
                        item_benchmarks: Sequence[str] | None = None, predictor_hash: str | None = None,
                        **fields: Any) -> int:
        """Store an anchor set and its items in order; the same content again returns the same id.

        This is the anchor set's one writer: later steps change its lifecycle fields by id
        (:meth:`update_anchor_set`), never by writing it again. ``fields``: any of
        :data:`ANCHOR_SET_FIELDS` (role, origin, data_version, scores...). ``item_benchmarks``: each
        anchor's own benchmark, for a set spanning several (``sparseeval-joint``); default ``benchmark``.
        ``predictor_hash``: the content hash of the set's saved predictor; it is part of the set's
        identity, so that a refit of the same anchors on the same data under another setting (alpha,
        calibration) is a new set, never an in-place change of a published one's predictor."""
        if weights is not None and len(weights) != len(items):
            raise ValueError(f"{len(items)} anchors but {len(weights)} weights")
        if item_benchmarks is not None and len(item_benchmarks) != len(items):
            raise ValueError(f"{len(items)} anchors but {len(item_benchmarks)} item benchmarks")
        owners = [str(b) for b in item_benchmarks] if item_benchmarks is not None else [benchmark] * len(items)
        if len(set(zip(owners, items, strict=True))) != len(items):
            raise ValueError("anchor items repeat")
        # a refit on new data or under another setting is a new row (same items, another predictor)
        payload = {"benchmark": benchmark, "method": method, "k": int(k), "seed": seed,
                   "items": [str(i) for i in items],
                   "weights": None if weights is None else [float(w) for w in weights],
                   **({"item_benchmarks": owners} if item_benchmarks is not None else {}),
                   **{f: fields[f] for f in ("data_version", "origin") if fields.get(f) is not None},
                   **({"predictor": predictor_hash} if predictor_hash is not None else {})}
        content_hash = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        params_json = json.dumps(dict(params or {}), sort_keys=True, default=str)
        terminal = list(TERMINAL)
        with self._write() as con, _transaction(con):
            # a set that reached a terminal role is history: the same fit again starts a new lifecycle
            found = _run(con, "SELECT anchor_set_id FROM anchor_sets WHERE content_hash = ? "
                              "AND role NOT IN (SELECT unnest(?::VARCHAR[])) ORDER BY anchor_set_id DESC LIMIT 1",
                         [content_hash, terminal])
            if found:
                anchor_set_id = int(found[0][0])
                _run(con, "UPDATE anchor_sets SET mlflow_run_id = coalesce(?, mlflow_run_id), "
                            "artifact_uri = coalesce(?, artifact_uri) WHERE anchor_set_id = ?",
                            [mlflow_run_id, artifact_uri, anchor_set_id])
                _update(con, anchor_set_id, {k: v for k, v in fields.items() if k != "role"})
            else:
                anchor_set_id = int(_run(
                    con,
                    "INSERT INTO anchor_sets (benchmark, method, k, seed, created_at, n_train_models, "
                    "params, content_hash, mlflow_run_id, artifact_uri) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING anchor_set_id",
                    [benchmark, method, int(k), seed, _now(), n_train_models, params_json, content_hash,
                     mlflow_run_id, artifact_uri])[0][0])
                _run(con, "INSERT INTO role_changes VALUES (?, ?, NULL, 'candidate', 'fitted', ?)",
                     [anchor_set_id, benchmark, _now()])
                _update(con, anchor_set_id, fields)
                con.executemany(
                    "INSERT INTO anchors VALUES (?, ?, ?, ?, ?)",
                    [[anchor_set_id, pos, owner, str(item), None if weights is None else float(w)]
                     for pos, (owner, item, w) in enumerate(zip(owners, items, weights or [None] * len(items),
                                                                strict=True))])
        return anchor_set_id

    def update_anchor_set(self, anchor_set_id: int, **fields: Any) -> None:
        """Change lifecycle fields of one anchor set (role, scores, MLflow ids, publication time)."""
        with self._write() as con, _transaction(con):
            _update(con, anchor_set_id, fields)

    def publish_champion(self, benchmark: str, anchor_set_id: int, **fields: Any) -> int | None:
        """Make the proposed ``anchor_set_id`` the champion of ``benchmark`` in one transaction: the
        previous champion (returned) is retired. Publishing the current champion again changes nothing.
        (The pipeline publishes through :mod:`sparseeval.publish.publishing`, which also moves the registry
        alias and the published folder; this is its DuckDB half.)"""
        with self._write() as con, _transaction(con):
            return promote(con, benchmark, anchor_set_id, "champion", **fields)

    def propose(self, anchor_set_id: int, reason: str) -> None:
        """A candidate that passed the publishing checks (the pipeline records the publication intent
        with it: :meth:`~sparseeval.data.store.publications.PublicationRecords.record_proposal`)."""
        self.update_anchor_set(anchor_set_id, role="proposed", reason=reason)

    def anchor_set(self, anchor_set_id: int) -> dict[str, Any]:
        """One anchor set's row with its items in order (``items``) and each item's benchmark
        (``item_benchmarks``: the set's own, except in a set spanning several benchmarks)."""
        row = self.query("SELECT * FROM anchor_sets WHERE anchor_set_id = $i", {"i": anchor_set_id})
        if row.height == 0:
            raise KeyError(f"no anchor set {anchor_set_id}")
        out = row.row(0, named=True)
        anchors = self.query("SELECT benchmark, item_id FROM anchors WHERE anchor_set_id = $i ORDER BY position",
                             {"i": anchor_set_id})
        out["items"] = anchors.get_column("item_id").to_list()
        out["item_benchmarks"] = anchors.get_column("benchmark").to_list()
        return out

    def champion(self, benchmark: str) -> dict[str, Any] | None:
        """The published champion anchor set of ``benchmark`` (with ``items``), or None."""
        found = self.query("SELECT anchor_set_id FROM anchor_sets WHERE benchmark = $b AND role = 'champion'",
                           {"b": benchmark})
        return self.anchor_set(int(found.item())) if found.height else None

    def champion_count(self, benchmark: str) -> int:
        """How many anchor sets of ``benchmark`` hold the role ``champion``: 1 or 0 in a sound store (the
        publish audit reports any more)."""
        return int(self.query("SELECT count(*) FROM anchor_sets WHERE benchmark = $b AND role = 'champion'",
                              {"b": benchmark}).item())

    def anchor_set_roles(self, benchmark: str) -> dict[int, str | None]:
        """The role of every anchor set of ``benchmark`` (``candidate``, ``champion``...), by anchor set id."""
        rows = self.query("SELECT anchor_set_id, role FROM anchor_sets WHERE benchmark = $b", {"b": benchmark})
        return {int(i): role for i, role in rows.iter_rows()}

    def anchor_sets_by_role(self, benchmark: str, role: str | None, *, unregistered: bool = False,
                            origin: str | None = None, data_version: str | None = None) -> list[int]:
        """Ids (ascending) of ``benchmark``'s anchor sets with ``role`` (any when None), optionally only
        those not yet in the MLflow registry, or of one ``origin`` / ``data_version``."""
        where = ["benchmark = $b"]
        params: dict[str, Any] = {"b": benchmark}
        for column, value in (("role", role), ("origin", origin), ("data_version", data_version)):
            if value is not None:
                where.append(f"{column} = ${column}")
                params[column] = value
        if unregistered:
            where.append("registry_version IS NULL")
        rows = self.query(f"SELECT anchor_set_id FROM anchor_sets WHERE {' AND '.join(where)} ORDER BY 1", params)
        return [int(i) for i in rows.get_column("anchor_set_id").to_list()]

    def evaluation_count(self, benchmark: str, data_version: str | None = None, *, run_key: str | None = None) -> int:
        """Comparison rows already stored for ``benchmark`` on ``data_version``, or under the comparison
        key ``run_key`` (data version and every comparison setting)."""
        column, value = ("run_key", run_key) if run_key is not None else ("data_version", data_version)
        return int(self.query(f"SELECT count(*) FROM evaluations WHERE benchmark = $b AND {column} = $v",
                              {"b": benchmark, "v": value}).item())

    def save_evaluations(self, rows: Iterable[Mapping[str, Any]] | pl.DataFrame) -> int:
        """Store evaluation rows; a rerun of (benchmark, method, k, seed, split_policy) replaces it."""
        cols = ("benchmark", "method", "k", "seed", "split_policy", "mae", "tau", "rho", "max_error",
                "seconds", "n_train", "n_val", "n_test", "mlflow_run_id", "data_version", "run_key")
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

    def predictor_anchor_set(self, artifact: Any) -> int:
        """The anchor set a loaded predictor (:class:`~sparseeval.estimate.artifact.PredictorArtifact`) scores with:
        one of this store's (its folder, or a folder with the same content hash), else the row that
        records it as an outside predictor (``origin`` 'external', retired at once: the store never
        serves or publishes it), created on first use. Predictions are keyed by it."""
        from pathlib import Path

        params = {"predictor_hash": artifact.content_hash, "source": artifact.source or str(artifact.folder)}
        here = Path(artifact.folder).resolve() if artifact.folder is not None else None
        rows = self.query("SELECT anchor_set_id, artifact_uri FROM anchor_sets WHERE benchmark = $b "
                          "AND artifact_uri IS NOT NULL ORDER BY anchor_set_id DESC", {"b": artifact.benchmark})
        for set_id, uri in rows.iter_rows():
            folder = Path(uri)
            meta = folder / "predictor.json"
            if folder.resolve() == here or (meta.is_file() and
                                            json.loads(meta.read_text()).get("content_hash") == artifact.content_hash):
                return int(set_id)
        found = self.query("SELECT anchor_set_id FROM anchor_sets WHERE origin = 'external' AND benchmark = $b "
                           "AND json_extract_string(params, '$.predictor_hash') = $h ORDER BY 1 LIMIT 1",
                           {"b": artifact.benchmark, "h": artifact.content_hash})
        if found.height:
            return int(found.item())
        return self.save_anchor_set(
            benchmark=artifact.benchmark, method=artifact.method, k=artifact.k, items=artifact.anchor_item_ids,
            item_benchmarks=[a.benchmark or artifact.benchmark for a in artifact.anchors] if artifact.is_joint
            else None, params=params, predictor_hash=artifact.content_hash, origin="external",
            artifact_uri=params["source"], n_train_models=artifact.train_models.get("count"), role="retired",
            reason="an outside predictor used by `sparseeval predict` (not fitted here): recorded for its "
                   "predictions, never served or published by this store")

    def save_predictions(self, rows: Iterable[Mapping[str, Any]] | pl.DataFrame) -> int:
        """Upsert predictions keyed by (model, benchmark, anchor_set_id), with the stage that gave each number
        (``anchors`` or ``probe``) and the probe items it used and still asks for."""
        cols = ("model", "benchmark", "anchor_set_id", "predicted", "lower", "upper", "n_anchors", "ood", "ood_reason",
                "warnings", "stage", "probe_items", "probe_next", "anchors_predicted")
        records = rows.to_dicts() if isinstance(rows, pl.DataFrame) else [dict(r) for r in rows]
        values = [[r.get(c) for c in cols[:7]] + [bool(r.get("ood") or False), _reason(r), _warnings(r),
                                                  r.get("stage") or "anchors", int(r.get("probe_items") or 0),
                                                  int(r.get("probe_next") or 0), r.get("anchors_predicted"), _now()]
                  for r in records]
        bad = [v for v in values if v[3] is None or not 0.0 <= float(v[3]) <= 1.0]
        if bad:
            raise ValueError(f"prediction outside [0, 1] for model {bad[0][0]!r}: {bad[0][3]}")
        with self._write() as con, _transaction(con):
            if values:
                con.executemany(f"INSERT OR REPLACE INTO predictions ({', '.join(cols)}, created_at) "
                                f"VALUES ({', '.join('?' * (len(cols) + 1))})", values)
        return len(values)


def _reason(row: Mapping[str, Any]) -> str | None:
    """A prediction's flag reasons as stored: joined by " | " (given as ``ood_reasons`` or ``ood_reason``)."""
    reasons = row.get("ood_reasons")
    if reasons is not None:
        return " | ".join(reasons) or None
    return row.get("ood_reason")


def _warnings(row: Mapping[str, Any]) -> str | None:
    """A prediction's warnings as stored: joined by " | " (given as a list, or already joined)."""
    warnings = row.get("warnings")
    if isinstance(warnings, str) or warnings is None:
        return warnings or None
    return " | ".join(warnings) or None


def promote(con: duckdb.DuckDBPyConnection, benchmark: str, anchor_set_id: int, role: str,
            **fields: Any) -> int | None:
    """Inside the caller's transaction: ``anchor_set_id`` becomes ``role`` (champion or challenger) of
    ``benchmark``; the set holding that role before is retired (its id is returned)."""
    old = _run(con, "SELECT anchor_set_id FROM anchor_sets WHERE benchmark = ? AND role = ?", [benchmark, role])
    previous = int(old[0][0]) if old else None
    for (other,) in old:
        if int(other) != anchor_set_id:
            set_role(con, int(other), "retired", f"replaced as {role} by anchor set #{anchor_set_id}")
    _update(con, anchor_set_id, {"role": role, "reason": f"published as {role}", "published_at": _now(), **fields})
    return previous
