"""``sparseeval ingest SOURCE... [--db FILE]``: store result files, folders and Hub dataset repos.

A SOURCE is a local file or folder, ``hf://datasets/ORG/REPO[@revision]`` or ``hf://datasets/ORG/GLOB``
(parsed and fetched by :mod:`sparseeval.data.access.hub_sources`, as the pipeline's ``SPARSEEVAL_SOURCE`` is). A Hub
repo whose commit the store already ingested costs one metadata call and is reported ``unchanged``;
each repo that fails is one line on stderr naming it and the fault, and the other sources are still
ingested (exit 1).

Prints one row per unit (stored, partial, skipped, refused) with what it brought and what it
replaced, then each refused or skipped part of a unit with its reason, and exits 1 when anything
was refused (a whole unit or a part of one), so a script or scheduler notices bad input instead of
silently running on less data (or when a Hub repo failed). Ctrl-C stops after rolling back the unit in
progress (exit 130).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from sparseeval.core import settings
from sparseeval.core.errors import UsageError
from sparseeval.data.access.hub_sources import HubSource, RepoFetch, parse_source, parse_tasks
from sparseeval.data.access.ingesting import ingest_sources
from sparseeval.data.store import IngestReport, PublishInterrupted, Store, StoreError, default_db_path
from sparseeval.interfaces.commands.arguments import settings_epilog, writable_db
from sparseeval.interfaces.progress import progress_bar

DESCRIPTION = """\
Store result files, folders and Hub dataset repos in the DuckDB store (what fit, evaluate, sql and
the pipeline read).

A SOURCE is a file or folder (a long table, lm-eval output, lighteval output, leaderboard details),
hf://datasets/ORG/REPO[@revision] or hf://datasets/ORG/GLOB. Each unit (a file, or a run folder) is one
transaction: a unit already ingested (same bytes) is skipped; a newer run of the same model and
benchmark replaces the older one as current (the older is kept as history); a bad unit, or a bad
part of one, is refused with the reason and leaves the store unchanged. A Hub repo whose commit was
ingested before costs one metadata call; only new files are downloaded.

Prints one row per unit (stored, partial, skipped, refused) and each refused or skipped part with
its reason; exits 1 when anything was refused or a Hub repo failed. Ctrl-C stops after rolling back
the unit in progress (exit 130).

example:
  sparseeval ingest results/ hf://datasets/ORG/details --db store.duckdb"""

_LABELS = {"ok": "stored", "partial": "PARTIAL", "skipped": "skipped", "refused": "REFUSED",
           "interrupted": "STOPPED"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ingest",
        help="ingest result files or folders (long tables, lm-eval output, lighteval, leaderboard details)",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=settings_epilog("db", "data_dir", "hub_tasks", "duckdb_memory"),
    )
    parser.add_argument("paths", nargs="+", metavar="SOURCE",
                        help="files or folders to ingest, or Hub dataset repos: hf://datasets/ORG/REPO[@revision] "
                             "or hf://datasets/ORG/GLOB (only files not ingested yet are downloaded)")
    parser.add_argument("--db", type=writable_db, default=None, metavar="FILE",
                        help="the store's DuckDB file, created if missing (" + settings.overrides("db")
                             + ", else <data dir>/sparseeval.duckdb)")
    parser.add_argument("--hub-tasks", default=None, metavar="TASKS",
                        help="Hub sources download only these tasks' files (and the aggregate results): benchmarks, "
                             "lm-eval task names or globs, comma-separated (" + settings.overrides("hub_tasks")
                             + "; default: every result file)")
    parser.set_defaults(func=run)


def format_report(report: IngestReport) -> list[str]:
    """The per-unit table and, under it, the notes of each unit."""
    width = max([len(f.file) for f in report.files] + [4])  # full paths: a user greps for them
    head = f"{'status':<8} {'unit':<{width}} {'format':<22} {'responses':>10} {'scores':>7} {'replaced':>8}"
    lines = [head, "-" * len(head)]
    for f in report.files:
        name = f.file
        stored = f.status in ("ok", "partial")
        counts = (f"{f.n_responses:>10,} {f.n_scores:>7,} {f.n_superseded:>8,}" if stored
                  else f"{'':>10} {'':>7} {'':>8}")
        lines.append(f"{_LABELS.get(f.status, f.status):<8} {name:<{width}} {f.format[:22]:<22} {counts}")
        if f.reason and f.status != "ok":
            lines.append(f"    {f.reason}")
        elif f.reason:
            lines.append(f"    ({f.reason})")
        for earlier, n_runs in f.replaced:
            lines.append(f"    replaced {n_runs} earlier run(s) stored from {earlier} (kept as history)")
        for note in f.notes:
            lines.append(f"    {note.status}: {note.part}: {note.reason}")
        if f.publish_error:
            lines.append(f"    stored, but the read-only snapshot was not refreshed ({f.publish_error}); "
                         "the next write or `sparseeval doctor --repair` refreshes it")
    return lines


def format_hub(fetches: list[RepoFetch]) -> list[str]:
    """One row per Hub repo: what the refresh did, at which commit, and what it downloaded."""
    width = max([len(f.repo) for f in fetches] + [4])
    head = f"{'status':<9} {'repo':<{width}} {'commit':<8} {'files':>5} {'bytes':>11} {'seconds':>7}"
    lines = [head, "-" * len(head)]
    for f in fetches:
        lines.append(f"{f.status:<9} {f.repo:<{width}} {(f.sha or '')[:8]:<8} {len(f.files):>5} {f.bytes:>11,} "
                     f"{f.seconds:>7.2f}" + (f"\n    {f.error}" if f.error else "")
                     + "".join(f"\n    note: {n}" for n in f.notes))
    return lines


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    try:
        sources = [parse_source(p) for p in args.paths]
    except ValueError as exc:  # a malformed hf:// form: one line from cli.main, exit 2
        raise UsageError(str(exc)) from None
    local = [s for s in sources if isinstance(s, Path)]
    hub = [s for s in sources if isinstance(s, HubSource)]
    tasks = args.hub_tasks if args.hub_tasks is not None else settings.SETTINGS["hub_tasks"].get()
    try:
        store = Store(args.db or default_db_path())
        # download progress and refused parts of a repo's files go to stderr as they happen
        with progress_bar("ingest", unit="unit") if local else contextlib.nullcontext(lambda _: None) as tick:
            done = ingest_sources(store, local, hub, tasks=parse_tasks(tasks), log=_stderr, report_unchanged=True,
                                  progress=lambda entry: tick(f"{entry.status} {Path(entry.file).name}"))
        report, fetches = done.report, done.fetches
    except PublishInterrupted:
        print("interrupted after the unit in progress was stored: its snapshot will be refreshed by the next "
              "write or `sparseeval doctor --repair`; no further unit was read", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("interrupted: the unit in progress was rolled back and recorded as interrupted; "
              "no further unit was read", file=sys.stderr)
        return 130
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if local:
        print("\n".join(format_report(report)))
    if fetches:
        print("\n".join(format_hub(fetches)))
    failed = [f for f in fetches if f.status == "failed"]
    for f in failed:  # one line per repo, for scripts that only watch stderr
        print(f"FAILED   {f.repo}: {f.error}", file=sys.stderr)
    if report.publish_error:
        print(f"note: stored, but the read-only snapshot was not refreshed ({report.publish_error}); the next "
              "write or `sparseeval doctor --repair` refreshes it", file=sys.stderr)
    for entry in report.files:  # refusals also on stderr, for scripts that only watch it
        if entry.status == "refused":
            print(f"REFUSED  {entry.reason}", file=sys.stderr)
        for note in entry.notes:
            if note.status == "refused":
                print(f"REFUSED  {note.part}: {note.reason}", file=sys.stderr)
    counts = {s: len(report.by_status(s)) for s in ("ok", "partial", "skipped", "refused")}
    n_parts = sum(1 for f in report.files for n in f.notes if n.status == "refused")
    parts = f" ({n_parts} part(s) of units refused)" if n_parts else ""
    hub_counts = {s: sum(f.status == s for f in fetches) for s in ("fetched", "unchanged", "failed")}
    summary = [f"{counts['ok']} stored, {counts['partial']} partly stored, {counts['skipped']} skipped, "
               f"{counts['refused']} refused{parts}"] if local else []
    if hub:
        summary.append(f"Hub repos: {hub_counts['fetched']} fetched, {hub_counts['unchanged']} unchanged, "
                       f"{hub_counts['failed']} failed")
    print("; ".join(summary) + f" -> {store.path}")
    return 1 if report.refused or failed else 0
