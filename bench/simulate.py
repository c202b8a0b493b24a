"""A year of daily refreshes, simulated: ``python bench/simulate.py --days 365``.

Plays ``bench.support.simulation`` (the real sensors and jobs, a seeded synthetic leaderboard's daily
arrivals, crashes at every publication step boundary) and prints one line per day: seconds, runs, new
registry versions, invariant violations; then the totals. Exit status 1 when any invariant broke.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the harness: bench/support/simulation.py

from bench.support.simulation import main

if __name__ == "__main__":
    sys.exit(main(["play", *(sys.argv[1:] or ["--days", "60"]), *([] if "--root" in sys.argv else
                                                                  ["--root", "data/simulation"])]))
