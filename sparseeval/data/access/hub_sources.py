"""Sources on the Hugging Face Hub: ``hf://datasets/ORG/REPO[@revision]`` and ``hf://datasets/ORG/GLOB``.

A refresh asks the Hub one metadata call per repo (``dataset_info``: the commit its revision points
at). A repo whose commit the store already ingested costs nothing more. Otherwise the repo's file
tree at that commit is listed, and only result files whose blob id the store has not ingested are
downloaded with ``hf_hub_download`` pinned to the listed commit, into the client's own cache (which
writes ``.incomplete`` blobs and links a file into the snapshot only once complete, so a failed
download never leaves a partial file where the ingest reads). The snapshot folder of that commit
then holds exactly the new files, and the store ingests it. Faults are reported per repo; the other
repos go on. ``HF_TOKEN`` is the only credential: it is handed to the client on every call (a token
file left by ``hf auth login`` is not used, so what a refresh can read does not depend on who logged
in on the machine) and nothing here stores or logs it.

With wanted tasks (``SPARSEEVAL_HUB_TASKS``), only their files and the aggregate results are
downloaded (:func:`sparseeval.data.readers.hub.task_patterns`); a wanted task with no file in a repo is
said in that repo's notes, not passed over. The store records the task list with the commit, so
widening it fetches the newly wanted files of an unchanged repo on the next refresh.
"""

from __future__ import annotations

import fnmatch
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparseeval.data.readers.hub import RESULTS_PATTERNS, task_patterns

if TYPE_CHECKING:
    from sparseeval.data.store import Store

PREFIX = "hf://datasets/"
#: files the readers use: aggregate results, lm-eval samples, leaderboard v1 details
WANTED = ("*.json", "*.jsonl", "*.parquet")
RETRIES = 3


@dataclass(frozen=True)
class HubSource:
    """One ``hf://datasets/ORG/NAME[@revision]`` source; NAME may be a glob (``*-details``)."""

    org: str
    name: str
    revision: str = "main"

    @property
    def is_glob(self) -> bool:
        return any(c in self.name for c in "*?[")

    def __str__(self) -> str:
        return f"{PREFIX}{self.org}/{self.name}" + (f"@{self.revision}" if self.revision != "main" else "")


def parse_source(text: str) -> Path | HubSource:
    """A local folder or a :class:`HubSource`; a malformed ``hf://`` form is refused naming it."""
    text = text.strip()
    if not text.startswith("hf://"):
        return Path(text)
    if not text.startswith(PREFIX):
        raise ValueError(f"{text}: only dataset repos are sources: use hf://datasets/ORG/REPO[@revision]")
    repo, _, revision = text[len(PREFIX):].partition("@")
    parts = repo.split("/")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"{text}: expected hf://datasets/ORG/REPO[@revision] or hf://datasets/ORG/GLOB")
    return HubSource(parts[0], parts[1], revision or "main")


def parse_sources(value: str) -> list[Path | HubSource]:
    """Several sources, comma-separated (``SPARSEEVAL_SOURCE``)."""
    return [parse_source(v) for v in value.split(",") if v.strip()]


def parse_tasks(value: str) -> list[str]:
    """The wanted tasks, comma-separated (``SPARSEEVAL_HUB_TASKS``, ``ingest --hub-tasks``); empty: every file."""
    return [t.strip() for t in value.split(",") if t.strip()]


@dataclass
class RepoFetch:
    """What one refresh did with one repo (the asset's metadata and the CLI's report)."""

    repo: str
    revision: str
    sha: str | None = None
    files: list[str] = field(default_factory=list)
    bytes: int = 0
    seconds: float = 0.0
    calls: int = 0
    status: str = "unchanged"  # unchanged | fetched | failed
    error: str | None = None
    folder: Path | None = None
    notes: list[str] = field(default_factory=list)  # e.g. a wanted task with no file in this repo
    refused: list[tuple[str, str]] = field(default_factory=list)  # (unit or part, reason) the ingest refused

    def row(self) -> dict[str, Any]:
        return {"repo": self.repo, "revision": self.revision, "sha": self.sha, "status": self.status,
                "files": len(self.files), "bytes": self.bytes, "seconds": round(self.seconds, 3),
                **({"error": self.error} if self.error else {}), **({"notes": self.notes} if self.notes else {}),
                **({"refused": len(self.refused)} if self.refused else {})}


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _endpoint() -> str | None:
    # read at call time (the client reads HF_ENDPOINT once, at import)
    return os.environ.get("HF_ENDPOINT") or None


def _token() -> str | bool:
    """``HF_TOKEN``, or False: the client then sends no token (not the one a login left on disk)."""
    return os.environ.get("HF_TOKEN") or False


def explain(exc: BaseException) -> str:
    """One line a user can act on, for the Hub faults a refresh meets."""
    from huggingface_hub import errors

    name = type(exc).__name__
    if isinstance(exc, errors.GatedRepoError):
        return "gated repo: accept its conditions on the Hub and set HF_TOKEN to a token with access"
    if isinstance(exc, errors.RepositoryNotFoundError):  # the Hub answers a missing and a private repo alike
        if _token():
            return ("repo not found, or private and the token in HF_TOKEN has no access to it: check the name, "
                    "or the token's permissions")
        return ("repo not found, or private (no HF_TOKEN is set): check the name, or set HF_TOKEN to a token "
                "with access")
    if isinstance(exc, errors.RevisionNotFoundError):
        return f"revision not found (changed or deleted during the refresh?): {exc}".splitlines()[0]
    if isinstance(exc, errors.LocalEntryNotFoundError):
        return ("offline (HF_HUB_OFFLINE=1 or no network) and nothing of this repo in the client's cache: "
                "run a refresh once with network")
    if isinstance(exc, errors.EntryNotFoundError):
        return f"a listed file did not resolve (Git-LFS object missing on the server): {exc}".splitlines()[0]
    if isinstance(exc, errors.HfHubHTTPError):
        return f"the Hub answered {exc}".splitlines()[0]
    if name in ("ConnectError", "ConnectTimeout", "ReadTimeout", "OfflineModeIsEnabled") or isinstance(exc, OSError):
        return f"cannot reach the Hub ({name}: {exc}); set HF_HUB_OFFLINE=1 to use the client's cache"
    return f"{name}: {exc}"


def _retrying(call: Callable[[], Any], fetch: RepoFetch, log: Callable[[str], None]) -> Any:
    """``call()``, retried after the wait a 429 names (``Retry-After``) up to :data:`RETRIES` times."""
    from huggingface_hub import errors

    for attempt in range(RETRIES + 1):
        fetch.calls += 1
        try:
            return call()
        except errors.HfHubHTTPError as exc:
            response = getattr(exc, "response", None)
            if response is None or response.status_code != 429 or attempt == RETRIES:
                raise
            wait = float(response.headers.get("Retry-After") or 1)
            log(f"{fetch.repo}: rate limited (429), retrying in {wait:g} s")
            time.sleep(wait)
    raise AssertionError("unreachable")


def _write_ref(repo_cache: Path, revision: str, sha: str) -> None:
    """Point the client's cache ref ``revision`` at ``sha`` (as a download by branch name would), so
    ``HF_HUB_OFFLINE=1`` finds it: downloads pinned to a sha leave the branch's ref unwritten."""
    ref = repo_cache / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    tmp = ref.with_name(f".{ref.name}.{os.getpid()}.tmp")
    tmp.write_text(sha)
    tmp.replace(ref)


class HubFetcher:
    """Refresh Hub sources into a store through the real ``huggingface_hub`` client."""

    def __init__(self, store: Store, cache_dir: str | Path | None = None,
                 log: Callable[[str], None] = lambda _m: None, tasks: Sequence[str] = ()) -> None:
        from huggingface_hub import HfApi

        self.store = store
        # the client reads HF_HUB_CACHE once, at import; read it here so a changed environment counts
        cache = cache_dir if cache_dir is not None else os.environ.get("HF_HUB_CACHE")
        self.cache_dir = str(cache) if cache else None
        self.log = log
        self.api = HfApi(endpoint=_endpoint(), token=_token())
        self.tasks = task_patterns(sorted(set(tasks)))
        #: what the store records with a commit: the wanted tasks ('' = every result file)
        self.wanted_key = ",".join(self.tasks)
        #: the globs (over a file's path in the repo) of the files a refresh downloads
        self.allow_patterns = list(WANTED) if not self.tasks else [
            *RESULTS_PATTERNS, *(p for pats in self.tasks.values() for p in pats)]

    def _is_wanted(self, path: str) -> bool:
        if not any(fnmatch.fnmatchcase(Path(path).name, p) for p in WANTED):
            return False
        return not self.tasks or any(fnmatch.fnmatchcase(path, p) for p in self.allow_patterns)

    def _absent_tasks(self, paths: list[str]) -> list[str]:
        """Wanted tasks with no file among ``paths`` (a repo's whole tree at the commit)."""
        return [t for t, pats in self.tasks.items() if not any(fnmatch.fnmatchcase(p, g) for p in paths for g in pats)]

    def repos(self, source: HubSource, fetch: RepoFetch) -> list[str]:
        """The repos a source names (a glob lists the org's datasets: one call)."""
        if not source.is_glob:
            return [f"{source.org}/{source.name}"]
        listed = _retrying(lambda: [d.id for d in self.api.list_datasets(author=source.org)], fetch, self.log)
        return sorted(r for r in listed if fnmatch.fnmatchcase(r.split("/", 1)[1], source.name))

    def new_revisions(self, sources: list[HubSource], unchanged: list[RepoFetch] | None = None,
                      ) -> tuple[list[RepoFetch], list[RepoFetch]]:
        """(repos whose commit the store has not ingested, faults): one metadata call per repo.

        Repos already at the ingested commit are appended to ``unchanged`` when given (the CLI reports them)."""
        fresh, failed = [], []
        for source in sources:
            probe = RepoFetch(str(source), source.revision)
            try:
                repos = self.repos(source, probe)
            except Exception as exc:  # reported per source; the others go on
                probe.status, probe.error = "failed", explain(exc)
                failed.append(probe)
                continue
            for repo in repos:
                f = RepoFetch(repo, source.revision)
                try:
                    f.sha = self._sha(repo, source.revision, f)
                except Exception as exc:
                    f.status, f.error = "failed", explain(exc)
                    failed.append(f)
                    continue
                if f.sha != self.store.hub_sha(repo, source.revision, self.wanted_key):
                    fresh.append(f)
                elif unchanged is not None:
                    unchanged.append(f)
        return fresh, failed

    def _sha(self, repo: str, revision: str, f: RepoFetch) -> str:
        if _offline():
            return Path(self._cached_snapshot(repo, revision)).name
        return _retrying(lambda: self.api.dataset_info(repo, revision=revision).sha, f, self.log)

    def _cached_snapshot(self, repo: str, revision: str) -> str:
        from huggingface_hub import snapshot_download

        return snapshot_download(repo, repo_type="dataset", revision=revision, cache_dir=self.cache_dir,
                                 local_files_only=True, allow_patterns=self.allow_patterns)

    def refresh(self, sources: list[HubSource], *, report_unchanged: bool = False) -> list[RepoFetch]:
        """Fetch and ingest what is new in every repo; one :class:`RepoFetch` per repo (faults included;
        repos at the commit already ingested only with ``report_unchanged``)."""
        out: list[RepoFetch] = []
        unchanged: list[RepoFetch] = []
        fresh, failed = self.new_revisions(sources, unchanged)
        out += failed + (unchanged if report_unchanged else [])
        for f in fresh:
            t0 = time.perf_counter()
            try:
                self._fetch(f)
            except Exception as exc:  # nothing recorded: the next refresh tries this repo again
                f.status, f.error, f.folder = "failed", explain(exc), None
            f.seconds = time.perf_counter() - t0
            out.append(f)
        return out

    def _fetch(self, f: RepoFetch) -> None:
        from huggingface_hub import hf_hub_download

        assert f.sha is not None
        if _offline():
            f.folder = Path(self._cached_snapshot(f.repo, f.revision))
            f.files = sorted(rel for rel in (str(p.relative_to(f.folder)) for p in f.folder.rglob("*") if p.is_file())
                             if self._is_wanted(rel))
            entries = [(p, "cached:" + f.sha, (f.folder / p).stat().st_size) for p in f.files]
        else:
            tree = _retrying(lambda: [e for e in self.api.list_repo_tree(
                f.repo, repo_type="dataset", revision=f.sha, recursive=True) if hasattr(e, "blob_id")], f, self.log)
            for task in self._absent_tasks([e.path for e in tree]):
                f.notes.append(f"no file of wanted task {task!r} at this commit")
                self.log(f"{f.repo}@{f.sha[:8]}: no file of wanted task {task!r} (SPARSEEVAL_HUB_TASKS)")
            seen = self.store.hub_blobs(f.repo)
            wanted = [e for e in tree if self._is_wanted(e.path) and (e.path, e.blob_id) not in seen]
            entries = [(e.path, e.blob_id, int(e.size)) for e in wanted]
            total, done, t0 = sum(s for _, _, s in entries), 0, time.perf_counter()
            if wanted:
                self.log(f"{f.repo}@{f.sha[:8]}: {len(wanted)} new file(s), {total:,} bytes to download "
                         f"({len(tree) - len(wanted)} listed file(s) not wanted or already ingested)")
            folder = None
            for i, e in enumerate(wanted, 1):
                local = Path(_retrying(lambda e=e: hf_hub_download(
                    f.repo, e.path, repo_type="dataset", revision=f.sha, cache_dir=self.cache_dir,
                    endpoint=_endpoint(), token=_token()), f, self.log))
                done += int(e.size)
                elapsed = time.perf_counter() - t0
                self.log(f"{f.repo}@{f.sha[:8]}: {i}/{len(wanted)} {e.path} ({int(e.size):,} bytes); "
                         f"{done:,}/{total:,} bytes ({100 * done / max(total, 1):.0f} %) in {elapsed:.1f} s, "
                         f"{done / max(elapsed, 1e-9) / 1e6:.1f} MB/s")
                snapshot = local.parents[len(Path(e.path).parts) - 1]
                if snapshot.name != f.sha:  # the server served another commit than the one listed
                    raise RuntimeError(f"revision changed during the download: listed {f.sha}, "
                                       f"{e.path} came from {snapshot.name}; nothing ingested, the next refresh "
                                       "fetches the new revision")
                folder = snapshot
                f.files.append(e.path)
            f.folder = folder
            if folder is not None and f.revision != f.sha:
                _write_ref(folder.parent.parent, f.revision, f.sha)
        f.bytes = sum(s for _, _, s in entries)
        if f.folder is not None and f.files:
            report = self.store.ingest(f.folder)
            f.refused = [(e.file, e.reason or "") for e in report.files if e.status in ("refused", "interrupted")]
            f.refused += [(n.part, n.reason) for e in report.files for n in e.notes if n.status == "refused"]
            if f.refused:
                self.log(f"{f.repo}: {len(f.refused)} unit(s) or part(s) refused: "
                         + "; ".join(f"{part}: {reason}" for part, reason in f.refused))
        self.store.record_hub_fetch(f.repo, f.revision, f.sha, entries, seconds=f.seconds, wanted=self.wanted_key)
        f.status = "fetched" if f.files else "unchanged"
