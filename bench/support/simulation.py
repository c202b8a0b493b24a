"""A deterministic lifecycle simulation: days of leaderboard arrivals through the real sensors and jobs.

A refresh runs every day for a year, and the state that outlives one run (anchor-set roles, registry
versions and aliases, published folders, sensor cursors, data versions) is only proven by playing
many days against it. Each simulated day writes that day's arrivals from the embedded synthetic
generator (seeded), then **ticks**: evaluates the real sensors of :mod:`pipelines.automation` as the
daemon would (cursors kept, run keys de-duplicated, partitions added) and executes the runs they
request, until they request nothing. After every day it checks the invariants
(:meth:`Simulation.violations`): the product's own ``audit()``, and the same agreement read
directly from DuckDB, the MLflow registry and the published folders; every run's outcome (never
an error; rejected by its checks where the day expects it: the ingest while the bad file stays, a
refresh of a noise benchmark; elsewhere a rejection only as the decision DuckDB recorded); and every
request the sensors made, counted **before** the run-key de-duplication the
daemon does: a benchmark whose data and settings did not change that day must not be asked for at
all (a sensor that keeps asking for a decided refresh is hidden by the de-duplication otherwise).

The days play, in a cycle of 12: new models every day except quiet days; a new benchmark; a corrected
re-run of an old file; a bad file; a settings change; a benchmark turned into pure noise (its champion
must stay) and one of pure noise from the start (never published); ``sparseeval ingest`` into the store
between ticks; anchor-only newcomers; and, on one day, a refresh run in a process of its own killed
(SIGKILL) at every publication step boundary in turn (:data:`sparseeval.publish.publishing.FAILPOINTS`):
killed at the first, retried and killed at the next, each retry starting from the state the last
kill left, until the last retry runs to its end. Why one day of six kills rather than six days of one:
a retry must then recover from a crash in the middle of recovering, and every kill costs one refresh,
not a day of runs (``tests/test_lifecycle.py`` kills a publication at each boundary on its own).

Every day's report says which benchmarks published a new champion (:attr:`DayReport.published`), so
a test can say which days must publish: a refit that is rejected for good from some day on (say, its
coverage checked against a stale alpha) otherwise passes as "a decision recorded in DuckDB".

A killed run is a process of its own, forked from a server that imported Dagster and the pipeline
once (:func:`killable_runs`, multiprocessing's ``forkserver``), so six kills cost six refreshes, not
six interpreter start-ups that import the world. ``python -m bench.support.simulation run-one CONFIG JOB
[PARTITION]`` runs the same code from a shell.
"""

from __future__ import annotations

import contextlib
import functools
import json
import multiprocessing
import multiprocessing.context
import os
import shutil
import signal
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import dagster as dg
import polars as pl

from bench.support.invariants import Invariants
from bench.support.simulation_days import (  # the calendar, importable from here too
    ANCHOR_ONLY,
    BAD_FILE,
    BASE,
    CLI_DAYS,
    CYCLE,
    KILL_DAY,
    NEW_BENCHMARK,
    NOISE_NEW,
    NOISE_TURN,
    QUIET,
    RERUN,
    SETTINGS_CHANGE,
    DayReport,
)
from pipelines.automation import comparison_sensor, joint_sensor, new_results_sensor, stale_benchmarks_sensor
from pipelines.io_managers import MatrixIOManager
from pipelines.resources import SettingsResource, SourceResource, StoreResource, TrackingResource
from sparseeval.core.settings import SETTINGS
from sparseeval.data.store import Store
from sparseeval.data.synthetic import SyntheticLeaderboard, generate_leaderboard, scrambled, write_leaderboard
from sparseeval.publish.publishing import FAILPOINTS

SENSORS = (new_results_sensor, stale_benchmarks_sensor, comparison_sensor, joint_sensor)
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


class Simulation(Invariants):
    """One simulated deployment under ``root`` (its own store, MLflow store, Dagster instance, source)."""

    def __init__(self, root: Path, *, days: int = 40, seed: int = 0, models_per_day: int = 4, k: int = 8,
                 method: str = "sparseeval-linear", kills: bool = True) -> None:
        self.root = Path(root)
        self.seed = seed
        self.kills = kills
        self.models_per_day = models_per_day
        self.source = self.root / "source"
        self.outside = self.root / "cli"
        for folder in (self.source, self.outside, self.root / "dagster"):
            folder.mkdir(parents=True, exist_ok=True)
        self.instance = dg.DagsterInstance.local_temp(tempdir=str(self.root / "dagster"))
        self.settings: dict[str, Any] = {
            "k": k, "method": method, "seed": seed, "compare_methods": "random-linear", "compare_ks": str(k),
            "compare_seeds": 1, "predictor_dir": str(self.root / "predictors"), "joint_benchmarks": "arc,gsm8k"}
        families = (96 + models_per_day * days) // 8 + 1
        self.world = generate_leaderboard(n_families=families, models_per_family=8,
                                          benchmarks={"arc": 40, "gsm8k": 30, "mmlu": 30, "drift": 40}, seed=seed)
        self.noise_world = scrambled(generate_leaderboard(n_families=40, models_per_family=8,
                                                          benchmarks={"noisy": 30}, seed=seed + 1), seed=seed + 2)
        self.order = self.world.models.get_column("model").to_list()
        self.released = 96
        self.cursors: dict[str, str | None] = {}
        self.used_keys: set[str] = set()
        self.history: dict[str, Any] = {}
        #: publication step boundaries still to kill a refresh at, in order (every one on the kill day;
        #: those a refresh did not reach, because it published nothing, carried over to the next refresh)
        self.pending_kills: list[str] = []
        #: (day, partition, boundary) of every kill
        self.kill_log: list[tuple[int, str | None, str]] = []
        #: publication ids of the champion publications finished so far
        self.done_publications: set[int] = set()
        self.violation_counts: Counter[str] = Counter()
        #: the day's requests as the sensors made them (before de-duplication): (job, partition) -> count
        self.requests: Counter[tuple[str, str | None]] = Counter()

    # --- configuration ---------------------------------------------------------------------------

    def resources(self) -> dict[str, Any]:
        return {
            "store": StoreResource(path=str(self.root / "sparseeval.duckdb")),
            "tracking": TrackingResource(data_dir=str(self.root)),
            "source": SourceResource(path=str(self.source)),
            "settings": SettingsResource(**self.settings),
            "io_manager": MatrixIOManager(base_dir=str(self.root / "io")),
        }

    def definitions(self) -> dg.Definitions:
        from pipelines.definitions import build_definitions

        return build_definitions(self.resources())

    @property
    def store(self) -> Store:
        return Store(self.root / "sparseeval.duckdb")

    # --- the world's arrivals ----------------------------------------------------------------------

    def _slice(self, lb: SyntheticLeaderboard, models: list[str], benchmarks: list[str]) -> SyntheticLeaderboard:
        keep = (pl.col("model").is_in(models)) & (pl.col("benchmark").is_in(benchmarks))
        return replace(lb, responses=lb.responses.filter(keep), scores=lb.scores.filter(keep),
                       models=lb.models.filter(pl.col("model").is_in(models)))

    def _benchmarks(self, day: int) -> list[str]:
        return [*BASE, *(["mmlu"] if day % CYCLE >= NEW_BENCHMARK or day >= CYCLE else [])]

    def _drift_noise(self, lb: SyntheticLeaderboard, day: int) -> SyntheticLeaderboard:
        """``drift`` answers are pure noise from its turning day on (a broken harness)."""
        if day % CYCLE < NOISE_TURN and day < CYCLE:
            return lb
        noisy = scrambled(self._slice(lb, lb.models.get_column("model").to_list(), ["drift"]), seed=self.seed + day)
        rest = self._slice(lb, lb.models.get_column("model").to_list(), [b for b in self._benchmarks(day)
                                                                          if b != "drift"])
        return replace(lb, responses=pl.concat([rest.responses, noisy.responses]),
                       scores=pl.concat([rest.scores, noisy.scores]))

    def _new_models(self, day: int) -> list[str]:
        start = self.released
        self.released = min(len(self.order), start + self.models_per_day)
        return self.order[start:self.released]

    def arrive(self, day: int) -> list[str]:
        """Write the day's arrivals; return what happened (the day's events)."""
        phase = day % CYCLE
        events = []
        if day == 0:
            lb = self._slice(self.world, self.order[:self.released], self._benchmarks(0))
            write_leaderboard(lb, self.source / "day-000")
            return ["initial leaderboard"]
        if phase in QUIET:
            return ["quiet (no new data)"]
        if phase == NEW_BENCHMARK and day < CYCLE:
            lb = self._slice(self.world, self.order[:self.released], ["mmlu"])
            write_leaderboard(lb, self.source / f"day-{day:03d}-mmlu")
            events.append("new benchmark mmlu")
        if phase == RERUN:
            target = self.source / "day-001"
            if target.is_dir():
                lb = pl.read_parquet(target / "responses.parquet")
                first = lb.get_column("model")[0]
                flipped = lb.with_columns(correct=pl.when(pl.col("model") == first).then(1 - pl.col("correct"))
                                          .otherwise(pl.col("correct")).cast(pl.Int8))
                flipped.write_parquet(target / "responses.parquet.tmp")
                os.replace(target / "responses.parquet.tmp", target / "responses.parquet")
                events.append(f"corrected re-run of day-001 ({first}'s answers)")
        if phase == BAD_FILE:
            (self.source / f"bad-{day:03d}.csv").write_text("model,benchmark,item_id,score\nbroken,arc,1,1.7\n")
            events.append("bad file (score 1.7)")
        if phase == SETTINGS_CHANGE:
            self.settings["alpha"] = 0.2 if self.settings.get("alpha", 0.1) == 0.1 else 0.1
            events.append(f"settings change: alpha {self.settings['alpha']}")
        if phase == NOISE_TURN:
            # every drift file so far re-run with noise: the same paths, new bytes (each supersedes its run)
            for folder in sorted(self.source.glob("day-*")):
                lb = pl.read_parquet(folder / "responses.parquet")
                if lb.filter(pl.col("benchmark") == "drift").height:
                    models = lb.get_column("model").unique().to_list()
                    part = self._slice(self.world, models, [b for b in self._benchmarks(day)
                                                            if b in lb.get_column("benchmark").unique()])
                    write_leaderboard(self._drift_noise(part, day), folder)
            events.append("drift turned to pure noise (re-run of its files)")
        if phase == NOISE_NEW and day < CYCLE:
            write_leaderboard(self._slice(self.noise_world, self.noise_world.models.get_column("model").to_list()[:96],
                                          ["noisy"]), self.source / f"day-{day:03d}-noisy")
            events.append("new benchmark of pure noise")
        if phase in ANCHOR_ONLY:
            events += self._anchor_only(day)
        models = self._new_models(day)
        if models:
            # new models for half the benchmarks each day (the joint pair on even days): every day brings
            # models, and a day refreshes two benchmarks, not all
            pair = ["arc", "gsm8k"] if day % 2 == 0 else [b for b in self._benchmarks(day) if b in ("drift", "mmlu")]
            lb = self._drift_noise(self._slice(self.world, models, pair), day)
            if phase in CLI_DAYS:
                write_leaderboard(lb, self.outside / f"day-{day:03d}")
                from sparseeval.interfaces.cli import main as cli

                if cli(["-q", "ingest", str(self.outside / f"day-{day:03d}"), "--db",
                        str(self.root / "sparseeval.duckdb")]) != 0:
                    raise RuntimeError(f"day {day}: the CLI ingest failed")
                events.append(f"{len(models)} new models by 'sparseeval ingest'")
                # one of them refreshed by the command line too: the library's refresh without Dagster, whose
                # decision the sensors must then see as made
                with self._cli_settings():
                    code = cli(["-q", "refresh", "--db", str(self.root / "sparseeval.duckdb"), "--benchmark", pair[0],
                                "--registry", self.settings["predictor_dir"]])
                if code not in (0, 1):  # 1: a proposal failed its checks (a noisy benchmark), which is an outcome
                    raise RuntimeError(f"day {day}: the CLI refresh failed ({code})")
                events.append(f"{pair[0]} refreshed by 'sparseeval refresh'")
            else:
                write_leaderboard(lb, self.source / f"day-{day:03d}")
                events.append(f"{len(models)} new models")
        return events

    @contextlib.contextmanager
    def _cli_settings(self) -> Any:
        """The simulated deployment's settings as the command line reads them (``$SPARSEEVAL_*``)."""
        names = ("k", "method", "seed", "alpha", "compare_methods", "compare_ks", "compare_seeds", "joint_benchmarks")
        wanted = {SETTINGS[name].env: str(self.settings[name]) for name in names if name in self.settings}
        wanted["SPARSEEVAL_DATA_DIR"] = str(self.root)
        # the MLflow store the resources use, named: an inherited $MLFLOW_TRACKING_URI would send the CLI elsewhere
        wanted["MLFLOW_TRACKING_URI"] = self.resources()["tracking"].config().resolved_tracking_uri
        with mock.patch.dict(os.environ, wanted):  # restored afterwards, whatever the command did
            yield

    def _anchor_only(self, day: int) -> list[str]:
        """A newcomer that ran only arc's published anchors (no full score)."""
        current = self.store.champion("arc")
        if current is None:
            return []
        name = f"newcomer/day-{day:03d}"
        frame = pl.DataFrame({"model": name, "benchmark": "arc", "item_id": current["items"],
                              "correct": [(i + day) % 2 for i in range(len(current["items"]))]})
        frame.write_csv(self.source / f"anchors-{day:03d}.csv")
        return [f"anchor-only newcomer {name}"]

    # --- ticks -----------------------------------------------------------------------------------------

    def tick(self, day: int) -> int:
        """Evaluate the sensors and run what they request, until they request nothing; the runs made."""
        defs = self.definitions()
        resources = self.resources()
        runs = 0
        for _ in range(12):
            requests = []
            for sensor in SENSORS:
                context = dg.build_sensor_context(instance=self.instance, instance_ref=self.instance.get_ref(),
                                                  cursor=self.cursors.get(sensor.name),
                                                  definitions=defs, resources=resources)
                data = sensor.evaluate_tick(context)
                self.cursors[sensor.name] = data.cursor
                for added in data.dynamic_partitions_requests or []:
                    self.instance.add_dynamic_partitions(added.partitions_def_name, list(added.partition_keys))
                for request in data.run_requests or []:
                    self.requests[(sensor.job_name, request.partition_key)] += 1
                    if request.run_key not in self.used_keys:  # the daemon launches a run key once
                        self.used_keys.add(request.run_key)
                        requests.append((sensor.job_name, request))
            if not requests:
                return runs
            for job, request in requests:
                self._execute(defs, job, request, day)
                runs += 1
        raise RuntimeError(f"day {day}: the sensors still request runs after 12 ticks")

    def _execute(self, defs: dg.Definitions, job: str, request: dg.RunRequest, day: int) -> None:
        tags = {**request.tags, "dagster/run_key": request.run_key or ""}
        while self.pending_kills and job == "refresh":  # killed at the next boundary, retried, until none is left
            ended = self._run_killed(job, request.partition_key, self.pending_kills[0], day)
            if ended is None:
                self.pending_kills.pop(0)
            else:  # it ran to its end without publishing anything: that was the run, and this its outcome
                self.last_results.append((job, request.partition_key, ended))
                return
        result = defs.resolve_job_def(job).execute_in_process(
            instance=self.instance, partition_key=request.partition_key, tags=tags, raise_on_error=False,
            run_config=QUIET_LOGS)
        self.last_results.append((job, request.partition_key, run_outcome(result)))

    def _run_killed(self, job: str, partition: str | None, point: str, day: int) -> str | None:
        """The run in a process of its own that SIGKILLs itself at ``point``; its run is then marked failed (what
        Dagster's run monitoring does with a dead run worker), None is returned and the caller retries
        it. When the run ended by itself (it published nothing, so it never reached ``point``): its
        outcome (:func:`run_outcome`, written by that process; asserted like any run's)."""
        config = self.root / "config.json"
        config.write_text(json.dumps({"root": str(self.root), "settings": self.settings}))
        proc = killable_runs().Process(target=_run_one_at, args=(str(config), job, partition or "", point))
        proc.start()
        proc.join(600)
        if proc.is_alive():
            proc.kill()
            raise RuntimeError(f"the run to be killed at {point} ran past 600 s")
        if proc.exitcode != -signal.SIGKILL:
            outcome = self.root / "outcome.json"
            if proc.exitcode not in (0, 1) or not outcome.is_file():  # died otherwise: no outcome written
                raise RuntimeError(f"the run to be killed at {point} died (exit {proc.exitcode}; its stderr is "
                                   "the test's)")
            ended = json.loads(outcome.read_text())["outcome"]
            outcome.unlink()
            return ended
        for record in self.instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
            self.instance.report_run_failed(record.dagster_run)
        self.kill_log.append((day, partition, point))
        return None

    # --- the whole run -----------------------------------------------------------------------------

    def published_today(self) -> set[str]:
        """The benchmarks whose champion publication finished since the last call."""
        rows = self.store.query("SELECT publication_id, benchmark FROM publications WHERE step = 'done' "
                                "AND alias = 'champion'").rows()
        new = {bench for pid, bench in rows if pid not in self.done_publications}
        self.done_publications |= {pid for pid, _ in rows}
        return new

    def play(self, days: int, *, log: Any = print) -> list[DayReport]:
        reports = []
        versions: dict[str, int] = {}
        for day in range(days):
            t0 = time.perf_counter()
            self.last_results: list[tuple[str, str | None, str]] = []
            self.requests.clear()
            if self.kills and day % CYCLE == KILL_DAY:
                self.pending_kills.extend(FAILPOINTS)
            data_before, settings_before = self.store.data_versions() if day else {}, dict(self.settings)
            events = self.arrive(day)
            runs = self.tick(day)
            data_after = self.store.data_versions()
            changed = set(data_after) if settings_before != self.settings else \
                {b for b, v in data_after.items() if data_before.get(b) != v}
            quiet = day % CYCLE in QUIET and day > 0
            problems = self.violations(quiet=quiet, versions_before=versions, day=day, changed=changed)
            new_versions = sum(self.versions.values()) - sum(versions.values())
            versions = dict(self.versions)
            for problem in problems:
                self.violation_counts[problem.split(":", 1)[0]] += 1
            report = DayReport(day, events, runs, new_versions, time.perf_counter() - t0, problems,
                               sum(self.requests.values()), list(self.last_results), self.published_today())
            reports.append(report)
            log(f"day {day:3d} {report.seconds:5.1f} s  runs {runs:2d}  new versions {new_versions:2d}  "
                f"violations {len(problems)}  {'; '.join(events)}; published {sorted(report.published) or 'none'}")
            for problem in problems:
                log(f"          ! {problem}")
        return reports


def run_outcome(result: dg.ExecuteInProcessResult) -> str:
    """``succeeded`` (every step and check passed); ``rejected`` when what failed are asset checks
    alone (a decision: the publishing checks, or the ingest's every-file-accepted check, said no; a
    blocking one fails its step); ``error`` for any other failure."""
    events = result.all_events
    checks_failed = any(e.event_type_value == "ASSET_CHECK_EVALUATION" and not e.event_specific_data.passed
                        for e in events)
    errors = [e.event_specific_data.error for e in events if e.event_type_value == "STEP_FAILURE"]
    if any(err is None or err.cls_name != "DagsterAssetCheckFailedError" for err in errors) or \
            (not result.success and not errors):
        return "error"
    return "rejected" if checks_failed or errors else "succeeded"


@functools.cache
def killable_runs() -> multiprocessing.context.ForkServerContext:
    """Where killed runs start: multiprocessing's fork server, which imports Dagster, the pipeline's
    definitions and this module once, then forks a fresh process per run (which then SIGKILLs itself at
    its failpoint). Why not a plain subprocess: each would spend seconds importing the same modules, the
    larger part of a killed run. Why not ``fork`` from this process: it holds DuckDB, SQLite and torch
    thread state that a child must not inherit; the server has run no code but imports."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["bench.support.simulation", "pipelines.definitions"])
    return context


def _run_one_at(config_path: str, job: str, partition: str, point: str) -> None:
    """A killed run's process (:func:`killable_runs`): :func:`_run_one` with ``point`` as its failpoint;
    exits 0 or 1 when it ran to its end without reaching ``point``."""
    os.environ["SPARSEEVAL_FAILPOINT"] = point
    sys.exit(_run_one(config_path, job, partition))


def _run_one(config_path: str, job: str, partition: str) -> int:
    """A killed run: the same instance and stores, one job (it SIGKILLs itself at its failpoint)."""
    config = json.loads(Path(config_path).read_text())
    sim = Simulation.__new__(Simulation)
    sim.root = Path(config["root"])
    sim.source = sim.root / "source"
    sim.settings = config["settings"]
    instance = dg.DagsterInstance.local_temp(tempdir=str(sim.root / "dagster"))
    result = sim.definitions().resolve_job_def(job).execute_in_process(
        instance=instance, partition_key=partition or None, raise_on_error=False, run_config=QUIET_LOGS)
    (sim.root / "outcome.json").write_text(json.dumps({"outcome": run_outcome(result)}))
    return 0 if result.success else 1


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    play = sub.add_parser("play", help="simulate days and print a line per day")
    play.add_argument("--days", type=int, default=40)
    play.add_argument("--seed", type=int, default=0)
    play.add_argument("--root", type=Path, required=True)
    play.add_argument("--no-kills", action="store_true")
    one = sub.add_parser("run-one")
    one.add_argument("config")
    one.add_argument("job")
    one.add_argument("partition", nargs="?", default="")
    args = ap.parse_args(argv)
    if args.command == "run-one":
        return _run_one(args.config, args.job, args.partition)
    shutil.rmtree(args.root, ignore_errors=True)
    sim = Simulation(args.root, days=args.days, seed=args.seed, kills=not args.no_kills)
    t0 = time.perf_counter()
    reports = sim.play(args.days)
    total = sum(len(r.violations) for r in reports)
    print(f"\n{args.days} days in {time.perf_counter() - t0:.0f} s: {sum(r.runs for r in reports)} runs, "
          f"{sum(r.new_versions for r in reports)} registry versions, kills at "
          f"{', '.join(f'{p} (day {d}, {b})' for d, b, p in sim.kill_log) or 'none'}; "
          f"violations: {total} {dict(sim.violation_counts)}")
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
