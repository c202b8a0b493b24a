"""What must hold after every simulated day (:class:`Invariants`, mixed into
:class:`bench.support.simulation.Simulation`): DuckDB, the registry and the published folders agree, every
run ended as its day expects, the sensors asked only for what changed, and the history tables only grew.

Apart from the simulation's moves so a reader sees the checks on their own; they read the simulation's
state (its root, settings, requests and the store) and write nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from bench.support.simulation_days import BAD_FILE, CYCLE, NOISE_TURN
from sparseeval.data.names import slug
from sparseeval.data.store import Store
from sparseeval.estimate.methods.joint import JOINT_METHOD
from sparseeval.publish.publishing import audit, leftovers
from sparseeval.publish.tracking_registry import registered_versions


class Invariants:
    """The day's checks; each returns the violations it found, in words."""

    root: Path
    settings: dict[str, Any]
    requests: Counter
    last_results: list[tuple[str, str | None, str]]


    def violations(self, *, quiet: bool, versions_before: dict[str, int], day: int = 0,
                   changed: set[str] | None = None) -> list[str]:
        """Every invariant that does not hold after the day, as ``kind: detail``. ``changed``: the
        benchmarks whose data or settings changed that day (None: every one)."""
        db = self.store
        with db.pinned():  # one state of the store for the whole day's check
            found = self._violations(db, quiet=quiet, versions_before=versions_before)
            found += self._agreement(db) + self._outcomes(db, day)
        return found + self._requests(changed)

    def expected_outcomes(self, job: str, partition: str | None, day: int) -> set[str]:
        """What the day allows a run to end as (:func:`run_outcome`; never ``error``). An ingest is
        rejected (its blocking check) exactly while the bad file stays in the source, every other file
        ingested; a refresh of a benchmark of noise is rejected by the publishing checks (the
        champion stays); any other refresh or joint fit publishes, or is rejected on a small population,
        as a recorded decision."""
        if job == "ingest":
            return {"rejected"} if day >= BAD_FILE else {"succeeded"}
        if job == "refresh" and (partition == "noisy" or (partition == "drift" and (day % CYCLE >= NOISE_TURN
                                                                                    or day >= CYCLE))):
            return {"rejected"}
        return {"succeeded", "rejected"}

    def _outcomes(self, db: Store, day: int) -> list[str]:
        found = []
        decided = dict(db.query("SELECT benchmark, arg_max(outcome, decided_at) FROM fit_decisions GROUP BY 1").rows())
        for job, partition, outcome in self.last_results:
            name = f"{job}{f' {partition}' if partition else ''}"
            if outcome not in self.expected_outcomes(job, partition, day):
                found.append(f"unexpected outcome: {name} {outcome}")
            elif outcome == "rejected" and job != "ingest" and decided.get(partition or JOINT_METHOD) != "rejected":
                found.append(f"unexpected outcome: {name} rejected, but DuckDB's last decision is "
                             f"{decided.get(partition or JOINT_METHOD)}")
        return found

    def _requests(self, changed: set[str] | None) -> list[str]:
        """Requests the sensors made for what did not change (counted before de-duplication)."""
        if changed is None:
            return []
        joint = set(self.settings["joint_benchmarks"].split(","))
        found = []
        for (job, partition), n in sorted(self.requests.items(), key=str):
            if job == "refresh" and partition not in {slug(b) for b in changed}:
                found.append(f"request for an unchanged benchmark: refresh {partition} asked {n} time(s)")
            elif job == "joint" and not joint & changed:
                found.append(f"request for an unchanged benchmark: joint ({', '.join(sorted(joint))}) asked {n} "
                             "time(s)")
        return found

    def _agreement(self, db: Store) -> list[str]:
        """``audit()``'s invariant read directly, without the product's code: DuckDB's champion row, the
        MLflow registry's ``champion`` alias and the published folder name one predictor (its content
        hash), and a benchmark without a champion has neither alias nor folder."""
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        from sparseeval.data.benchmarks import registered_model_name

        client = MlflowClient(self.resources()["tracking"].config().resolved_tracking_uri)
        predictors = Path(self.settings["predictor_dir"])
        rows = db.query("SELECT benchmark, anchor_set_id, registry_version, artifact_uri FROM anchor_sets "
                        "WHERE role = 'champion'").rows()
        found = [f"disagreement (direct): {b} has {n} champions in DuckDB"
                 for b, n in Counter(r[0] for r in rows).items() if n > 1]
        champions = {r[0]: r for r in rows}
        for bench in [*db.benchmarks(), "sparseeval-joint"]:
            try:
                alias = client.get_model_version_by_alias(registered_model_name(bench), "champion")
            except MlflowException:
                alias = None
            folder = predictors / slug(bench)
            if bench not in champions:
                if alias is not None or folder.exists():
                    found.append(f"disagreement (direct): {bench} has no champion in DuckDB, but alias "
                                 f"{alias.version if alias else None}, folder {folder.exists()}")
                continue
            _, set_id, version, artifact = champions[bench]
            expected = json.loads((Path(artifact) / "predictor.json").read_text())["content_hash"]
            served = json.loads((folder / "predictor.json").read_text())["content_hash"] if folder.exists() else None
            if alias is None or str(alias.version) != str(version) or alias.tags.get("content_hash") != expected:
                found.append(f"disagreement (direct): {bench} champion #{set_id} is version {version} "
                             f"({expected[:19]}), the alias is {alias.version if alias else None} "
                             f"({alias.tags.get('content_hash', '')[:19] if alias else ''})")
            if served != expected or folder.resolve() != Path(artifact).resolve():
                found.append(f"disagreement (direct): {bench} folder serves {served and served[:19]} from "
                             f"{folder.resolve()}, the champion is {expected[:19]} in {artifact}")
        return found

    def _violations(self, db: Store, *, quiet: bool, versions_before: dict[str, int]) -> list[str]:
        found: list[str] = []
        tracking = self.resources()["tracking"].config()
        predictors = Path(self.settings["predictor_dir"])
        benchmarks = [*db.benchmarks(), "sparseeval-joint"]
        for bench in benchmarks:
            found += [f"disagreement: {p}" for p in audit(db, tracking, predictors, bench)]
        stale = db.query("SELECT benchmark, anchor_set_id, role FROM anchor_sets WHERE role IN "
                         "('candidate', 'proposed')")
        found += [f"stale proposal: {r['benchmark']} #{r['anchor_set_id']} is still {r['role']}"
                  for r in stale.iter_rows(named=True)]
        found += [f"orphan file: {p}" for p in [*leftovers(predictors), *db.temp_files()]]
        versions = {b: len(registered_versions(tracking, benchmark=b)) for b in benchmarks}
        if quiet:
            if self.last_results:
                found.append(f"run on a quiet day: {len(self.last_results)} run(s) {self.last_results}")
            found += [f"new registry version on a quiet day: {b} {versions_before.get(b, 0)} -> {n}"
                      for b, n in versions.items() if n != versions_before.get(b, 0)]
        for bench in db.benchmarks():
            current = db.champion(bench)
            if current is None:
                continue
            waiting = db.anchor_answers_without_score(bench, current["items"]).get_column("model").unique()
            scored = set(db.query("SELECT model FROM predictions WHERE anchor_set_id = $i",
                                  {"i": current["anchor_set_id"]}).get_column("model").to_list())
            found += [f"anchor-only model without a prediction: {bench} {m}" for m in waiting if m not in scored]
        found += self._append_only(db)
        self.versions = versions
        return found

    def _append_only(self, db: Store) -> list[str]:
        """The history views only grow: every row seen yesterday is still there today, unchanged."""
        queries = {
            "response_history": "SELECT DISTINCT run_id, model, benchmark FROM response_history",
            "anchor_set_history": "SELECT anchor_set_id, benchmark, created_at FROM anchor_set_history",
            "role_history": "SELECT anchor_set_id, old_role, new_role, reason, changed_at FROM role_history",
            "publication_history": "SELECT publication_id, anchor_set_id, alias, created_at FROM publication_history",
        }
        found = []
        for view, sql in queries.items():
            rows = set(db.query(sql).rows())
            lost = self.history.get(view, set()) - rows
            if lost:
                found.append(f"history rewritten: {view} lost {len(lost)} row(s), e.g. {sorted(lost)[0]}")
            self.history[view] = rows
        return found
