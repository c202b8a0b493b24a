"""Ingest and matrix-building speed at Open LLM Leaderboard v1 scale (about 7,000 models x 28,659 items).

Phases, each in its own subprocess so ``ru_maxrss`` is that phase's peak (native DuckDB/Polars memory
included, which tracemalloc cannot see):

1. ``generate``: synthetic long-format responses written as one parquet per benchmark by DuckDB
   (``COPY (SELECT ... FROM range() ...)``: no Python loop over rows). Correctness follows a 1-PL
   model (model ability minus item difficulty) from hashes of (seed, model, item): deterministic.
   Rows come model by model, as from real evaluation runs, straight from the order of ``range``
   (DuckDB preserves insertion order), so no sort and little memory.
2. ``ingest``: the store's schema, then ``INSERT INTO responses SELECT ... FROM read_parquet(glob)``
   in one transaction: the ceiling, DuckDB's native reader with no checks.
3. ``store``: ``Store.ingest`` of the folder, the path a user takes (hash, checks in SQL over each
   file, conflict check, one transaction per file, the snapshot published once at the end: the
   note says how many times and how long).
4. ``matrix``: ``build_matrix`` for MMLU (14,042 items) from ``pl.scan_parquet`` (filter pushed down).
5. ``matrix-store``: the same from the store, ``Store.load_long("mmlu", lazy=True)``.

Usage: ``python bench/ingest.py [--scale 1.0] [--workdir DIR] [--skip PHASE ...]``. Data goes to a
temporary folder, removed at the end, or to ``--workdir`` (kept, and reused by a later run of the
same scale and seed); never into the repository. Targets: ingest >= 2 M rows/s, matrix < 20 s,
peak memory < 6 GB.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: item counts of the six leaderboard v1 benchmarks (test splits as the leaderboard used them)
BENCHMARKS: dict[str, int] = {
    "arc": 1172, "hellaswag": 10042, "mmlu": 14042, "truthfulqa": 817, "winogrande": 1267, "gsm8k": 1319,
}
FULL_MODELS = 7000
MATRIX_BENCHMARK = "mmlu"


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def phase_generate(workdir: Path, n_models: int, seed: int) -> dict:
    import duckdb

    out = workdir / "responses"
    out.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute("SET memory_limit = '4GB'").fetchall()  # spill rather than crowd other jobs
    con.execute(f"SET temp_directory = '{workdir / 'duckdb_tmp'}'").fetchall()
    rows = 0
    t0 = time.perf_counter()
    for b_idx, (bench, n_items) in enumerate(BENCHMARKS.items()):
        # ability in [-2, 2] per model, difficulty in [-2, 2] per item, uniform noise per cell
        con.execute(f"""
            COPY (
              SELECT 'org' || (m % 97) || '/model-' || m AS model,
                     '{bench}' AS benchmark,
                     CAST(i AS VARCHAR) AS item_id,
                     CAST((hash({seed}, m, {b_idx}, i) % 1000000) / 1e6
                          < 1 / (1 + exp(-((hash({seed}, m) % 4001) / 1000.0 - 2
                                           - ((hash({seed}, {b_idx}, i) % 4001) / 1000.0 - 2))))
                          AS DOUBLE) AS score
              FROM (SELECT k // {n_items} AS m, k % {n_items} AS i FROM range({n_models * n_items}) t(k))
            ) TO '{out / f"{bench}.parquet"}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 1000000)
        """).fetchall()
        rows += n_models * n_items
    con.close()
    size = sum(p.stat().st_size for p in out.glob("*.parquet"))
    return {"rows": rows, "seconds": time.perf_counter() - t0, "note": f"parquet {size / 1e6:.0f} MB"}


def phase_ingest(workdir: Path) -> dict:
    """Native parquet ingest into a store-schema DuckDB file (one transaction)."""
    import duckdb

    from sparseeval.data.store import Store

    db = workdir / "bench.duckdb"
    db.unlink(missing_ok=True)
    store = Store(db, snapshot=False)
    store.apply_schema()
    con = duckdb.connect(str(db))
    con.execute("SET enable_progress_bar = false").fetchall()
    con.execute("SET memory_limit = '6GB'").fetchall()  # the target: fail loudly rather than swap
    con.execute(f"SET temp_directory = '{workdir / 'duckdb_tmp'}'").fetchall()
    files = str(workdir / "responses" / "*.parquet")
    t0 = time.perf_counter()
    con.begin()
    ingest_id = con.execute("INSERT INTO ingests (ingest_id, file, sha256, format, status) "
                            "VALUES (nextval('ingest_id_seq'), ?, 'bench', 'long-parquet', 'ok') RETURNING ingest_id",
                            [files]).fetchall()[0][0]
    # the store's layout: one current run per (model, benchmark), its rows in response_rows (``responses`` is
    # the view of the current ones)
    con.execute("INSERT INTO runs (run_id, ingest_id, model, benchmark, kind, n_rows) "
                "SELECT nextval('run_id_seq'), ?, model, benchmark, 'responses', count(*) "
                f"FROM read_parquet('{files}') GROUP BY model, benchmark", [ingest_id]).fetchall()
    n = con.execute("INSERT INTO response_rows SELECT p.model, p.benchmark, p.item_id, p.score, r.run_id "
                    f"FROM read_parquet('{files}') p JOIN runs r USING (model, benchmark)").fetchall()[0][0]
    con.execute("INSERT INTO items SELECT DISTINCT benchmark, item_id "
                f"FROM read_parquet('{files}')").fetchall()
    con.execute("INSERT INTO models (model, family) SELECT DISTINCT model, split_part(model, '/', 1) "
                f"FROM read_parquet('{files}')").fetchall()
    con.commit()
    con.execute("CHECKPOINT").fetchall()
    seconds = time.perf_counter() - t0
    con.close()
    return {"rows": int(n), "seconds": seconds, "note": f"one INSERT, db {db.stat().st_size / 1e9:.2f} GB"}


def phase_store(workdir: Path) -> dict:
    """``Store.ingest`` of every benchmark file: the path a user takes (hash, checks, conflicts,
    one transaction per file, one snapshot publication per ingest)."""
    from sparseeval.data.store import Store

    db = workdir / "store.duckdb"
    for old in workdir.glob("store*.duckdb*"):
        old.unlink()
    store = Store(db)
    store.apply_schema()
    count, spent = store.publish_count, store.publish_seconds
    t0 = time.perf_counter()
    report = store.ingest(workdir / "responses")
    seconds = time.perf_counter() - t0
    if not report.ok:
        raise SystemExit(f"store ingest refused: {[f.reason for f in report.refused]}")
    n = sum(f.n_responses for f in report.files)
    note = (f"{len(report.files)} files, db {db.stat().st_size / 1e9:.2f} GB, snapshot published "
            f"{store.publish_count - count}x in {store.publish_seconds - spent:.1f} s")
    return {"rows": n, "seconds": seconds, "note": note}


def _matrix_result(matrix: Any, seconds: float) -> dict:
    return {"rows": int(matrix.observed.sum()), "seconds": seconds,
            "note": f"{MATRIX_BENCHMARK} {matrix.shape[0]:,} x {matrix.shape[1]:,}"}


def phase_matrix(workdir: Path) -> dict:
    """``build_matrix`` from a lazy parquet scan (the benchmark filter is pushed into the scan)."""
    import polars as pl

    from sparseeval.data.matrix import build_matrix

    t0 = time.perf_counter()
    # the synthetic rows carry no reported score: each model's score is its items' mean, declared so
    matrix = build_matrix(pl.scan_parquet(workdir / "responses" / "*.parquet"), None, MATRIX_BENCHMARK,
                          row_mean_is_score=True)
    return _matrix_result(matrix, time.perf_counter() - t0)


def phase_matrix_store(workdir: Path) -> dict:
    """``build_matrix`` from the store (``Store.load_long(lazy=True)``: Arrow batches from the snapshot)."""
    from sparseeval.data.matrix import build_matrix
    from sparseeval.data.store import Store

    t0 = time.perf_counter()
    responses, scores = Store(workdir / "store.duckdb").load_long(MATRIX_BENCHMARK, lazy=True)
    matrix = build_matrix(responses, scores, MATRIX_BENCHMARK, row_mean_is_score=True)  # as phase_matrix
    return _matrix_result(matrix, time.perf_counter() - t0)


PHASES = {"generate": phase_generate, "ingest": phase_ingest, "store": phase_store, "matrix": phase_matrix,
          "matrix-store": phase_matrix_store}
LABELS = {"generate": "generate (DuckDB COPY)", "ingest": "raw DuckDB ingest", "store": "Store.ingest",
          "matrix": "matrix, lazy parquet scan", "matrix-store": "matrix, via the store"}
TARGETS = {"ingest": ">= 2 M rows/s", "store": ">= 2 M rows/s", "matrix": "< 20 s", "matrix-store": "< 20 s"}


def run_phase(name: str, workdir: Path, extra: list[str]) -> dict:
    """Run one phase in a fresh interpreter and collect its JSON result (with its peak RSS)."""
    cmd = [sys.executable, __file__, "--phase", name, "--workdir", str(workdir), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"phase {name} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _generated(workdir: Path, n_models: int, seed: int) -> bool:
    """True when ``workdir`` already holds the data of this scale and seed (``--workdir`` reuse)."""
    meta = workdir / "generated.json"
    return meta.exists() and json.loads(meta.read_text()) == {"models": n_models, "seed": seed}


def print_table(results: dict[str, dict], n_models: int) -> None:
    print(f"{n_models:,} models x {sum(BENCHMARKS.values()):,} items in {len(BENCHMARKS)} benchmarks")
    header = f"{'phase':<27}{'rows':>14}{'seconds':>9}{'M rows/s':>10}{'peak RSS GB':>13}  note"
    print(header)
    print("-" * len(header))
    for name, r in results.items():
        rate = r["rows"] / r["seconds"] / 1e6 if r["seconds"] else float("nan")
        target = f"target {TARGETS[name]}" if name in TARGETS else ""
        note = "; ".join(x for x in (r.get("note", ""), target) if x)
        print(f"{LABELS[name]:<27}{r['rows']:>14,}{r['seconds']:>9.1f}{rate:>10.2f}"
              f"{r['peak_rss_gb']:>13.2f}  {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the 7,000 models (default 1.0)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="data folder, kept and reused for the same scale and seed (default: a temp "
                             "folder, removed at the end)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip", nargs="*", default=[], choices=sorted(PHASES), help="phases to leave out")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    n_models = max(1, round(FULL_MODELS * args.scale))

    if args.phase:  # child process
        if args.phase == "generate":
            result = phase_generate(args.workdir, n_models, args.seed)
            meta = {"models": n_models, "seed": args.seed}
            (args.workdir / "generated.json").write_text(json.dumps(meta))
        else:
            result = PHASES[args.phase](args.workdir)
        result["peak_rss_gb"] = _peak_rss_bytes() / 1e9
        print(json.dumps(result))
        return 0

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sparseeval-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    extra = ["--scale", str(args.scale), "--seed", str(args.seed)]
    results: dict[str, dict] = {}
    try:
        if not _generated(workdir, n_models, args.seed):
            shutil.rmtree(workdir / "responses", ignore_errors=True)
            (workdir / "generated.json").unlink(missing_ok=True)
            results["generate"] = run_phase("generate", workdir, extra)
            print(f"  generate: {results['generate']['seconds']:.1f} s", flush=True)
        for name in ("ingest", "store", "matrix", "matrix-store"):
            if name not in args.skip and (name != "matrix-store" or "store" not in args.skip):
                results[name] = run_phase(name, workdir, extra)
                print(f"  {name}: {results[name]['seconds']:.1f} s", flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        else:  # keep the generated data for reuse, not the databases
            for db in workdir.glob("*.duckdb*"):
                db.unlink()
            shutil.rmtree(workdir / "duckdb_tmp", ignore_errors=True)
    print_table(results, n_models)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
