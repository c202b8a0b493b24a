"""``make run``'s code path, then the real ``dagster-daemon`` as a subprocess on the same instance.

``make run`` (``pipelines.run_all``: the Definitions with ``default_resources()`` read from the
environment, the shipped ``pipelines/dagster.yaml``) at a small size; then the daemon, with a short
sensor interval: on unchanged data it launches nothing (asserted only once the daemon has recorded
ticks of every sensor, each skipped as up to date: a daemon that never evaluated a sensor launches
nothing too); after a new result file it runs one ingest, then the refresh of exactly the benchmark
that changed (its comparison deferred to the weekly schedule: few of its models are new), and nothing
else (asserted once every sensor has recorded two more finished ticks after the refresh ended, not
after a sleep: a slow machine's sleep proves nothing, a fast one's wastes time).
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

from sparseeval.data.synthetic import generate_leaderboard, write_leaderboard
from tests.test_pipeline import _renamed

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "DAGSTER_HOME": str(tmp / "dagster_home"), "SPARSEEVAL_DATA_DIR": str(tmp / "data"),
            "SPARSEEVAL_SOURCE": str(tmp / "source"), "SPARSEEVAL_K": "8", "SPARSEEVAL_METHOD": "sparseeval-linear",
            "SPARSEEVAL_COMPARE_METHODS": "random-linear", "SPARSEEVAL_COMPARE_KS": "8",
            "SPARSEEVAL_COMPARE_SEEDS": "1", "SPARSEEVAL_JOINT_BENCHMARKS": "none",
            "SPARSEEVAL_SENSOR_INTERVAL": "2", "SPARSEEVAL_THREADS": "1", "PYTHONPATH": str(REPO)}


def _runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    return [r.dagster_run for r in instance.get_run_records()]


#: the sensors that read the local source and the store (the Hub sensor has no source configured here)
SENSORS = ("new_results_sensor", "stale_benchmarks_sensor", "joint_sensor", "comparison_sensor")


def _ticks(instance: dg.DagsterInstance) -> dict[str, list]:
    """sensor -> the ticks the daemon recorded (newest first)."""
    from dagster._core.scheduler.instigation import InstigatorType

    return {state.instigator_name: list(instance.get_ticks(state.instigator_origin_id, state.selector_id))
            for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)}


def _await_ticks(instance: dg.DagsterInstance, daemon: subprocess.Popen, *, after: float, n: int,
                 timeout: float) -> dict[str, list]:
    """Poll until the daemon has recorded ``n`` finished ticks (not ``STARTED``: a tick in progress may
    still launch a run) of every sensor of :data:`SENSORS` that began after ``after`` (a Unix time); those
    ticks, by sensor. Fails when the daemon dies or ``timeout`` seconds pass."""
    from dagster._core.scheduler.instigation import TickStatus

    deadline = time.monotonic() + timeout
    while True:
        ticks = {name: [t for t in found if t.status != TickStatus.STARTED and t.timestamp > after]
                 for name, found in _ticks(instance).items() if name in SENSORS}
        if all(len(ticks.get(name, [])) >= n for name in SENSORS):
            return ticks
        assert daemon.poll() is None, "the daemon died"
        assert time.monotonic() < deadline, f"not {n} ticks of every sensor after {after} in {timeout} s: {ticks}"
        time.sleep(0.5)


def _wait(instance: dg.DagsterInstance, done, timeout: float, daemon: subprocess.Popen) -> list[dg.DagsterRun]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = _runs(instance)
        if done(runs):
            return runs
        assert daemon.poll() is None, "the daemon died"
        time.sleep(1.0)
    raise AssertionError(f"timed out; runs: {[(r.job_name, r.tags.get('dagster/partition'), r.status) for r in runs]}")


def test_daemon_after_make_run_launches_nothing_then_refreshes_only_what_a_new_file_changed(tmp_path: Path) -> None:
    env = _env(tmp_path)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "pipelines" / "dagster.yaml", home / "dagster.yaml")  # what make does
    lb = generate_leaderboard(n_families=12, models_per_family=8, benchmarks={"arc": 60, "gsm8k": 50}, seed=2)
    write_leaderboard(lb, tmp_path / "source" / "first")
    made = subprocess.run([sys.executable, "-m", "pipelines.run_all"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    assert "refresh finished in" in made.stdout and "FAILED" not in made.stdout
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    before = len(_runs(instance))
    # make run: one ingest, one refresh per benchmark, the joint job, then each benchmark's first comparison
    assert sorted(r.job_name for r in _runs(instance)) == ["compare", "compare", "ingest", "joint", "refresh",
                                                            "refresh"]
    daemon = subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w",
                               str(REPO / "workspace.yaml")],
                              cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        # every sensor evaluated twice on unchanged data (recorded ticks, not a sleep), each skipped: no run
        from dagster._core.scheduler.instigation import TickStatus

        _await_ticks(instance, daemon, after=0.0, n=2, timeout=180)
        ticks = _ticks(instance)
        assert {name: {t.status for t in ticks[name]} for name in SENSORS} == {name: {TickStatus.SKIPPED}
                                                                               for name in SENSORS}
        assert all("up to date" in t.skip_reason for t in ticks["stale_benchmarks_sensor"]), \
            [t.skip_reason for t in ticks["stale_benchmarks_sensor"]]
        assert len(_runs(instance)) == before, "the daemon launched a run on unchanged data"
        # a new file with new arc models: one ingest, then the refresh of arc alone (8 new models of 104: its
        # comparison waits for the weekly schedule)
        more = _renamed(generate_leaderboard(n_families=2, models_per_family=4, benchmarks={"arc": 60}, seed=8), "-new")
        write_leaderboard(more, tmp_path / "staging")
        for f in (tmp_path / "staging").iterdir():  # renamed into place: the sensor never sees half a unit
            (tmp_path / "source" / "second").mkdir(exist_ok=True)
            os.replace(f, tmp_path / "source" / "second" / f.name)

        finished = (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE)

        def refreshed(runs: list[dg.DagsterRun]) -> bool:
            return any(r.job_name == "refresh" and r.status in finished for r in runs[: len(runs) - before])

        _wait(instance, refreshed, 300, daemon)
        # nothing else follows: every sensor evaluated twice more after the refresh ended (recorded ticks;
        # a tick that launches a run has launched it by the time it is recorded as finished), no new run
        records = instance.get_run_records()
        ended = max(r.end_time or 0.0 for r in records[: len(records) - before])
        _await_ticks(instance, daemon, after=ended, n=2, timeout=120)
        new = _runs(instance)[: len(_runs(instance)) - before]
        assert sorted((r.job_name, r.tags.get("dagster/partition")) for r in new) == [("ingest", None),
                                                                                      ("refresh", "arc")]
        assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in new), [(r.job_name, r.status) for r in new]
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
