"""Shared fixtures: a fresh DuckDB path, the real openllm_v1 data, and a small long-format folder.

Also three settings that only make the test processes faster (``make test-fast`` runs two
pytest-xdist workers on two cores): threads per worker, and garbage collection around collection
and at exit; and Ctrl-C as in a terminal, whoever launched the suite. Nothing heavy is imported here,
so the xdist controller starts its workers sooner; fixtures import what they need.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import signal
from collections.abc import Callable, Generator
from pathlib import Path

import pytest


def _share_cores_between_xdist_workers() -> None:
    """Under pytest-xdist, give each worker its share of the cores for torch/OpenMP/BLAS threads.

    Every worker would otherwise start as many spinning OpenMP threads as there are cores, so
    ``-n 2`` on two cores runs four busy threads that mostly wait for each other (see
    :func:`sparseeval.estimate.methods.device.cpu_threads`). Runs at import, before any test module imports torch or
    NumPy, and only sets what the caller has not chosen; the subprocesses tests start inherit it.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if not os.environ.get("PYTEST_XDIST_WORKER") or workers < 1:
        return
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    share = str(max(1, cpus // workers))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "SPARSEEVAL_THREADS"):
        os.environ.setdefault(var, share)


_share_cores_between_xdist_workers()


def _ctrl_c_as_in_a_terminal() -> None:
    """Python's own Ctrl-C handling in the test processes, so in every process they start.

    A suite launched as a background job of a script (``.ci/run &``, a CI runner's shell) starts with
    SIGINT *ignored*, and an ignored SIGINT survives exec: a child then never sees the Ctrl-C a test sends
    it, except when one lands inside a DuckDB statement, whose own handler catches it. The Ctrl-C tests
    then passed or failed by timing (seen: ``test_ctrl_c_stops_the_ingest_and_records_it_as_interrupted``
    read all 40 units and exited 0). A handled SIGINT is reset to the default on exec, and a Python child
    started with the default installs its KeyboardInterrupt, as in a terminal.
    """
    with contextlib.suppress(ValueError):  # not the main thread: leave it as it is
        signal.signal(signal.SIGINT, signal.default_int_handler)


_ctrl_c_as_in_a_terminal()


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, object, object]:
    """Collect with the cyclic garbage collector paused, then collect once and freeze the survivors.

    Collecting imports torch, scikit-learn and the rest (~300k long-lived objects); the collector
    ran ~10 full passes over them during those imports (~1.3 s of CPU in every xdist worker) and
    would re-scan them in every later full pass. One pass at the end frees the garbage the imports
    made; objects created by the tests are collected as usual.
    """
    gc.disable()
    try:
        return (yield)
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()


#: the longest test files, started first: under ``-n 2 --dist loadfile`` (``make test``) one worker
#: plays the simulated days while the other runs everything else, instead of both finishing on them
LONGEST_FIRST = ("test_simulation.py", "test_serve.py", "test_lm_eval_probe.py", "test_daemon.py",
                 "test_lm_eval_task.py", "test_pipeline.py", "test_pipeline_joint.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the longest files first (a stable sort: the order inside a file is kept)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# Interpreter shutdown with torch and friends loaded spends ~1.3 s in garbage-collector passes
# over every object (each worker, at the end of the run). Freezing them first skips those passes;
# it runs after pytest has finished (its own last gc.collect() for unraisable exceptions included).
atexit.register(gc.freeze)


@pytest.fixture(autouse=True)
def _mlflow_tracking_uri_restored() -> Generator[None, None, None]:
    """``mlflow.set_tracking_uri`` also sets ``$MLFLOW_TRACKING_URI`` for the whole process, which the
    command line then obeys: a test that calls it would send a later test's CLI runs (same xdist worker)
    into its own, deleted, registry. Restore the variable after every test."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)  # (the library never uses MLflow's global URI)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before


@pytest.fixture
def tmp_db(tmp_path: Path) -> Path:
    """Path of a DuckDB file that does not exist yet (the store creates it)."""
    return tmp_path / "db" / "sparseeval.duckdb"


@pytest.fixture(scope="session")
def openllm_dir() -> Path:
    """The real Open LLM Leaderboard v1 sample shipped next to the repository, or skip."""
    from tests.support import OPENLLM_DIR

    if not (OPENLLM_DIR / "responses.parquet").exists():
        if os.environ.get("CI"):  # CI has the data: its absence there is a failure, never a silent skip
            pytest.fail(f"real data not found at {OPENLLM_DIR} (CI is set)")
        pytest.skip(f"real data not found at {OPENLLM_DIR}")
    return OPENLLM_DIR


@pytest.fixture
def small_long_dir(tmp_path: Path) -> Path:
    """``responses.parquet`` + ``scores.parquet`` + ``models.csv`` for 12 models x 2 benchmarks x 8 items."""
    import polars as pl

    from tests.support import SMALL_MODELS, make_long_frames

    folder = tmp_path / "small_long"
    folder.mkdir()
    responses, scores = make_long_frames()
    responses.write_parquet(folder / "responses.parquet")
    scores.write_parquet(folder / "scores.parquet")
    pl.DataFrame({
        "model": responses.get_column("model").unique().sort(),
        "submitted_at": [f"2024-01-{d + 1:02d}" for d in range(SMALL_MODELS)],
        "n_params": [7e9] * SMALL_MODELS,
    }).write_csv(folder / "models.csv")
    return folder


@pytest.fixture
def db_fingerprint() -> Callable[[Path], dict[str, tuple[int, int]]]:
    """(row count, order-independent hash of all rows) per data table of a store, read from the file.

    ``ingests`` is left out: a refusal is *supposed* to add its audit row there.
    """
    import duckdb

    from sparseeval.data.store import TABLES

    def fingerprint(db: Path) -> dict[str, tuple[int, int]]:
        con = duckdb.connect(str(db), read_only=True)
        try:
            return {t: con.sql(f"SELECT count(*), coalesce(bit_xor(hash(x)), 0) FROM {t} x").fetchall()[0]
                    for t in (*TABLES, "response_rows", "ingest_notes") if t != "ingests"}
        finally:
            con.close()

    return fingerprint


@pytest.fixture(scope="session")
def synthetic_matrix():
    """A small synthetic leaderboard benchmark as a ResponseMatrix (160 models x ~90 items)."""
    import polars as pl

    from sparseeval.data.matrix import build_matrix
    from sparseeval.data.synthetic import generate_leaderboard

    lb = generate_leaderboard(n_families=16, models_per_family=10, benchmarks={"arc": 150}, seed=3)
    responses = lb.responses.rename({"correct": "score"}).with_columns(pl.col("score").cast(pl.Float64))
    return build_matrix(responses, lb.scores, "arc")


@pytest.fixture(scope="session")
def openllm_parsed(openllm_dir: Path):
    """The real data read once per session through the project's own reader."""
    from sparseeval.data.access.sources import read_data

    return read_data(openllm_dir)
