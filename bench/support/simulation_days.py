"""The simulated deployment's calendar (which day of the cycle brings what) and its daily report: shared by
the simulation (:mod:`.simulation`), its invariants (:mod:`.invariants`) and the test that plays it."""

from __future__ import annotations

from dataclasses import dataclass, field

#: the cycle of special days (day % CYCLE); every other day brings new models
CYCLE = 12
NEW_BENCHMARK, RERUN, BAD_FILE, SETTINGS_CHANGE, NOISE_TURN, NOISE_NEW = 3, 5, 6, 7, 8, 9
#: the day the first refresh that publishes is killed at every publication step boundary in turn: a
#: champion replaced (arc's, with an anchor-only newcomer to score after it), not a first publication
KILL_DAY = 5
QUIET = {4, 11}
CLI_DAYS = {2, 9}
ANCHOR_ONLY = {5, 10}
BASE = ("arc", "gsm8k", "drift")


@dataclass
class DayReport:
    day: int
    events: list[str]
    runs: int
    new_versions: int
    seconds: float
    violations: list[str] = field(default_factory=list)
    #: requests the sensors made, before de-duplication
    requests: int = 0
    #: (job, partition, outcome) of every run (:func:`run_outcome`)
    outcomes: list[tuple[str, str | None, str]] = field(default_factory=list)
    #: the benchmarks (``sparseeval-joint`` for the joint predictor) whose champion publication finished
    #: that day (DuckDB's ``publications``, step ``done``)
    published: set[str] = field(default_factory=set)
