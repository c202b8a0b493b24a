"""A leaderboard's daily refresh, replayed: day 1 (the whole leaderboard) and day 2 (new models in a new
folder) through the real pipeline (``python -m pipelines.run_all``), per phase: seconds and peak RSS.

Data: ``bench/scale.py``'s synthetic leaderboard (documented there; one benchmark, seed ``--seed``):
day 1 is ``N x M`` in ``<workdir>/data/day1``, day 2 adds ``--new`` models answering the same items in
``<workdir>/data/day2`` (same item parameters; the new models' abilities from their own seeded stream).
Day 1's source is the day-1 folder; day 2's is both folders (``SPARSEEVAL_SOURCE=day1,day2``), as a
leaderboard that drops each day's results into a new folder.

Each design runs in a fresh data folder and Dagster instance: ``after`` is this checkout; ``before``
(``--before DIR``) is another checkout of the code (``git worktree add DIR main``), run the same way with
``PYTHONPATH=DIR``, so both are side by side in one table. Per day the whole ``run_all`` process is one
child: its peak RSS is ``ru_maxrss``; per phase (each Dagster step of each run, from the instance's event
log) the seconds and the peak of the RSS sampled every 0.2 s while the step ran. ``published`` is the
time from the day's start to the champion's materialization (the publication). Figures depend on the
machine's load: the 1-minute load average is recorded with every row.

    python bench/days.py --quick                               # 300 x 1,000 + 20 new: a minute
    python bench/days.py --before /tmp/main-code --out docs/results/days.csv   # 7,000 x 30,000 + 100
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
import threading
import time
from pathlib import Path
from typing import Any

from scale import _generated, generate

REPO = Path(__file__).resolve().parents[1]


_TICK = os.sysconf("SC_CLK_TCK")


def _usage(pid: int) -> tuple[float, float]:
    """(RSS in MB, CPU seconds so far: user + system, every thread) of a running process."""
    try:
        rss = next((int(line.split()[1]) / 1024 for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("VmRSS:")), 0.0)
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return rss, (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return 0.0, 0.0


def run_day(code: Path, root: Path, source: str, log: Path) -> dict[str, Any]:
    """``python -m pipelines.run_all`` of ``code`` on ``root`` (its data folder and Dagster home) with
    ``source``; the RSS samples, the wall seconds, the process' peak RSS and its exit status."""
    home = root / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(code / "pipelines" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "SPARSEEVAL_DATA_DIR": str(root / "data"),
           "SPARSEEVAL_SOURCE": source, "PYTHONPATH": str(code)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    samples: list[tuple[float, float, float]] = []
    t0 = time.time()
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pipelines.run_all"], cwd=code, env=env, stdout=out,
                                stderr=subprocess.STDOUT)

        def sample() -> None:
            while proc.poll() is None:
                samples.append((time.time(), *_usage(proc.pid)))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rc = proc.wait()
        sampler.join()
    seconds = time.time() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"t0": t0, "seconds": seconds, "rc": rc, "samples": samples,
            "cpu_s": max((c for _, _, c in samples), default=0.0),
            # ru_maxrss of children is the largest child so far: exact when this day is the largest
            "peak_mb": max(peak / 1024 if peak > before else 0.0, max((r for _, r, _ in samples), default=0.0))}


def phases(home: Path, t0: float, samples: list[tuple[float, float, float]]) -> list[dict[str, Any]]:
    """Every step of every run started since ``t0`` in the Dagster instance at ``home``: when it
    started (seconds after ``t0``), how long it ran, the CPU seconds and peak sampled RSS meanwhile,
    and when each asset materialized."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(home)
    rows = []
    with dg.DagsterInstance.get() as instance:
        runs = [r for r in instance.get_run_records() if (r.start_time or 0) >= t0 - 1]
        for record in sorted(runs, key=lambda r: r.start_time or 0):
            run = record.dagster_run
            started: dict[str, float] = {}
            for entry in instance.all_logs(run.run_id):
                event = entry.dagster_event
                if event is None or entry.step_key is None:
                    continue
                kind = event.event_type_value
                if kind == "STEP_START":
                    started[entry.step_key] = entry.timestamp
                elif kind in ("STEP_SUCCESS", "STEP_FAILURE") and entry.step_key in started:
                    a, b = started.pop(entry.step_key), entry.timestamp
                    during = [(r, c) for t, r, c in samples if a <= t <= b]
                    cpu = (_cpu_at(samples, b) - _cpu_at(samples, a))
                    rows.append({"run": run.job_name, "step": entry.step_key, "start_s": a - t0, "seconds": b - a,
                                 "cpu_s": cpu, "peak_mb": max((r for r, _ in during), default=0.0),
                                 "status": "ok" if kind == "STEP_SUCCESS" else "FAILED"})
                elif kind == "ASSET_MATERIALIZATION":
                    key = event.asset_key.to_user_string() if event.asset_key else "?"
                    rows.append({"run": run.job_name, "step": f"  materialized {key}", "start_s": entry.timestamp - t0,
                                 "seconds": 0.0, "cpu_s": 0.0, "peak_mb": 0.0, "status": ""})
    return rows


def _cpu_at(samples: list[tuple[float, float, float]], when: float) -> float:
    """The process' CPU seconds at ``when`` (the last sample before it)."""
    return max((c for t, _, c in samples if t <= when), default=0.0)


def published_hash(root: Path) -> str:
    """The content hash of the champion predictor the day published (``-`` when none)."""
    folder = root / "data" / "predictors"
    metas = sorted(folder.glob("*/predictor.json"))
    return ",".join(json.loads(m.read_text()).get("content_hash", "?")[7:19] for m in metas) or "-"


#: the table's phases: (label, steps whose seconds it sums), in the order a day runs them
PHASES = (("ingest (raw_results)", ("raw_results",)),
          ("matrix (response_matrix)", ("response_matrix",)),
          ("fit: champion refit or selection (candidate)", ("candidate",)),
          ("publishing checks (the asset checks)", ("candidate_",)),
          ("publish (champion)", ("champion",)),
          ("challenger selection + its checks", ("challenger", "challenger_")),
          ("score anchor-only models (predictions)", ("predictions",)),
          ("joint predictor (joint_anchors, joint_champion)", ("joint_",)),
          ("method comparison (evaluation)", ("evaluation",)))


def markdown(table: list[dict[str, Any]], summary: list[dict[str, Any]]) -> str:
    """Per day, the phases of every design side by side (seconds, peak RSS sampled during the phase),
    then the day's totals: what docs/results/days.md shows."""
    designs = list(dict.fromkeys(s["design"] for s in summary))
    out = []
    for day in dict.fromkeys(s["day"] for s in summary):
        head = " | ".join(f"{d} s | {d} peak MB" for d in designs)
        out += [f"**{day}**", "", f"| phase | {head} |", "|---|" + "---:|" * (2 * len(designs))]
        for label, prefixes in PHASES:
            cells = []
            for d in designs:
                rows = [r for r in table if r["design"] == d and r["day"] == day and not r["step"].startswith(" ")
                        and any(r["step"] == p or (p.endswith("_") and r["step"].startswith(p)) for p in prefixes)]
                cells += [f"{sum(r['seconds'] for r in rows):.1f}" if rows else "-",
                          f"{max(r['peak_mb'] for r in rows):,.0f}" if rows else "-"]
            out.append(f"| {label} | " + " | ".join(cells) + " |")
        by = {s["design"]: s for s in summary if s["day"] == day}
        for label, key, fmt in (("**published** (from the day's start)", "published_s", "{:.1f}"),
                                ("**whole run** (process start to end)", "seconds", "{:.1f}"),
                                ("CPU seconds (both cores)", "cpu_s", "{:.0f}")):
            cells = []
            for d in designs:
                value = by[d].get(key)
                cells += [fmt.format(value) if value is not None else "-", ""]
            out.append(f"| {label} | " + " | ".join(cells) + " |")
        out.append("| **peak RSS** (whole process), MB | " + " | ".join(
            f" | {by[d]['peak_mb']:,.0f}" for d in designs) + " |")
        out.append("| 1-min load average (start-end) | " + " | ".join(
            f"{by[d]['load_start']:.1f}-{by[d]['load_end']:.1f} | " for d in designs) + " |")
        out.append("| published predictor (content hash) | " + " | ".join(
            f"{by[d]['champion']} | " for d in designs) + " |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="7000x30000", help="day 1: models x items")
    ap.add_argument("--new", type=int, default=100, help="new models on day 2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="300 x 1,000 and 20 new models")
    ap.add_argument("--workdir", type=Path, default=None, help="kept; generated data are reused")
    ap.add_argument("--before", type=Path, default=None, help="a checkout of the previous code, run side by side")
    ap.add_argument("--designs", default="", help="comma-separated subset of before,after")
    ap.add_argument("--out", type=Path, default=None, help="CSV of the per-phase table")
    ap.add_argument("--markdown", type=Path, default=None, help="the side-by-side tables as Markdown")
    args = ap.parse_args(argv)
    n, m = (300, 1000) if args.quick else tuple(int(x) for x in args.size.split("x"))
    new = 20 if args.quick else args.new
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sparseeval-days-"))
    data = workdir / "data"
    day1, day2 = data / "day1", data / "day2"
    t = time.perf_counter()
    if not _generated(day1, n, m, args.seed):
        shutil.rmtree(day1, ignore_errors=True)
        generate(day1, n, m, args.seed)
    if not _generated(day2, n, m, args.seed, new):
        shutil.rmtree(day2, ignore_errors=True)
        generate(day2, n, m, args.seed, new_models=new)
    print(f"data: {n} x {m} + {new} new models in {workdir} ({time.perf_counter() - t:.0f} s)", flush=True)
    designs = {"before": args.before, "after": REPO}
    wanted = args.designs.split(",") if args.designs else [d for d, code in designs.items() if code is not None]
    table: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    for design in wanted:
        code = designs[design]
        assert code is not None, f"--before DIR is needed for the {design} design"
        root = workdir / design
        shutil.rmtree(root, ignore_errors=True)
        for day, source in (("day 1", str(day1 / "unit")), ("day 2", f"{day1 / 'unit'},{day2 / 'unit'}")):
            load = os.getloadavg()[0]
            result = run_day(code, root, source, workdir / f"{design}-{day.replace(' ', '')}.log")
            rows = phases(root / "dagster_home", result["t0"], result["samples"])
            published = next((r["start_s"] for r in rows if r["step"].strip() == "materialized champion"), None)
            for r in rows:
                table.append({"design": design, "day": day, **r})
            summary.append({"design": design, "day": day, "seconds": result["seconds"], "cpu_s": result["cpu_s"],
                            "published_s": published, "peak_mb": result["peak_mb"], "rc": result["rc"],
                            "load_start": load, "load_end": os.getloadavg()[0], "champion": published_hash(root)})
            print(json.dumps(summary[-1]), flush=True)
    print(f"\n{'design':<7} {'day':<6} {'run':<8} {'step':<50} {'start s':>8} {'s':>7} {'cpu s':>7} {'peak MB':>8}")
    for r in table:
        if r["step"].startswith("  "):
            print(f"{r['design']:<7} {r['day']:<6} {r['run']:<8} {r['step']:<50} {r['start_s']:8.1f}")
        else:
            print(f"{r['design']:<7} {r['day']:<6} {r['run']:<8} {r['step']:<50} {r['start_s']:8.1f} "
                  f"{r['seconds']:7.1f} {r['cpu_s']:7.1f} {r['peak_mb']:8.0f} {r['status']}")
    print(f"\n{'design':<7} {'day':<6} {'whole s':>8} {'cpu s':>7} {'published s':>12} {'peak MB':>8} {'load':>10}"
          "  champion")
    for s in summary:
        pub = f"{s['published_s']:.1f}" if s["published_s"] is not None else "-"
        print(f"{s['design']:<7} {s['day']:<6} {s['seconds']:8.1f} {s['cpu_s']:7.1f} {pub:>12} {s['peak_mb']:8.0f} "
              f"{s['load_start']:4.1f}-{s['load_end']:<4.1f}  {s['champion']}{'' if s['rc'] == 0 else '  FAILED'}")
    if args.out:
        import polars as pl

        args.out.parent.mkdir(parents=True, exist_ok=True)
        pl.DataFrame(table).write_csv(args.out)
        pl.DataFrame(summary).write_csv(args.out.with_name(args.out.stem + "_summary.csv"))
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(table, summary) + "\n")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if all(s["rc"] == 0 for s in summary) else 1


if __name__ == "__main__":
    raise SystemExit(main())
