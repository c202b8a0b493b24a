"""Publishing a predictor: one owner for the three places that must agree.

A published predictor lives in three stores: DuckDB (the anchor set's role), the MLflow registry
(the ``champion`` alias) and the published folder ``<predictors>/<benchmark>`` that
``sparseeval predict --benchmark`` reads. Writing them one after the other from an asset body left
them disagreeing after any crash, and a retry registered the same predictor again. Here a
publication is a row in DuckDB (``publications``) that is written *before* anything else and
advanced step by step:

1. ``intent``: recorded by the fit step with the proposal (one transaction);
2. ``registered``: the registry holds a version for the predictor's content hash (an existing
   version with that hash is reused, so a retry never registers twice);
3. ``swapped``: the published path points at the version folder (champion only);
4. ``done``: the alias is moved and, in one DuckDB transaction, the set takes its role, the
   previous holder is retired and the fit key is decided.

A publication cut short at any step is resumed from its recorded step by the next call; every
step is idempotent, so a crash anywhere converges to one state.

**Folders.** Versions live outside the published path, in ``<predictors>/.versions/<benchmark>/
<hash>`` (immutable once written). The published path ``<predictors>/<benchmark>`` is a symlink to
one of them, replaced in one ``rename``: a reader (which resolves the link once) sees the old
version or the new one, never a mix. A published path that is a plain folder (written by an older
layout or by ``sparseeval fit``) is moved into the versions area first, and the stored
``artifact_uri`` values that pointed into it are rewritten.

**Failpoints.** ``SPARSEEVAL_FAILPOINT=<name>`` kills the process (SIGKILL) at that step boundary;
the lifecycle simulation uses it to prove that every boundary is recoverable.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparseeval.core import settings
from sparseeval.data.names import slug
from sparseeval.data.store.connection import pid_alive
from sparseeval.estimate.artifact import META_FILE, PredictorArtifact, load_predictor

if TYPE_CHECKING:  # annotations only: the store and MLflow are the callers'
    from sparseeval.data.store import Store
    from sparseeval.publish.tracking import TrackingConfig

#: the folder inside the predictors folder that holds every version (never a published name)
VERSIONS = ".versions"
#: step boundaries where ``SPARSEEVAL_FAILPOINT`` can kill the process, in the order they are passed
FAILPOINTS = ("before-register", "after-register", "after-registered", "after-swap", "after-swapped",
              "after-alias")


def failpoint(name: str) -> None:
    """SIGKILL this process when ``SPARSEEVAL_FAILPOINT`` names ``name`` (crash tests only)."""
    if settings.SETTINGS["failpoint"].get() == name:
        os.kill(os.getpid(), signal.SIGKILL)


# --- folders ---------------------------------------------------------------------------------------

def versions_dir(predictor_dir: Path, benchmark: str) -> Path:
    """``<predictors>/.versions/<slug>``: the name goes through :func:`sparseeval.data.names.slug`, so a
    benchmark ``../x`` or ``a/b`` stays one folder inside the predictors folder."""
    return Path(predictor_dir) / VERSIONS / slug(benchmark)


def save_version(artifact: PredictorArtifact, predictor_dir: Path, benchmark: str) -> tuple[Path, PredictorArtifact]:
    """Save ``artifact`` as ``<predictors>/.versions/<benchmark>/<hash>`` (written once per content:
    the same fit again reuses the folder); the folder and the saved artifact. The staging folder is
    private to this call, so two writers never share one."""
    root = versions_dir(predictor_dir, benchmark)
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f".staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        saved = artifact.save(staging)
        folder = root / saved.content_hash.removeprefix("sha256:")[:16]
        if folder.exists():
            load_predictor(folder)  # an intact earlier copy of the same content (a damaged one raises)
        else:
            os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder, load_predictor(folder)


def published_path(predictor_dir: Path, benchmark: str) -> Path:
    """``<predictors>/<slug>``, where ``predict --benchmark`` looks (the slug of ``arc`` is ``arc``)."""
    return Path(predictor_dir) / slug(benchmark)


def is_managed(path: Path) -> bool:
    """True when ``path`` is a published path the pipeline owns (a link into a ``.versions`` area, or
    a name that has versions there): ``sparseeval fit --out`` must not write into it."""
    path = Path(path)
    if path.is_symlink():
        return VERSIONS in Path(os.readlink(path)).parts
    return (path.parent / VERSIONS / path.name).is_dir()


def published_hash(predictor_dir: Path, benchmark: str) -> str | None:
    """The content hash of what ``<predictors>/<benchmark>`` serves now (None when nothing is there)."""
    meta = published_path(predictor_dir, benchmark) / META_FILE
    try:
        return json.loads(meta.read_text(encoding="utf-8")).get("content_hash")
    except (OSError, ValueError):
        return None


def _adopt_plain_folder(target: Path, store: Store, benchmark: str) -> dict[str, str]:
    """A published path that is a real folder (an older layout, or ``sparseeval fit``'s output) is
    moved into the versions area, with its old ``versions/`` children, before the first swap; the
    ``artifact_uri`` values pointing into it are rewritten to the new places."""
    root = versions_dir(target.parent, benchmark)
    root.mkdir(parents=True, exist_ok=True)
    moved: dict[str, str] = {}
    legacy = target / "versions"
    if legacy.is_dir():
        for child in sorted(legacy.iterdir()):
            if child.is_dir() and not child.name.startswith("."):
                dest = root / child.name
                if not dest.exists():
                    os.replace(child, dest)
                moved[str(child.resolve() if child.exists() else child)] = str(dest.resolve())
        shutil.rmtree(legacy, ignore_errors=True)
    if (target / META_FILE).is_file():  # a predictor written there directly (sparseeval fit, older layouts)
        aside = root / f"displaced-{uuid.uuid4().hex[:8]}"
        moved[str(target.resolve())] = str(aside.resolve())
        os.replace(target, aside)
    else:
        shutil.rmtree(target)
    if moved and store is not None:
        store.rewrite_artifact_uris(benchmark, moved)
    return moved


def swap_published(predictor_dir: Path, benchmark: str, version: Path, *, store: Store | None = None) -> None:
    """Point ``<predictors>/<benchmark>`` at ``version`` in one rename of a symlink (relative, so the
    data folder can move). Idempotent: already pointing there changes nothing."""
    target = published_path(predictor_dir, benchmark)
    if target.exists() and not target.is_symlink():
        moved = _adopt_plain_folder(target, store, benchmark)
        version = Path(moved.get(str(Path(version).resolve()), version))
    rel = os.path.relpath(Path(version).resolve(), target.parent.resolve())
    if target.is_symlink() and os.readlink(target) == rel:
        return
    link = target.with_name(f".{target.name}.link-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.symlink(rel, link)
    try:
        os.replace(link, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            link.unlink()


def leftovers(predictor_dir: Path) -> list[Path]:
    """Temporary links and staging folders under the predictors folder (a crash's debris)."""
    root = Path(predictor_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if ".link-" in p.name or p.name.endswith(".publishing")]
    versions = root / VERSIONS
    if versions.is_dir():
        found += [p for p in versions.glob("*/*") if p.name.startswith((".staging-", ".")) and p.is_dir()]
    return sorted(found)


def clean_leftovers(predictor_dir: Path) -> list[Path]:
    """Remove what :func:`leftovers` lists, except a staging folder of a live process."""
    removed = []
    for path in leftovers(predictor_dir):
        owner = re.search(r"(?:staging|link)-(\d+)-", path.name)
        if owner and int(owner.group(1)) != os.getpid() and pid_alive(int(owner.group(1))):
            continue  # a live writer's
        if path.is_symlink() or path.is_file():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


# --- the publisher ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Published:
    """One completed publication."""

    benchmark: str
    anchor_set_id: int
    alias: str
    registry_version: str
    previous: int | None
    reused_version: bool


class Publisher:
    """Carries ``benchmark``'s open publications through their steps (see the module docstring).

    ``store``: the DuckDB store; ``tracking``: a :class:`sparseeval.publish.tracking.TrackingConfig`;
    ``predictor_dir``: the published predictors folder.
    """

    def __init__(self, store: Store, tracking: TrackingConfig, predictor_dir: Path, *,
                 run_tags: dict[str, str] | None = None) -> None:
        self.store = store
        self.tracking = tracking
        self.predictor_dir = Path(predictor_dir)
        self.run_tags = dict(run_tags or {})

    def publish_open(self, benchmark: str, *, started_only: bool = False) -> list[Published]:
        """Complete every open publication of ``benchmark`` (champion first); with ``started_only``
        only those past ``intent`` (ones that may already show outside DuckDB)."""
        done = []
        clean_leftovers(self.predictor_dir)
        for pub in self.store.open_publications(benchmark):
            if started_only and pub["step"] == "intent":
                continue
            done.append(self._publish(pub))
        return done

    def _publish(self, pub: dict[str, Any]) -> Published:
        from sparseeval.publish import tracking_registry as mlf  # lazy: mlflow is only for the steps that need it

        bench, alias = pub["benchmark"], pub["alias"]
        row = self.store.anchor_set(int(pub["anchor_set_id"]))
        folder = Path(row["artifact_uri"])
        reused = False
        if pub["step"] == "intent":
            failpoint("before-register")
            version = mlf.find_registered_version(self.tracking, benchmark=bench, content_hash=pub["content_hash"])
            run_id = pub.get("mlflow_run_id")
            if version is None:
                version, run_id = self._register(row, alias, folder)
                failpoint("after-register")
            else:
                reused = True
                run_id = run_id or self._version_run(bench, version)
            self.store.record_step(pub["publication_id"], "registered", registry_version=version,
                                   mlflow_run_id=run_id)
            pub = {**pub, "step": "registered", "registry_version": version, "mlflow_run_id": run_id}
            failpoint("after-registered")
        if pub["step"] == "registered":
            if alias == mlf.CHAMPION:
                swap_published(self.predictor_dir, bench, folder, store=self.store)
                failpoint("after-swap")
            self.store.record_step(pub["publication_id"], "swapped")
            pub = {**pub, "step": "swapped"}
            failpoint("after-swapped")
        mlf.set_alias(self.tracking, benchmark=bench, alias=alias, version=pub["registry_version"])
        failpoint("after-alias")
        previous = self.store.complete_publication(pub)
        return Published(bench, int(pub["anchor_set_id"]), alias, str(pub["registry_version"]), previous, reused)

    def _version_run(self, bench: str, version: str) -> str | None:
        from sparseeval.publish import tracking_registry as mlf

        client = self.tracking.client()
        return client.get_model_version(mlf.registered_model_name(bench), version).run_id

    def _register(self, row: dict[str, Any], alias: str, folder: Path) -> tuple[str, str]:
        """One MLflow run for the published predictor (its scores, anchors, the folder) and a new
        registry version tagged with its content hash (the alias is moved later, as its own step)."""
        from sparseeval.publish import tracking_registry as mlf
        from sparseeval.publish.tracking_runs import log_evaluation_run, tracked_run

        bench = row["benchmark"]
        artifact = load_predictor(folder)
        tags = {**self.run_tags, "role": alias}
        with tracked_run(self.tracking, alias, benchmark=bench, tags=tags) as run:
            log_evaluation_run(
                self.tracking, benchmark=bench, method=row["method"], k=row["k"], seed=row["seed"],
                params={"role": alias, "origin": row["origin"], "data_version": row["data_version"],
                        "n_train": row["n_train_models"], "content_hash": artifact.content_hash},
                metrics={"test_mae": row["test_mae"], "random_linear_mae": row["baseline_mae"],
                         **({"coverage": row["coverage"]} if row["coverage"] is not None else {})},
                anchors=[{"position": i, "item_id": item} for i, item in enumerate(row["items"])],
                predictor_state_path=folder, tags=tags, run_id=run.run_id)
            version = mlf.register_predictor(
                self.tracking, benchmark=bench, predictor_dir=folder, run_id=run.run_id, alias=alias,
                move_alias=False, tags={"data_version": row["data_version"], "anchor_set_id": row["anchor_set_id"]})
        return version, run.run_id


# --- the invariant ---------------------------------------------------------------------------------

def audit(store: Store, tracking: TrackingConfig, predictor_dir: Path, benchmark: str) -> list[str]:
    """What disagrees for ``benchmark`` between DuckDB, the registry and the published folder
    (empty when they agree): the invariant every refresh must leave behind."""
    from sparseeval.publish import tracking_registry as mlf

    problems = []
    with store.pinned():  # DuckDB's side read in one state
        champ = store.champion(benchmark)
        open_pubs = store.open_publications(benchmark)
        champions = store.champion_count(benchmark)
    alias = mlf.alias_version(tracking, benchmark=benchmark, alias=mlf.CHAMPION)
    served = published_hash(predictor_dir, benchmark)
    if open_pubs:
        problems.append(f"{benchmark}: {len(open_pubs)} publication(s) not finished "
                        f"(step {', '.join(p['step'] for p in open_pubs)})")
    if champions > 1:
        problems.append(f"{benchmark}: {champions} champions in DuckDB")
    if champ is None:
        if alias is not None or served is not None:
            problems.append(f"{benchmark}: no champion in DuckDB, but alias -> {alias}, folder -> {served}")
        return problems
    expected = load_predictor(champ["artifact_uri"]).content_hash
    if str(champ["registry_version"]) != str(alias):
        problems.append(f"{benchmark}: DuckDB champion #{champ['anchor_set_id']} is registry version "
                        f"{champ['registry_version']}, the alias points to {alias}")
    if served != expected:
        problems.append(f"{benchmark}: the published folder serves {served}, the champion is {expected}")
    if alias is not None:
        version = tracking.client().get_model_version(mlf.registered_model_name(benchmark), alias)
        if (version.tags or {}).get("content_hash") != expected:
            problems.append(f"{benchmark}: registry version {alias} holds {version.tags.get('content_hash')}, "
                            f"the champion is {expected}")
    return problems


# --- the fit step's decision -----------------------------------------------------------------------

def record_decision(store: Store, benchmark: str, *, fit_key: str, data_version: str | None,
                    proposed: dict[str, Any], challenger: dict[str, Any] | None, checks: list[Any]) -> str:
    """Record what the fit step decided, in the store's state machine, and say it in one sentence.

    ``proposed`` / ``challenger``: ``{"anchor_set_id", "content_hash"}`` of the set meant to become
    champion and of the one meant to be published beside it. Failed checks reject the new sets (the
    champion stays); passed checks propose them with a publication intent each; a fit that
    reproduced the champion exactly needs no publication. Any older pending proposal is retired as
    stale in the same transaction.
    """
    from sparseeval.publish.refresh import checks_json

    for decided in (proposed, challenger):  # a resumed publication reports the checks of whichever it finishes
        if decided is not None:
            store.update_anchor_set(decided["anchor_set_id"], checks=checks_json(checks))
    failed = [c.name for c in checks if not c.passed]
    roles = store.anchor_set_roles(benchmark)
    new = [s for s in (proposed, challenger) if s is not None]
    if failed:
        ids = [s["anchor_set_id"] for s in new if roles.get(s["anchor_set_id"]) == "candidate"]
        reason = f"failed {', '.join(failed)}"
        store.record_rejection(benchmark, ids, fit_key=fit_key, data_version=data_version, reason=reason)
        kept = "the champion stays" if "champion" in roles.values() else "no champion yet: nothing is served"
        return f"NOT published: {reason} ({kept})"
    proposals = []
    if roles.get(proposed["anchor_set_id"]) != "champion":
        proposals.append((proposed["anchor_set_id"], "champion", proposed["content_hash"]))
    if challenger is not None and roles.get(challenger["anchor_set_id"]) == "candidate":
        proposals.append((challenger["anchor_set_id"], "challenger", challenger["content_hash"]))
    if not proposals:
        store.record_unchanged(benchmark, fit_key=fit_key, data_version=data_version,
                               anchor_set_id=proposed["anchor_set_id"],
                               reason=f"the fit reproduced champion #{proposed['anchor_set_id']} exactly")
        return f"the fit reproduced champion #{proposed['anchor_set_id']} exactly: nothing to publish"
    store.record_proposal(benchmark, proposals, fit_key=fit_key, data_version=data_version,
                          reason="passed the publishing checks")
    return "proposed " + ", ".join(f"#{i} as {alias}" for i, alias, _ in proposals)


def record_challenger(store: Store, benchmark: str, *, fit_key: str, data_version: str | None,
                      challenger: dict[str, Any], checks: list[Any]) -> str:
    """Record a fresh selection meant to be published beside the champion under the alias
    ``challenger`` (the champion itself is not in question: it was published by the same refresh), with
    its own checks; say it in one sentence. Failed checks reject it; passed ones record its publication
    intent."""
    from sparseeval.publish.refresh import checks_json

    store.update_anchor_set(challenger["anchor_set_id"], checks=checks_json(checks))
    failed = [c.name for c in checks if not c.passed]
    if failed:
        reason = f"failed {', '.join(failed)}"
        store.record_rejection(benchmark, [challenger["anchor_set_id"]], fit_key=fit_key, data_version=data_version,
                               reason=f"challenger {reason}")
        return f"challenger NOT published: {reason}"
    store.record_proposal(benchmark, [(challenger["anchor_set_id"], "challenger", challenger["content_hash"])],
                          fit_key=fit_key, data_version=data_version, reason="passed the publishing checks")
    return f"proposed #{challenger['anchor_set_id']} as challenger"


@dataclass(frozen=True)
class AnchorOnlyScores:
    """What :func:`score_anchor_only_models` did: how many models it scored, and the models it could
    not score with why (too few anchors answered), which the caller shows (never a guessed number)."""

    scored: int = 0
    skipped: dict[str, str] = field(default_factory=dict)

    def warning(self, benchmark: str) -> str | None:
        """The models left out, in one line for the log (None when every model was scored)."""
        if not self.skipped:
            return None
        shown = "; ".join(f"{model} ({why})" for model, why in list(self.skipped.items())[:10])
        more = f"; and {len(self.skipped) - 10} more" if len(self.skipped) > 10 else ""
        return f"{benchmark}: {len(self.skipped)} model(s) with anchor answers not scored: {shown}{more}"


def score_anchor_only_models(store: Store, benchmark: str) -> AnchorOnlyScores:
    """Score every stored model of ``benchmark`` with anchor answers and no full score, with the current
    champion (an upsert keyed by model and anchor set: running it twice changes nothing). The answers
    read are the anchors' and, when the champion has a probe plan, any of its pool's (each newcomer's probe
    is its own draw: one the anchors place at the top and that ran it is estimated by it, as ``predict``
    does); a model too short to predict is left out and named."""
    from sparseeval.estimate.predicting import predict_scorable
    from sparseeval.estimate.probe import plan_of

    current = store.champion(benchmark)
    if current is None:
        return AnchorOnlyScores()
    artifact = load_predictor(current["artifact_uri"])
    plan = None if artifact.is_joint else plan_of(artifact.extra)
    answers = store.anchor_answers_without_score(benchmark, [*artifact.anchor_item_ids, *(plan.items if plan else ())])
    predictions, skipped = predict_scorable(artifact, answers) if answers.height else ([], {})
    rows = [{**p.as_dict(), "anchor_set_id": current["anchor_set_id"]} for p in predictions]
    if rows:
        store.save_predictions(rows)
    return AnchorOnlyScores(len(rows), skipped)
