"""Leaderboard scale: ingest, matrix, fits and a one-benchmark refresh up to 7,000 models x 30,000 items.

Synthetic data (the documented model; deterministic given the seed): a compensatory 2PL IRT model with
three correlated abilities. Model ``m`` has abilities ``theta_m ~ N(0, S)``, ``S`` = 0.5 on the
diagonal-free entries and 1 on the diagonal (three factors correlated 0.5); item ``i`` loads mainly on
factor ``i mod 3`` (loading ``U(0.8, 2.0)``) and 0.3 on the other two, with difficulty ``b_i ~ N(0, 1.2^2)``;
``P(correct) = sigmoid(a_i . theta_m - b_i)`` and each cell is one Bernoulli draw. The reported score
of a model is its mean over all items (the full pool is stored, so the target is exact). Data go to
``<workdir>/<N>x<M>/unit/{responses,scores}.parquet`` (a long-format unit: one row per model x item),
written in row groups of a few hundred models, so generation never holds the whole matrix.

Phases, each in a fresh interpreter so ``ru_maxrss`` is that phase's own peak RSS:

* ``ingest``: ``Store.ingest`` of the unit into an empty private store, as ``sparseeval.data.access.sources.open_data``
  does for ``evaluate`` and ``fit`` (the bulk SQL path for clean long parquet);
* ``matrix``: ``build_matrix`` over ``Store.load_long(benchmark, lazy=True)`` of that store;
* ``fit <method> K``: the matrix from ``pl.scan_parquet`` (not timed), then ``fit_on_split`` on seed 0's
  split (seconds = the fit alone; peak RSS = the whole process, matrix included), and test MAE;
* ``refresh``: what the pipeline runs for one benchmark: ingest into a fresh store (with its published
  snapshot), the matrix, the random-linear bar, the anchors fit (``SPARSEEVAL_METHOD``, K=20), calibration
  and save of the predictor (``artifact_from_fit`` + ``save``), held-out MAE and coverage checks, and the
  comparison plan the budget allows (:func:`sparseeval.estimate.budget.comparison_plan`, reported, not run).

    python bench/scale.py --quick                     # CI size (300 x 1,000), a few seconds
    python bench/scale.py                             # the grid up to 7,000 x 30,000 (long)
    python bench/scale.py --sizes 7000x30000 --fits sparseeval-linear:20,sparseeval-linear:100
    python bench/scale.py --out docs/results/scale.csv

The daily refresh through the real pipeline (day 1 the whole leaderboard, day 2 new models appended) is
``bench/days.py``, which generates its data with :func:`generate` (``new_models``).

Growth exponents: ``log seconds = c + a log N + b log M`` fitted by least squares per phase over the
grid (printed, and written next to the CSV as ``*_exponents.csv``). Run it on a quiet machine, one
process at a time; the load average is recorded with every row.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCHMARK = "mmlu"
QUICK = [(300, 1000)]
GRID = [(1750, 7500), (3500, 15000), (7000, 15000), (3500, 30000), (7000, 30000)]
DEFAULT_FITS = "random-linear:20,sparseeval-linear:20,sparseeval-linear:100"
CHUNK_CELLS = 8_000_000  #: cells generated and written per parquet row group


# -- synthetic data ---------------------------------------------------------------------------------

def _items(rng: np.random.Generator, n_models: int, n_items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first ``n_models`` abilities, then every item's loadings and difficulty (in this order from
    ``rng``: the day-1 leaderboard of a seed is unchanged by later days)."""
    cov = np.full((3, 3), 0.5) + 0.5 * np.eye(3)
    theta = rng.multivariate_normal(np.zeros(3), cov, size=n_models).astype(np.float32)  # (N, 3)
    loadings = np.full((n_items, 3), 0.3, dtype=np.float32)
    loadings[np.arange(n_items), np.arange(n_items) % 3] = rng.uniform(0.8, 2.0, n_items)
    difficulty = rng.normal(0.0, 1.2, n_items).astype(np.float32)
    return theta, loadings, difficulty


def generate(folder: Path, n_models: int, n_items: int, seed: int = 0, *, new_models: int = 0) -> dict[str, Any]:
    """Write the synthetic unit (see the module docstring) and return its description.

    ``new_models`` > 0: instead, a later day's arrivals on the same leaderboard: ``new_models`` more
    models (named after the first ``n_models``, abilities from their own seeded stream) answering the
    same ``n_items`` items (same loadings and difficulties as the day-1 unit of ``seed``)."""
    rng = np.random.default_rng(seed)
    theta, loadings, difficulty = _items(rng, n_models, n_items)
    first = 0
    if new_models:
        rng = np.random.default_rng([seed, n_models, new_models])
        cov = np.full((3, 3), 0.5) + 0.5 * np.eye(3)
        theta = rng.multivariate_normal(np.zeros(3), cov, size=new_models).astype(np.float32)
        first = n_models
    count = len(theta)
    models = np.array([f"org{m % 97}/model-{m:05d}" for m in range(first, first + count)], dtype=object)
    items = [f"q{i:05d}" for i in range(n_items)]
    unit = folder / "unit"
    unit.mkdir(parents=True, exist_ok=True)
    totals = _write_responses(unit / "responses.parquet", rng, theta, loadings, difficulty, models, items)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"model": models.tolist(), "benchmark": [BENCHMARK] * count,
                             "score": (totals / n_items).tolist()}), unit / "scores.parquet")
    meta = {"models": n_models, "items": n_items, "seed": seed, **({"new_models": new_models} if new_models else {})}
    (folder / "generated.json").write_text(json.dumps(meta))
    return {"rows": count * n_items}


def _write_responses(path: Path, rng: np.random.Generator, theta: np.ndarray, loadings: np.ndarray,
                     difficulty: np.ndarray, models: np.ndarray, item_ids: list[str]) -> np.ndarray:
    """One Bernoulli draw per cell, written in row groups of a few hundred models; each model's total."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n_models, n_items = len(theta), len(item_ids)
    items = pa.array(item_ids)
    schema = pa.schema([("model", pa.string()), ("benchmark", pa.string()), ("item_id", pa.string()),
                        ("score", pa.float32())])
    rows_per_chunk = max(1, CHUNK_CELLS // n_items)
    totals = np.zeros(n_models, dtype=np.float64)
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for start in range(0, n_models, rows_per_chunk):
            stop = min(n_models, start + rows_per_chunk)
            logits = theta[start:stop] @ loadings.T - difficulty[None, :]
            correct = (rng.random(logits.shape, dtype=np.float32) < 1.0 / (1.0 + np.exp(-logits)))
            totals[start:stop] = correct.sum(1)
            n = stop - start
            table = pa.table({
                "model": pa.DictionaryArray.from_arrays(
                    pa.array(np.repeat(np.arange(n, dtype=np.int32), n_items)), pa.array(models[start:stop].tolist())),
                "benchmark": pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(n * n_items, dtype=np.int32)), pa.array([BENCHMARK])),
                "item_id": pa.DictionaryArray.from_arrays(
                    pa.array(np.tile(np.arange(n_items, dtype=np.int32), n)), items),
                "score": pa.array(correct.reshape(-1).astype(np.float32)),
            })
            writer.write_table(table.cast(schema))
    return totals


def _generated(folder: Path, n_models: int, n_items: int, seed: int, new_models: int = 0) -> bool:
    meta = folder / "generated.json"
    want = {"models": n_models, "items": n_items, "seed": seed, **({"new_models": new_models} if new_models else {})}
    return meta.exists() and json.loads(meta.read_text()) == want


# -- phases (run in a child process) ---------------------------------------------------------------

def _cpu() -> float:
    """CPU seconds of this process so far (all its threads, DuckDB's included): a load-robust cost."""
    t = os.times()
    return t.user + t.system


def _scan_matrix(folder: Path) -> Any:
    import polars as pl

    from sparseeval.data.matrix import build_matrix

    unit = folder / "unit"
    return build_matrix(pl.scan_parquet(unit / "responses.parquet"), pl.read_parquet(unit / "scores.parquet"),
                        BENCHMARK)


def phase_ingest(folder: Path) -> dict[str, Any]:
    from sparseeval.data.store import Store

    db = folder / "read.duckdb"
    for old in folder.glob("read.duckdb*"):
        old.unlink()
    store = Store(db, snapshot=False)  # as sources.open_data
    store.apply_schema()
    t0, c0 = time.perf_counter(), _cpu()
    report = store.ingest(folder / "unit")
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    bad = [f for f in report.files if f.status not in ("ok", "partial")]
    if bad:
        raise SystemExit(f"ingest refused: {[(f.file, f.reason) for f in bad]}")
    return {"seconds": seconds, "cpu_s": cpu, "note": f"db {db.stat().st_size / 1e9:.2f} GB"}


def phase_matrix(folder: Path) -> dict[str, Any]:
    from sparseeval.data.matrix import build_matrix
    from sparseeval.data.store import Store

    t0, c0 = time.perf_counter(), _cpu()
    matrix = build_matrix(*Store(folder / "read.duckdb", snapshot=False).load_long(BENCHMARK, lazy=True), BENCHMARK)
    return {"seconds": time.perf_counter() - t0, "cpu_s": _cpu() - c0, "note": f"{matrix.shape[0]} x {matrix.shape[1]}"}


def phase_fit(folder: Path, method: str, k: int) -> dict[str, Any]:
    from sparseeval.estimate.evaluation import ProtocolConfig, fit_on_split, score_on_split, split_for_seed
    from sparseeval.estimate.metrics import score_metrics

    matrix = _scan_matrix(folder)
    split = split_for_seed(matrix, 0, ProtocolConfig())
    t0, c0 = time.perf_counter(), _cpu()
    est = fit_on_split(matrix, split, method, k, 0, device="cpu")
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    mae = score_metrics(score_on_split(matrix, split, est), matrix.scores[split.test]).mae
    timings = getattr(est, "timings_", {})
    sel = getattr(est, "selection_", {})
    note = " ".join(f"{name}={value:.1f}s" for name, value in timings.items())
    if sel:
        note += f" start={sel.get('start')} swaps={sel.get('swaps')}"
    return {"seconds": seconds, "cpu_s": cpu, "mae": mae, "note": note.strip()}


def phase_refresh(folder: Path) -> dict[str, Any]:
    from sparseeval.core.settings import DEFAULT_K, DEFAULT_METHOD
    from sparseeval.data.matrix import build_matrix
    from sparseeval.data.store import Store
    from sparseeval.estimate.budget import comparison_plan
    from sparseeval.estimate.evaluation import ProtocolConfig, fit_on_split, split_for_seed
    from sparseeval.estimate.fitting import artifact_from_fit
    from sparseeval.publish.champion import baseline_mae, crossfit_coverage, heldout_mae

    work = folder / "refresh"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    steps: dict[str, float] = {}
    t, c0 = time.perf_counter(), _cpu()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        steps[name] = now - t
        t = now

    store = Store(work / "sparseeval.duckdb")  # with its published snapshot, as the pipeline's store
    store.apply_schema()
    report = store.ingest(folder / "unit")
    assert report.ok, report
    lap("ingest")
    matrix = build_matrix(*store.load_long(BENCHMARK, lazy=True), BENCHMARK)
    lap("matrix")
    split = split_for_seed(matrix, 0, ProtocolConfig())
    k = min(DEFAULT_K, len(matrix.items))
    baseline = baseline_mae(matrix, split, k, 0, device="cpu")
    est = fit_on_split(matrix, split, DEFAULT_METHOD, k, 0, device="cpu")
    lap("anchors")
    artifact = artifact_from_fit(matrix, split, est, alpha=0.1, seed=0, models=store.model_metadata(),
                                 settings=store.training_settings(BENCHMARK))
    saved = artifact.save(work / "predictor")
    mae = heldout_mae(matrix, split, est)
    coverage = crossfit_coverage(matrix, split, est, alpha=0.1, seed=0,
                                 mode=saved.calibration.get("mode", "binomial"))
    lap("checks+publish")
    plan = comparison_plan(*matrix.shape)
    total = sum(steps.values())
    note = " ".join(f"{name}={value:.0f}s" for name, value in steps.items())
    note += (f" {DEFAULT_METHOD} K={k} mae={mae:.2f} vs random-linear {baseline:.2f} coverage={coverage};"
             f" comparison plan: {plan.describe()}")
    shutil.rmtree(work, ignore_errors=True)
    return {"seconds": total, "cpu_s": _cpu() - c0, "mae": mae, "note": note}


# -- driver -----------------------------------------------------------------------------------------

def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_child(args: list[str], max_rss_mb: float) -> dict[str, Any]:
    """Run one phase in a fresh interpreter; kill it (and say so) if its RSS passes ``max_rss_mb``
    (the machine is shared: a phase that would blow the budget is stopped, not allowed to swap)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, __file__, *args], stdout=out, stderr=err, text=True)
        t0, peak = time.perf_counter(), 0.0
        while proc.poll() is None:
            peak = max(peak, _rss_mb(proc.pid))
            if peak > max_rss_mb:
                proc.kill()
                proc.wait()
                return {"seconds": time.perf_counter() - t0, "peak_mb": peak,
                        "note": f"KILLED: RSS passed {max_rss_mb:.0f} MB after {time.perf_counter() - t0:.0f} s"}
            time.sleep(0.25)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        return {"seconds": float("nan"), "peak_mb": peak, "note": "FAILED: " + stderr.strip()[-400:]}
    return json.loads(stdout.strip().splitlines()[-1])


def _limit_duckdb_memory(limit: str) -> None:
    """Experiment hook (``--duckdb-memory``): every DuckDB connection of this process gets
    ``memory_limit`` (the store sets none, so DuckDB takes 80 % of the machine's RAM)."""
    import duckdb

    connect = duckdb.connect

    def limited(database: str = ":memory:", read_only: bool = False, config: dict | None = None, **kw: Any) -> Any:
        return connect(database, read_only=read_only, config={**(config or {}), "memory_limit": limit}, **kw)

    duckdb.connect = limited


def fitted_exponents(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per phase: ``seconds ~ N^a M^b`` by least squares on logs (needs three or more sizes)."""
    out = []
    for phase in dict.fromkeys(r["phase"] for r in rows):
        pts = [r for r in rows if r["phase"] == phase and np.isfinite(r["seconds"]) and r["seconds"] > 0]
        sizes = {(r["models"], r["items"]) for r in pts}
        if len(sizes) < 3 or len({n for n, _ in sizes}) < 2 or len({m for _, m in sizes}) < 2:
            continue
        A = np.array([[1.0, np.log(r["models"]), np.log(r["items"])] for r in pts])
        y = np.log([r["seconds"] for r in pts])
        coef, *_ = np.linalg.lstsq(A, y, rcond=None)
        out.append({"phase": phase, "exp_models": round(float(coef[1]), 2), "exp_items": round(float(coef[2]), 2),
                    "sizes": len(sizes)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one small size (CI)")
    ap.add_argument("--sizes", default=None, help="comma-separated NxM (default: the grid up to 7000x30000)")
    ap.add_argument("--fits", default=DEFAULT_FITS, help="method:K,... fitted at every size")
    ap.add_argument("--phases", default="ingest,matrix,fit,refresh")
    ap.add_argument("--workdir", type=Path, default=None, help="data folder, kept and reused (default: temporary)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="CSV of the table (exponents beside it)")
    ap.add_argument("--label", default="", help="a tag stored in every row (e.g. before / after)")
    ap.add_argument("--max-rss-gb", type=float, default=14.0, help="kill a phase above this RSS (default 14)")
    ap.add_argument("--duckdb-memory", default="", help="experiment: memory_limit for every DuckDB connection")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:  # phase folder [method k]
        phase, folder, *rest = args.child
        if args.duckdb_memory:
            _limit_duckdb_memory(args.duckdb_memory)
        folder = Path(folder)
        if phase == "generate":
            n, m = (int(x) for x in rest)
            t0 = time.perf_counter()
            result = generate(folder, n, m, args.seed)
            result["seconds"] = time.perf_counter() - t0
        elif phase == "fit":
            result = phase_fit(folder, rest[0], int(rest[1]))
        else:
            result = {"ingest": phase_ingest, "matrix": phase_matrix, "refresh": phase_refresh}[phase](folder)
        result["peak_mb"] = _peak_rss_mb()
        print(json.dumps(result))
        return 0

    if args.quick:
        sizes = QUICK
        fits = "random-linear:20,sparseeval-linear:20" if args.fits == DEFAULT_FITS else args.fits
    else:
        sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")] if args.sizes else GRID
        fits = args.fits
    fit_list = [(f.split(":")[0], int(f.split(":")[1])) for f in fits.split(",") if f]
    phases = args.phases.split(",")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sparseeval-scale-"))
    rows: list[dict[str, Any]] = []
    limit_mb = args.max_rss_gb * 1024
    child = ["--duckdb-memory", args.duckdb_memory] if args.duckdb_memory else []

    def record(n: int, m: int, phase: str, result: dict[str, Any]) -> None:
        peak = result["peak_mb"]
        row = {"label": args.label, "models": n, "items": m, "phase": phase, "seconds": round(result["seconds"], 2),
               "cpu_s": round(result["cpu_s"], 1) if "cpu_s" in result else None,
               "peak_mb": round(peak) if np.isfinite(peak) else None,
               "mae": round(result["mae"], 3) if "mae" in result else None, "load": _load(),
               "note": result.get("note", "")}
        rows.append(row)
        print(json.dumps(row), flush=True)

    try:
        for n, m in sizes:
            folder = workdir / f"{n}x{m}"
            if not _generated(folder, n, m, args.seed):
                shutil.rmtree(folder, ignore_errors=True)
                record(n, m, "generate", run_child(["--seed", str(args.seed), "--child", "generate", str(folder),
                                                    str(n), str(m)], limit_mb))
            if "ingest" in phases or "matrix" in phases:
                record(n, m, "ingest", run_child([*child, "--child", "ingest", str(folder)], limit_mb))
            if "matrix" in phases:
                record(n, m, "matrix", run_child([*child, "--child", "matrix", str(folder)], limit_mb))
            for old in folder.glob("read.duckdb*"):
                old.unlink()
            if "fit" in phases:
                for method, k in fit_list:
                    record(n, m, f"fit {method} K={k}", run_child(["--child", "fit", str(folder), method, str(k)],
                                                                         limit_mb))
            if "refresh" in phases:
                record(n, m, "refresh", run_child([*child, "--child", "refresh", str(folder)], limit_mb))
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    import polars as pl

    table = pl.DataFrame(rows)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=120, tbl_width_chars=250):
        print(table.drop("note"))
    exponents = fitted_exponents(rows)
    if exponents:
        print(pl.DataFrame(exponents))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.write_csv(args.out)
        if exponents:
            pl.DataFrame(exponents).write_csv(args.out.with_name(args.out.stem + "_exponents.csv"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
