"""Screenshots of the Dagster and MLflow UIs in headless Chromium, against a finished ``make run``.

    python bench/ui_screens.py [--data-dir data] [--dagster-home .dagster_home] [--out docs/screens]

Starts the Dagster webserver (no daemon: no schedule or sensor fires while it looks) and the MLflow
server on free 127.0.0.1 ports, against the data folder and Dagster instance of an earlier
``make run``; marks Dagster's first-visit dialog as seen (GraphQL ``setNuxSeen``); then, for each
page, renders it in headless Chromium (Debian's ``chromium``) twice, once to a PNG and once to its
DOM, and fails (exit 1) when a page shows an error text, lacks what it must show, or is blank:

* ``dagster_asset_graph.png``: the asset graph (``/asset-groups``);
* ``dagster_asset_candidate.png``: the page of the ``candidate`` asset;
* ``mlflow_runs.png``: the runs of the MLflow experiment (model-training kind).

Both servers are stopped at the end (their process groups, which this script started). Not part of
the test suite: it needs Chromium and a finished pipeline run. Takes about a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sparseeval.core import settings

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

#: texts that mean a page failed, whatever else it shows (case-sensitive, as the UIs write them)
ERROR_TEXTS = (
    "Something went wrong", "An unexpected error", "Unexpected error", "PythonError", "Internal Server Error",
    "Failed to fetch", "Request failed", "Page not found", "404 Not Found", "could not be loaded",
    "Error loading", "Error fetching", "Traceback (most recent call last)", "DagsterInvariantViolationError",
    "Unable to load", "Could not load", "NetworkError", "Experiment not found", "RESOURCE_DOES_NOT_EXIST",
)


@dataclass
class Page:
    name: str
    url: str
    must_show: tuple[str, ...]


def runs_page_url(base: str, experiment_id: str) -> str:
    """The experiment's runs page. MLflow 3.17's UI picks GenAI or model-training pages from a browser-wide
    switch (GenAI in a fresh browser) that the URL's ``workflowType`` overrides; the experiment's
    ``mlflow.experimentKind`` tag (set by sparseeval.publish.tracking) is what the experiment is."""
    return f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(url: str, data: bytes | None = None, timeout: float = 10.0) -> bytes:
    headers = {"Content-Type": "application/json"} if data is not None else {}
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=timeout) as r:
        return r.read()


def wait_for(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited ({proc.returncode}) before answering {url}; its log:\n"
                             + log.read_text(errors="replace")[-3000:])
        with contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            http(url, timeout=3)
            return
        time.sleep(0.5)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s; log: {log}")


@contextlib.contextmanager
def server(cmd: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """A server in its own process group, stopped with its children on exit (SIGTERM, then SIGKILL)."""
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        time.sleep(0.5)  # the group's children (gunicorn / uvicorn workers, code servers) leave with it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def chromium(binary: str, url: str, *, screenshot: Path | None, budget_ms: int, size: str) -> str:
    """Render ``url``; write a PNG (``screenshot``) or return the DOM after ``budget_ms`` of virtual time."""
    with tempfile.TemporaryDirectory(prefix="ui-screens-chromium-") as profile:
        cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={profile}",
               f"--virtual-time-budget={budget_ms}", f"--window-size={size}"]
        cmd += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
        done = subprocess.run([*cmd, url], capture_output=True, text=True, timeout=180, check=False)
    if done.returncode != 0:
        raise SystemExit(f"chromium failed on {url} ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def visible_text(dom: str) -> str:
    """The DOM's text without scripts, styles and tags (what a reader of the page sees, roughly)."""
    dom = re.sub(r"<(script|style|noscript)\b.*?</\1>", " ", dom, flags=re.S | re.I)
    dom = re.sub(r"<[^>]+>", " ", dom)
    return re.sub(r"\s+", " ", dom)


def blank(png: Path) -> bool:
    """True when the screenshot is (nearly) one colour: a page that rendered nothing."""
    from PIL import Image

    with Image.open(png) as im:
        small = im.convert("L").resize((140, 90))
        lo, hi = small.getextrema()
        colours = len(small.getcolors(256) or range(256))
    return hi - lo < 30 or colours < 8


def check_page(page: Page, text: str, png: Path) -> list[str]:
    problems = [f"shows {e!r}" for e in ERROR_TEXTS if e in text]
    problems += [f"does not show {m!r}" for m in page.must_show if m not in text]
    if len(text.strip()) < 200:
        problems.append(f"almost no text ({len(text.strip())} characters)")
    if blank(png):
        problems.append("the screenshot is blank")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # $SPARSEEVAL_DATA_DIR and $DAGSTER_HOME; relative paths (and the defaults) are the repository's
    parser.add_argument("--data-dir", type=Path, default=ROOT / settings.data_dir())
    parser.add_argument("--dagster-home", type=Path,
                        default=ROOT / (settings.foreign("DAGSTER_HOME") or ".dagster_home"))
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screens")
    parser.add_argument("--experiment", default="sparseeval")
    parser.add_argument("--asset", default="candidate", help="the asset whose page is shot")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--budget-ms", type=int, default=15000, help="virtual time each page gets to render")
    parser.add_argument("--size", default="1400,900")
    parser.add_argument("--start-timeout", type=float, default=240.0)
    args = parser.parse_args(argv)

    data, home = args.data_dir.resolve(), args.dagster_home.resolve()
    missing = [p for p in (data / "mlflow.db", data / settings.DB_FILE, home / "dagster.yaml") if not p.exists()]
    if missing:
        print(f"missing {', '.join(map(str, missing))}: run `make run` first (or pass --data-dir/--dagster-home)",
              file=sys.stderr)
        return 2
    if not shutil.which(args.chromium):
        print(f"{args.chromium} not found: apt-get install chromium", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DAGSTER_HOME": str(home), "SPARSEEVAL_DATA_DIR": str(data),
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "DAGSTER_DISABLE_TELEMETRY": "1",
           "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    dport, mport = free_port(), free_port()
    dagster_url, mlflow_url = f"http://127.0.0.1:{dport}", f"http://127.0.0.1:{mport}"
    logs = Path(tempfile.mkdtemp(prefix="ui-screens-"))
    t0 = time.monotonic()
    with server([str(BIN / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(dport)],
                env, logs / "dagster.log") as dagster, \
         server([str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{data / 'mlflow.db'}",
                 "--default-artifact-root", (data / "mlartifacts").as_uri(), "--host", "127.0.0.1",
                 "--port", str(mport), "--workers", "1"], env, logs / "mlflow.log") as mlflow:
        wait_for(f"{dagster_url}/server_info", dagster, logs / "dagster.log", args.start_timeout)
        wait_for(f"{mlflow_url}/health", mlflow, logs / "mlflow.log", args.start_timeout)
        print(f"servers up in {time.monotonic() - t0:.0f} s (Dagster {dagster_url}, MLflow {mlflow_url})")
        # the first-visit dialog of the Dagster UI covers the page until this is recorded in the instance
        answer = json.loads(http(f"{dagster_url}/graphql", json.dumps({"query": "mutation { setNuxSeen }"}).encode()))
        if answer.get("errors"):
            print(f"setNuxSeen failed: {answer['errors']}", file=sys.stderr)
            return 1
        got = json.loads(http(f"{mlflow_url}/api/2.0/mlflow/experiments/get-by-name?experiment_name={args.experiment}"))
        exp = got["experiment"]
        kind = {t["key"]: t["value"] for t in exp.get("tags", [])}.get("mlflow.experimentKind")
        runs = json.loads(http(f"{mlflow_url}/api/2.0/mlflow/runs/search", json.dumps(
            {"experiment_ids": [exp["experiment_id"]], "max_results": 5}).encode())).get("runs", [])
        if not runs:
            print(f"experiment {args.experiment} has no runs: run `make run` first", file=sys.stderr)
            return 2
        run_name = runs[0]["info"]["run_name"]
        pages = [
            Page("dagster_asset_graph", f"{dagster_url}/asset-groups", ("response_matrix", "candidate", "champion")),
            Page(f"dagster_asset_{args.asset}", f"{dagster_url}/assets/{args.asset}", (args.asset, "Materializ")),
            Page("mlflow_runs", runs_page_url(mlflow_url, exp["experiment_id"]), (args.experiment, run_name)),
        ]
        failures = 0
        for page in pages:
            png = args.out / f"{page.name}.png"
            chromium(args.chromium, page.url, screenshot=png, budget_ms=args.budget_ms, size=args.size)
            text = visible_text(chromium(args.chromium, page.url, screenshot=None, budget_ms=args.budget_ms,
                                         size=args.size))
            problems = check_page(page, text, png)
            if page.name == "mlflow_runs" and kind != "custom_model_development":
                problems.append(f"experiment kind is {kind!r}: the UI opens it on traces, not runs")
            print(f"{page.name:<28} {png.relative_to(ROOT) if png.is_relative_to(ROOT) else png}  "
                  f"{png.stat().st_size // 1024} KiB  " + ("ok" if not problems else "FAILED: " + "; ".join(problems)))
            failures += bool(problems)
    print(f"{len(pages) - failures}/{len(pages)} pages ok in {time.monotonic() - t0:.0f} s (server logs: {logs})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
