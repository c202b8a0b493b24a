"""Ingest and matrix-building speed at Open LLM Leaderboard v1 scale (about 7,000 models x 28,659 items).

Phases, each in its own subprocess so ``ru_maxrss`` is that phase's peak (native DuckDB/Polars memory
included, which tracemalloc cannot see):

1. ``generate``: synthetic long-format responses written as one parquet per benchmark by DuckDB
   (``COPY (SELECT ... FROM range() ...)``: no Python loop over rows). Correctness follows a 1-PL
   model (model ability minus item difficulty) from hashes of (seed, model, item): deterministic.
2. ``ingest``: the store's schema (``sql/schema.sql`` via ``sparseeval.store.Store``), then
   ``INSERT INTO responses SELECT ... FROM read_parquet(...)``: DuckDB's native reader, keys enforced.
3. ``store``: optional (``--store-ingest``): ``Store.ingest`` on one benchmark's file, the path a user
   takes (reader, validation, conflict check), for comparison.
4. ``matrix``: ``sparseeval.matrix.build_matrix`` for MMLU (14,042 items) from ``pl.scan_parquet``.

Usage: ``python bench/ingest.py --scale 0.1 [--workdir DIR] [--keep]``. Data goes to a temporary
folder (or ``--workdir``), never into the repository. Targets: ingest >= 2 M rows/s, matrix < 20 s,
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
    con.execute("SET memory_limit = '6GB'").fetchall()  # the ORDER BY spills instead of taking 13 GB
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
              FROM range({n_models}) r(m), range({n_items}) s(i)
              ORDER BY m, i  -- results arrive model by model, as from real evaluation runs
            ) TO '{out / f"{bench}.parquet"}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 1000000)
        """).fetchall()
        rows += n_models * n_items
    con.close()
    return {"rows": rows, "seconds": time.perf_counter() - t0,
            "bytes": sum(p.stat().st_size for p in out.glob("*.parquet"))}


def phase_ingest(workdir: Path) -> dict:
    """Native parquet ingest into a store-schema DuckDB file (one transaction)."""
    import duckdb

    from sparseeval.store import Store

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
    con.execute("INSERT INTO ingests (ingest_id, file, sha256, format, status) "
                "VALUES (nextval('ingest_id_seq'), ?, 'bench', 'long-parquet', 'ok')", [files]).fetchall()
    n = con.execute(f"INSERT INTO responses SELECT model, benchmark, item_id, score, 1 "
                    f"FROM read_parquet('{files}')").fetchall()[0][0]
    con.execute("INSERT INTO items SELECT DISTINCT benchmark, item_id "
                f"FROM read_parquet('{files}')").fetchall()
    con.execute("INSERT INTO models (model, family) SELECT DISTINCT model, split_part(model, '/', 1) "
                f"FROM read_parquet('{files}')").fetchall()
    con.commit()
    con.execute("CHECKPOINT").fetchall()
    seconds = time.perf_counter() - t0
    con.close()
    return {"rows": int(n), "seconds": seconds, "rows_per_s": n / seconds, "db_bytes": db.stat().st_size}


def phase_store(workdir: Path) -> dict:
    """``Store.ingest`` of the smallest benchmark file (reader + validation + conflict checks)."""
    from sparseeval.store import Store

    db = workdir / "store.duckdb"
    db.unlink(missing_ok=True)
    src = workdir / "responses" / "truthfulqa.parquet"
    store = Store(db, snapshot=False)
    store.apply_schema()  # a fresh store must exist before ingest's read-only duplicate check
    t0 = time.perf_counter()
    report = store.ingest(src)
    seconds = time.perf_counter() - t0
    n = sum(f.n_responses for f in report.files)
    if not report.ok:
        raise SystemExit(f"store ingest refused: {[f.reason for f in report.files]}")
    return {"rows": n, "seconds": seconds, "rows_per_s": n / seconds}


def phase_matrix(workdir: Path) -> dict:
    import polars as pl

    from sparseeval.matrix import build_matrix

    t0 = time.perf_counter()
    lazy = pl.scan_parquet(workdir / "responses" / "*.parquet")
    matrix = build_matrix(lazy, None, MATRIX_BENCHMARK)
    seconds = time.perf_counter() - t0
    return {"rows": int(matrix.observed.sum()), "seconds": seconds, "shape": list(matrix.shape),
            "rows_per_s": matrix.observed.sum() / seconds}


PHASES = {"generate": phase_generate, "ingest": phase_ingest, "store": phase_store, "matrix": phase_matrix}


def run_phase(name: str, workdir: Path, extra: list[str]) -> dict:
    """Run one phase in a fresh interpreter and collect its JSON result (with its peak RSS)."""
    cmd = [sys.executable, __file__, "--phase", name, "--workdir", str(workdir), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"phase {name} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the 7,000 models")
    parser.add_argument("--workdir", type=Path, default=None, help="data folder (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the generated data")
    parser.add_argument("--store-ingest", action="store_true", help="also time Store.ingest on one file")
    parser.add_argument("--skip-matrix", action="store_true", help="time generation and ingest only")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.phase:  # child process
        if args.phase == "generate":
            result = phase_generate(args.workdir, max(1, round(FULL_MODELS * args.scale)), args.seed)
        else:
            result = PHASES[args.phase](args.workdir)
        result["peak_rss_gb"] = _peak_rss_bytes() / 1e9
        print(json.dumps(result))
        return 0

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sparseeval-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    extra = ["--scale", str(args.scale), "--seed", str(args.seed)]
    try:
        results = {"generate": run_phase("generate", workdir, extra)}
        results["ingest"] = run_phase("ingest", workdir, extra)
        if args.store_ingest:
            results["store"] = run_phase("store", workdir, extra)
        if not args.skip_matrix:
            results["matrix"] = run_phase("matrix", workdir, extra)
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    n_models = max(1, round(FULL_MODELS * args.scale))
    print(f"scale {args.scale}: {n_models} models x {sum(BENCHMARKS.values())} items")
    print(f"{'phase':<10}{'rows':>14}{'seconds':>10}{'rows/s':>14}{'peak GB':>10}  note")
    targets = {"ingest": "target >= 2 M rows/s", "matrix": "target < 20 s",
               "store": "Store.ingest (truthfulqa file)"}
    for name, r in results.items():
        rate = f"{r.get('rows_per_s', r['rows'] / r['seconds']) / 1e6:.2f} M"
        note = targets.get(name, "")
        if name == "matrix":
            note += f", shape {r['shape']}"
        print(f"{name:<10}{r['rows']:>14,}{r['seconds']:>10.2f}{rate:>14}{r['peak_rss_gb']:>10.2f}  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
