"""The anchor-set state machine and the one publisher, on the real DuckDB store and MLflow store.

The crash tests kill a real subprocess (SIGKILL, through ``SPARSEEVAL_FAILPOINT``) at every step
boundary of a publication, then publish again in this process: every case must converge to one state
(DuckDB champion = registry alias = published folder), with no duplicate registry version.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparseeval.data.lifecycle import ROLES, TRANSITIONS, IllegalTransitionError, check_transition, state_table_markdown
from sparseeval.data.store import Store
from sparseeval.data.synthetic import generate_leaderboard
from sparseeval.estimate.artifact import load_predictor
from sparseeval.estimate.fitting import fit_predictor
from sparseeval.interfaces.cli import main as cli_main
from sparseeval.publish.publishing import FAILPOINTS, Publisher, audit, leftovers, record_decision, save_version
from sparseeval.publish.refresh import Check

REPO = Path(__file__).resolve().parents[1]
PASSED = [Check("beats_random_linear", True, {}), Check("anchors_valid", True, {})]


def test_state_table_is_closed_and_enforced() -> None:
    assert set(TRANSITIONS) == set(ROLES) and all(set(v) <= set(ROLES) for v in TRANSITIONS.values())
    check_transition(1, "candidate", "proposed")
    check_transition(1, "champion", "champion")  # the same role again is a no-op
    for old, new in [("candidate", "champion"), ("rejected", "proposed"), ("retired", "champion"),
                     ("champion", "candidate")]:
        with pytest.raises(IllegalTransitionError, match=f"{old} -> {new}"):
            check_transition(1, old, new)
    with pytest.raises(IllegalTransitionError, match="unknown role"):
        check_transition(1, "candidate", "selected")  # an origin, not a state
    table = state_table_markdown()
    assert all(f"`{role}`" in table for role in ROLES)
    # the docs carry the same table
    assert table in (REPO / "docs" / "architecture.md").read_text()


def _world(root: Path, method: str = "sparseeval-linear") -> dict:
    """A store with two fitted predictors of arc proposed (one as champion, one as challenger)."""
    from sparseeval.publish.tracking import TrackingConfig

    lb = generate_leaderboard(n_families=10, models_per_family=8, benchmarks={"arc": 40}, seed=1)
    store = Store(root / "sparseeval.duckdb")
    store.apply_schema()
    sets = []
    for seed in (0, 1):
        artifact = fit_predictor(lb.responses.rename({"correct": "score"}), lb.scores, "arc", 6, method, seed=seed)
        folder, saved = save_version(artifact, root / "predictors", "arc")
        set_id = store.save_anchor_set(benchmark="arc", method=method, k=6, items=saved.item_ids,
                                       seed=seed, artifact_uri=str(folder), origin="selected", data_version="v1",
                                       test_mae=1.0, baseline_mae=2.0)
        sets.append({"anchor_set_id": set_id, "content_hash": saved.content_hash})
    record_decision(store, "arc", fit_key="key-1", data_version="v1", proposed=sets[0], challenger=sets[1],
                    checks=PASSED)
    return {"store": store, "tracking": TrackingConfig(data_dir=root), "sets": sets, "root": root, "lb": lb}


def _versions(world: dict) -> list[str]:
    from sparseeval.publish.tracking_registry import registered_versions

    return registered_versions(world["tracking"], benchmark="arc")


def _publish_in_child(root: Path, point: str) -> int:
    code = ("import sys; from pathlib import Path; from sparseeval.publish.publishing import Publisher; "
            "from sparseeval.data.store import Store; from sparseeval.publish.tracking import TrackingConfig; "
            "root = Path(sys.argv[1]); "
            "Publisher(Store(root / 'sparseeval.duckdb'), TrackingConfig(data_dir=root), root / 'predictors')"
            ".publish_open('arc')")
    env = {**os.environ, "SPARSEEVAL_FAILPOINT": point, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code, str(root)], env=env, timeout=300).returncode


@pytest.mark.slow
@pytest.mark.parametrize("point", FAILPOINTS)
def test_a_publication_killed_at_any_step_converges_on_retry(tmp_path: Path, point: str) -> None:
    world = _world(tmp_path)
    assert _publish_in_child(tmp_path, point) == -9  # SIGKILL at that boundary
    store = world["store"]
    assert store.open_publications("arc"), "the kill left the publication unfinished"
    done = Publisher(store, world["tracking"], tmp_path / "predictors").publish_open("arc")
    assert {p.alias for p in done} <= {"champion", "challenger"}
    assert audit(store, world["tracking"], tmp_path / "predictors", "arc") == []
    assert _versions(world) == ["1", "2"]  # one version per predictor content, none registered twice
    champion = store.champion("arc")
    assert champion["anchor_set_id"] == world["sets"][0]["anchor_set_id"]
    roles = store.query("SELECT role FROM anchor_sets ORDER BY anchor_set_id").get_column("role").to_list()
    assert roles == ["champion", "challenger"]
    assert leftovers(tmp_path / "predictors") == []
    # and publishing again changes nothing
    assert Publisher(store, world["tracking"], tmp_path / "predictors").publish_open("arc") == []
    assert _versions(world) == ["1", "2"]


@pytest.mark.slow  # fits and publications: make test runs it, make test-fast leaves it out
def test_published_folder_is_a_link_swapped_whole_and_fit_refuses_it(tmp_path: Path) -> None:
    world = _world(tmp_path)
    Publisher(world["store"], world["tracking"], tmp_path / "predictors").publish_open("arc")
    published = tmp_path / "predictors" / "arc"
    assert published.is_symlink() and not os.path.isabs(os.readlink(published))
    assert load_predictor(published).content_hash == world["sets"][0]["content_hash"]
    before = sorted(p.name for p in (tmp_path / "predictors" / ".versions" / "arc").iterdir())
    # fit --out into the managed folder: refused before any work, nothing touched
    code = cli_main(["fit", "--data", str(tmp_path), "--benchmark", "arc", "-k", "3",
                     "--out", str(published)])
    assert code == 2
    assert published.is_symlink() and sorted(p.name for p in published.parent.joinpath(".versions", "arc")
                                              .iterdir()) == before


@pytest.mark.slow  # fits and publications: make test runs it, make test-fast leaves it out
def test_a_plain_published_folder_is_adopted_and_stored_uris_follow(tmp_path: Path) -> None:
    """A published path written by an older layout (a real folder holding versions/): the first swap
    moves it into the versions area and rewrites the stored artifact_uri values that pointed into it."""
    import shutil

    world = _world(tmp_path)
    store, first = world["store"], world["sets"][0]["anchor_set_id"]
    old = tmp_path / "predictors" / "arc"
    legacy_version = old / "versions" / "abc"
    shutil.copytree(store.anchor_set(first)["artifact_uri"], legacy_version)
    store.update_anchor_set(first, artifact_uri=str(legacy_version.resolve()))
    Publisher(store, world["tracking"], tmp_path / "predictors").publish_open("arc")
    moved = store.anchor_set(first)["artifact_uri"]
    assert ".versions" in moved and Path(moved).is_dir()
    assert audit(store, world["tracking"], tmp_path / "predictors", "arc") == []


def test_stale_proposals_are_retired_with_a_reason(tmp_path: Path) -> None:
    world = _world(tmp_path)
    store = world["store"]
    # a newer refresh is rejected before the first was published: the old intents are abandoned
    new = store.save_anchor_set(benchmark="arc", method="sparseeval-linear", k=2, items=["1", "2"], seed=5,
                                data_version="v2")
    record_decision(store, "arc", fit_key="key-2", data_version="v2",
                    proposed={"anchor_set_id": new, "content_hash": "x"}, challenger=None,
                    checks=[Check("beats_random_linear", False, {})])
    rows = store.query("SELECT anchor_set_id, role, reason FROM anchor_sets ORDER BY 1").rows()
    assert [r[1] for r in rows] == ["retired", "retired", "rejected"]
    assert all(r[2] for r in rows) and "stale" in rows[0][2]
    assert store.open_publications("arc") == []
    assert store.latest_decision("arc")["outcome"] == "rejected"


@pytest.mark.slow
def test_the_default_method_is_registered_and_served_from_the_registry(tmp_path: Path) -> None:
    """sparseeval-mlp (the default) through the publisher, then loaded back from the registry by its alias:
    as an MLflow pyfunc model and as the folder ``sparseeval predict`` reads, with the same predictions
    as the published folder."""
    import json

    import mlflow
    import numpy as np
    import polars as pl

    from sparseeval.publish.tracking_registry import download_predictor

    world = _world(tmp_path, method="sparseeval-mlp")
    Publisher(world["store"], world["tracking"], tmp_path / "predictors").publish_open("arc")
    assert audit(world["store"], world["tracking"], tmp_path / "predictors", "arc") == []
    published = load_predictor(tmp_path / "predictors" / "arc")
    assert published.method == "sparseeval-mlp"
    mlflow.set_tracking_uri(world["tracking"].resolved_tracking_uri)
    model = mlflow.pyfunc.load_model("models:/sparseeval-arc@champion")
    X = np.random.default_rng(0).integers(0, 2, (5, published.k)).astype(np.float32)
    np.testing.assert_allclose(model.predict(X), published.estimator.predict(X), rtol=1e-5)
    folder = download_predictor(world["tracking"], benchmark="arc", dst=tmp_path / "download")
    answers = world["lb"].responses.filter(pl.col("item_id").is_in(published.anchor_item_ids)
                                           & (pl.col("model") == world["lb"].responses["model"][0]))
    answers.rename({"correct": "score"}).write_csv(tmp_path / "answers.csv")
    outs = []
    for source in (folder, tmp_path / "predictors" / "arc"):
        out = tmp_path / f"{len(outs)}.json"
        assert cli_main(["predict", "--no-db",
                     "--predictor", str(source), "--answers", str(tmp_path / "answers.csv"),
                         "--json", str(out)]) == 0
        outs.append(json.loads(out.read_text()))
    assert outs[0] == outs[1] and 0 <= outs[0][0]["predicted"] <= 1
