"""Ingest local folders and Hub repos into a store, as one operation with one account of it.

Why one home: ``sparseeval ingest`` and the pipeline's ``raw_results`` asset ingest the same sources the
same way (local units first, then the Hub repos' new files) and report the same facts (what was stored,
skipped or refused, and which benchmarks' data changed). Each used to do it itself; what each shows of the
result (a printed report, asset metadata and a check) stays with it, the ingest and its account live here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparseeval.data.access.hub_sources import HubFetcher, HubSource, RepoFetch
from sparseeval.data.store import FileReport, IngestReport, Store


@dataclass(frozen=True)
class SourcesIngested:
    """What one ingest of local folders and Hub repos did: the store's report of the local units, each Hub
    repo's fetch, and every benchmark's data version before and after."""

    report: IngestReport
    fetches: list[RepoFetch] = field(default_factory=list)
    before: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)

    @property
    def changed(self) -> list[str]:
        """The benchmarks whose data version changed (new, replaced or superseded runs), sorted."""
        return sorted(b for b, v in self.after.items() if self.before.get(b) != v)

    def refused(self) -> list[tuple[str, str]]:
        """``(what, why)`` of every refusal: whole units, parts of units, parts of Hub repos."""
        report = self.report
        out = [(f.file, f.reason or "") for f in report.files if f.status == "refused"]
        out += [(n.part, n.reason) for f in report.files for n in f.notes if n.status == "refused"]
        return out + [(f"{fetch.repo}: {part}", reason) for fetch in self.fetches for part, reason in fetch.refused]

    def skipped(self) -> list[tuple[str, str]]:
        """``(what, why)`` of every unit or part skipped or stored with a warning."""
        report = self.report
        out = [(f.file, f.reason or "") for f in report.files if f.status == "skipped"]
        return out + [(n.part, n.reason) for f in report.files for n in f.notes if n.status in ("skipped", "warning")]


def ingest_sources(store: Store, local: Sequence[Path], hub: Sequence[HubSource], *, tasks: Sequence[str] = (),
                   log: Callable[[str], None] = lambda _m: None,
                   progress: Callable[[FileReport], None] | None = None,
                   report_unchanged: bool = False) -> SourcesIngested:
    """Ingest the ``local`` folders (``progress``: called per unit), then fetch and ingest the ``hub`` repos'
    new files (``tasks``: only these tasks' files; ``log``: the fetch's messages as they happen). A fault in a
    Hub repo is that repo's (its fetch says so); a store error or an interrupt propagates, with what was
    stored before it kept."""
    before = store.data_versions()  # one query, not one per benchmark
    report = store.ingest(list(local), progress=progress) if local else IngestReport()
    fetches = HubFetcher(store, log=log, tasks=tasks).refresh(list(hub), report_unchanged=report_unchanged) \
        if hub else []
    return SourcesIngested(report, fetches, before, store.data_versions())
