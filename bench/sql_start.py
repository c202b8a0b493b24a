"""Start time of ``sparseeval sql`` (and, for scale, of ``sparseeval --help`` and the DuckDB 1.x shell).

    python bench/sql_start.py [--db data/sparseeval.duckdb] [--repeat 7]

Each command runs ``--repeat`` times in a fresh process against the store's snapshot; prints the
median and the fastest wall time. Measured, never asserted (it depends on the machine's load).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sparseeval.core import settings

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # $SPARSEEVAL_DB, else <data dir>/sparseeval.duckdb; a relative path is the repository's
    parser.add_argument("--db", type=Path, default=ROOT / settings.db_path())
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    if not args.db.is_file():
        print(f"{args.db} not found: run `make run` first", file=sys.stderr)
        return 2
    snapshot = args.db.with_name(args.db.name.removesuffix(".duckdb") + ".snapshot.duckdb")
    sql = [sys.executable, "-m", "sparseeval.interfaces.commands.sql", "--db", str(args.db)]
    cases = {
        "python -c pass (interpreter alone)": [sys.executable, "-c", "pass"],
        "sparseeval sql 'SELECT 1'": [*sql, "SELECT 1"],
        "sparseeval sql --csv - (count responses)": [*sql, "--csv", "-", "SELECT count(*) FROM responses"],
        "sparseeval sql --views": [*sql, "--views"],
        "sparseeval --help": [str(BIN / "sparseeval"), "--help"],
    }
    duckdb_cli = BIN / "duckdb" if (BIN / "duckdb").is_file() else shutil.which("duckdb")
    if duckdb_cli:
        cases["duckdb -readonly (1.x shell) 'SELECT 1'"] = [str(duckdb_cli), "-readonly", str(snapshot),
                                                            "-c", "SELECT 1"]
    print(f"{'command':<44} {'median s':>9} {'best s':>8}")
    for name, cmd in cases.items():
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            times.append(time.perf_counter() - t0)
            if done.returncode != 0:
                print(f"{name}: exit {done.returncode}: {done.stderr.strip()[-300:]}", file=sys.stderr)
                return 1
        print(f"{name:<44} {statistics.median(times):>9.3f} {min(times):>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
