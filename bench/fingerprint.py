"""What the library computes, as one fingerprint: fitted anchors, published content hashes and predictions.

Why: a restructuring of the code (moving modules, typed results, one declaration per setting) must not
change a single number. This script fits and publishes on fixed data with fixed seeds and one thread and
prints a JSON fingerprint; run it before and after a change and compare (``--compare before.json``
prints every difference and exits 1 when there is one).

* ``sparseeval fit``'s library call on the shared data: v1 mmlu with its frontier self-check (the two
  stages), v1 arc, v2 math_hard: each predictor's content hash, anchors, and a digest of ``predict``'s
  rows for 200 held-out models (their anchors and the items of their own probe draw);
* the refresh on a small synthetic leaderboard (two benchmarks, then the joint predictor): each
  publication's content hash and decision.

    SPARSEEVAL_THREADS=1 python bench/fingerprint.py --out after.json [--compare before.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import polars as pl

from sparseeval.core.settings import RefreshSettings
from sparseeval.data.access.matrix_store import MatrixStore
from sparseeval.data.access.sources import read_data
from sparseeval.data.store import Store
from sparseeval.data.synthetic import generate_leaderboard, write_leaderboard
from sparseeval.estimate.artifact import load_predictor
from sparseeval.estimate.fitting import ProbeSettings, fit_predictor
from sparseeval.estimate.predicting import predict
from sparseeval.publish.refresh_policy import refresh_benchmark
from sparseeval.publish.tracking import TrackingConfig

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def digest(rows: list[dict[str, Any]]) -> str:
    text = json.dumps(rows, sort_keys=True, default=lambda v: round(float(v), 9))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fitted(data: Path, bench: str, selfcheck: bool, tmp: Path) -> dict[str, Any]:
    parsed = read_data(data)
    responses = parsed.responses.filter(pl.col("benchmark") == bench)
    scores = parsed.scores.filter(pl.col("benchmark") == bench).sort("model")
    held = set(scores["model"].to_list()[::max(1, scores.height // 200)][:200])
    keep = ~pl.col("model").is_in(list(held))
    art = fit_predictor(responses.filter(keep), scores.filter(keep), bench, 20, "sparseeval-headroom", seed=0,
                        device="cpu", frontier_quantile=0.9 if selfcheck else None, probe=ProbeSettings())
    saved = art.save(tmp / bench)
    # sorted: the reader's row order (a DuckDB scan) is not the fingerprint's concern
    rows = sorted((p.as_dict() for p in predict(saved, responses.filter(~keep))),
                  key=lambda r: (r["model"], r["benchmark"]))
    return {"content_hash": saved.content_hash, "anchors": saved.anchor_item_ids, "predictions": digest(rows),
            "frontier": saved.extra.get("frontier"), "n_predicted": len(rows)}


def refreshed(tmp: Path) -> list[dict[str, Any]]:
    lb = generate_leaderboard(n_families=30, models_per_family=10, benchmarks={"arc": 120, "gsm8k": 100}, seed=3)
    write_leaderboard(lb, tmp / "src")
    store = Store(tmp / "sparseeval.duckdb")
    store.ingest(tmp / "src")
    out = []
    for bench in ("arc", "gsm8k"):
        matrix = MatrixStore.beside(store).update(store, bench).matrix
        result = refresh_benchmark(matrix, store, TrackingConfig(data_dir=tmp), tmp / "predictors",
                                   RefreshSettings(k=10, device="cpu"), publish=True, challenger=False)
        row = store.champion(bench)
        published = None if row is None else load_predictor(row["artifact_uri"]).content_hash
        out.append({"benchmark": bench, "decision": result.decision, "content_hash": published,
                    "anchors": None if row is None else row["items"]})
    return out


def compare(before: dict[str, Any], after: dict[str, Any], path: str = "") -> list[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        return [d for key in sorted(set(before) | set(after))
                for d in compare(before.get(key), after.get(key), f"{path}.{key}")]
    if isinstance(before, float) and isinstance(after, float):
        return [] if abs(before - after) <= 1e-12 else [f"{path}: {before} != {after}"]
    return [] if before == after else [f"{path}: {before!r} != {after!r}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--compare", type=Path, help="a fingerprint to compare with (exit 1 on any difference)")
    args = ap.parse_args()
    if os.environ.get("SPARSEEVAL_THREADS") != "1":
        print("warning: set SPARSEEVAL_THREADS=1 for a fingerprint that does not depend on thread count",
              file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        finger = {"fit": {f"v1/{b}": fitted(SHARED / "openllm_v1", b, b == "mmlu", root) for b in ("mmlu", "arc")}
                  | {"v2/math_hard": fitted(SHARED / "openllm_v2", "math_hard", False, root)},
                  "refresh": refreshed(root / "refresh")}
    args.out.write_text(json.dumps(finger, indent=1, sort_keys=True) + "\n")
    for name, f in finger["fit"].items():
        print(f"{name:14s} {f['content_hash']}  predictions {f['predictions']}  ({f['n_predicted']} models)")
    for r in finger["refresh"]:
        print(f"refresh {r['benchmark']:6s} {r['content_hash']}  {r['decision']}")
    if args.compare:
        diffs = compare(json.loads(args.compare.read_text()), json.loads(json.dumps(finger, sort_keys=True)))
        print("\n".join(diffs) or "identical to " + str(args.compare))
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
