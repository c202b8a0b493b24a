"""What a refresh of Hub sources costs: calls to the Hub and seconds, side by side.

Runs the real ``huggingface_hub`` client (through :mod:`sparseeval.data.access.hub_sources`) against the local
Hub stand-in of bench/support/hub_server.py on 127.0.0.1, into a fresh store and client cache, for three
refreshes of the same sources:

* first fetch: every repo's result files downloaded and ingested;
* unchanged: nothing was pushed (one metadata call per repo, plus one listing per org glob);
* one new model: one model's files pushed to one repo (only they are downloaded).

Calls are the requests the stand-in answered; seconds are the refresh's wall time (local network,
so they measure the client's and the store's own cost, not the Hub's latency).

    python bench/hub_refresh.py                  # 3 repos (lm-eval, v1 and v2 details)
    python bench/hub_refresh.py --extra-repos 20 # 20 more v2 details repos under the glob
    python bench/hub_refresh.py --sources hf://datasets/team/evals   # the repo the new model goes to
    python bench/hub_refresh.py --hub-tasks arc,bbh  # also: a first fetch of only these tasks' files
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.support.formats import write_v1_details, write_v2_details
from bench.support.hub_server import HubServer, Repo, files_from
from sparseeval.data.access.hub_sources import HubFetcher, RepoFetch, parse_sources, parse_tasks
from sparseeval.data.store import Store

LM_EVAL = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real_formats" / "lm_eval_0.4.13" / "dummy"
SOURCES = "hf://datasets/team/evals,hf://datasets/team/*-details"


def _repo(files: dict[str, bytes]) -> Repo:
    repo = Repo()
    repo.push(files)
    return repo


def _measure(server: HubServer, fetcher: HubFetcher, sources: str, label: str) -> dict[str, object]:
    server.calls.clear()
    t0 = time.perf_counter()
    out: list[RepoFetch] = fetcher.refresh(parse_sources(sources), report_unchanged=True)
    seconds = time.perf_counter() - t0
    failed = [f"{f.repo}: {f.error}" for f in out if f.status == "failed"]
    if failed:
        raise SystemExit(f"{label}: " + "; ".join(failed))
    return {"refresh": label, "calls": len(server.calls),
            "metadata": sum("/revision/" in c or c.startswith("GET /api/datasets?") or c == "GET /api/datasets"
                            for c in server.calls),
            "downloads": sum(c.startswith("GET /datasets/") for c in server.calls),
            "repos fetched": sum(f.status == "fetched" for f in out),
            "files": sum(len(f.files) for f in out), "bytes": sum(f.bytes for f in out), "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", default=SOURCES, help=f"comma-separated sources (default {SOURCES})")
    parser.add_argument("--extra-repos", type=int, default=0, help="more v2 details repos matched by the glob")
    parser.add_argument("--hub-tasks", default="arc,bbh",
                        help="wanted tasks of the side-by-side first fetch into a second store ('' to skip)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="hub-bench-"))
    server = HubServer()
    os.environ["HF_ENDPOINT"] = server.url
    os.environ.pop("HF_HUB_OFFLINE", None)
    try:
        server.repos["team/evals"] = _repo(files_from(LM_EVAL, "org__dummy/"))
        server.repos["team/model-7b-details"] = _repo(files_from(write_v1_details(work / "v1")))
        server.repos["team/model-v2-details"] = _repo(files_from(write_v2_details(work / "v2"), "org__model-v2/"))
        for i in range(args.extra_repos):
            model = f"org/extra-{i}"
            server.repos[f"team/extra-{i}-details"] = _repo(
                files_from(write_v2_details(work / f"x{i}", model=model), f"org__extra-{i}/"))
        store = Store(work / "bench.duckdb")
        store.apply_schema()
        fetcher = HubFetcher(store, work / "hf-cache")
        rows = [_measure(server, fetcher, args.sources, "first fetch"),
                _measure(server, fetcher, args.sources, "unchanged")]
        new = write_v2_details(work / "new", model="org/new-model")
        server.repos["team/evals"].push(files_from(new, "org__new-model/"))
        rows.append(_measure(server, fetcher, args.sources, "one new model"))
        tasks = parse_tasks(args.hub_tasks)
        if tasks:  # the same repos, a fresh store and cache, only the wanted tasks' files (SPARSEEVAL_HUB_TASKS)
            other = Store(work / "tasks.duckdb")
            other.apply_schema()
            wanted = HubFetcher(other, work / "hf-cache-tasks", tasks=tasks)
            rows.append(_measure(server, wanted, args.sources, f"first, {args.hub_tasks}"))
    finally:
        server.close()
    print(f"{args.sources} ({len(server.repos)} repos on the server): real huggingface_hub client, "
          "bench/support/hub_server.py")
    cols = list(rows[0])
    print("  ".join(f"{c:>13}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>13.3f}" if c == "seconds" else f"{r[c]!s:>13}" for c in cols))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
