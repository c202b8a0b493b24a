"""Runs in flight at stop: finished, or terminated and recorded so, through the webserver's GraphQL API.

The daemon is stopped first (nothing new is launched); in-flight runs get ``grace`` seconds; the rest
are terminated through Dagster (the code server ends each run's process and records the run as
canceled), so no run is left "started" with no process behind it. Queued runs stay queued: the next
start's daemon launches them.
"""

from __future__ import annotations

import json
import time
import urllib.request

from sparseeval.interfaces.serve.bootstrap import LOOPBACK

IN_FLIGHT = ["STARTING", "STARTED", "CANCELING"]
RUNS_IN_FLIGHT = """query($statuses: [RunStatus!]) { runsOrError(filter: {statuses: $statuses}) {
  ... on Runs { results { runId jobName status } } } }"""
TERMINATE = """mutation($ids: [String!]!) { terminateRuns(runIds: $ids) { __typename
  ... on TerminateRunsResult { terminateRunResults { __typename } } } }"""
LOCATION = """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""


def graphql(port: int, query: str, variables: dict | None = None, timeout: float = 10.0) -> dict:
    """One query against the Dagster webserver's GraphQL API."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"http://{LOOPBACK}:{port}/graphql", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as r:
        out = json.loads(r.read())
    if out.get("errors"):
        raise RuntimeError(f"GraphQL errors: {out['errors']}")
    return out["data"]


def in_flight(port: int) -> list[dict]:
    return graphql(port, RUNS_IN_FLIGHT, {"statuses": IN_FLIGHT})["runsOrError"]["results"]


def drain(port: int, grace: float) -> list[str]:
    """Wait up to ``grace`` seconds for in-flight runs, terminate the rest; one note per terminated run."""
    deadline = time.monotonic() + grace
    while (runs := in_flight(port)) and time.monotonic() < deadline:
        time.sleep(1)
    if not runs:
        return []
    results = graphql(port, TERMINATE, {"ids": [r["runId"] for r in runs]})["terminateRuns"]
    outcomes = [r["__typename"] for r in results.get("terminateRunResults", [])] or ["?"] * len(runs)
    deadline = time.monotonic() + 30
    while in_flight(port) and time.monotonic() < deadline:
        time.sleep(1)
    return [f"run {run['runId'][:8]} ({run['jobName']}) "
            f"{'terminated' if how == 'TerminateRunSuccess' else f'could not be terminated ({how})'}"
            for run, how in zip(runs, outcomes, strict=False)]
