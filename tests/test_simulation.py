"""Twenty simulated days of a deployment through the real sensors and jobs (``tests.simulation``).

New models every day but the quiet ones, a new benchmark, a corrected re-run, a bad file, a settings
change, a benchmark turned to noise and one of noise from the start, ``sparseeval ingest`` between
ticks, anchor-only newcomers, and a refresh killed (SIGKILL) at each of the six publication step
boundaries and retried. After every day the invariants must hold; the day's report names any that
does not: the agreement of DuckDB, the registry and the folders (read directly, and through
``audit()``), every run's outcome, and no sensor request (counted before de-duplication) for a
benchmark whose data and settings did not change.
"""

from pathlib import Path

import pytest

from sparseeval.publishing import FAILPOINTS
from sparseeval.store import Store
from tests.simulation import CYCLE, QUIET, Simulation

pytestmark = pytest.mark.slow


def test_twenty_days_keep_every_invariant(tmp_path: Path) -> None:
    sim = Simulation(tmp_path, days=CYCLE, seed=0)
    reports = sim.play(CYCLE, log=lambda line: None)
    problems = [f"day {r.day}: {v}" for r in reports for v in r.violations]
    assert problems == [], "\n".join(problems)
    assert sim.kill_log == list(FAILPOINTS)  # every publication step boundary was crashed at, and recovered
    for report in reports:
        if report.day % CYCLE in QUIET:
            assert report.runs == report.requests == report.new_versions == 0, report
        elif report.day:
            assert report.runs > 0, report  # new data every other day: something was refreshed
    db = Store(tmp_path / "sparseeval.duckdb")
    roles = dict(db.query("SELECT benchmark, count(*) FROM anchor_sets WHERE role = 'champion' GROUP BY 1").rows())
    assert roles.get("drift") == 1  # turned to noise: rejected since, its earlier champion kept
    assert "noisy" not in roles  # pure noise from the start: never published
    outcomes = [o for r in reports for o in r.outcomes]
    assert ("refresh", "noisy", "rejected") in outcomes and ("ingest", None, "rejected") in outcomes
    assert {o for _, _, o in outcomes} == {"succeeded", "rejected"}  # never an error
    assert db.query("SELECT count(*) FROM fit_decisions WHERE benchmark = 'noisy' AND outcome = 'rejected'").item() >= 1
    # the bad file, and only it, is refused: once per ingest run while it stays in the folder (every
    # attempt is logged, and the run's every_file_accepted check keeps failing until someone removes it)
    refused = db.query("SELECT DISTINCT file, reason FROM ingests WHERE status = 'refused'").rows()
    assert [Path(f).name for f, _ in refused] == ["bad-006.csv"], refused
    assert "1.7" in refused[0][1]
    assert {"arc", "gsm8k", "mmlu", "sparseeval-joint"} <= set(roles)
