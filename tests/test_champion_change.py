"""A champion replaced: the new one takes the role, the MLflow alias and the published folder; the old
one is retired. Read directly from DuckDB, the registry and the folder (and through ``audit()``).

The crash tests of ``tests/test_lifecycle.py`` publish one champion (slow: a subprocess per step
boundary); a refresh that replaces a champion is otherwise only run by the slow pipeline tests, so a
publisher that moves no alias, or keeps the old champion beside the new one, went unseen in the fast
suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparseeval.estimate.artifact import load_predictor
from sparseeval.publish.publishing import Publisher, audit, record_decision
from tests.test_lifecycle import PASSED, _world


@pytest.mark.slow  # two fits and publications: make test runs it, make test-fast leaves it out
def test_a_new_champion_takes_the_alias_and_the_folder_and_retires_the_old_one(tmp_path: Path) -> None:
    world = _world(tmp_path)
    store, tracking, predictors = world["store"], world["tracking"], tmp_path / "predictors"
    (first, second) = world["sets"]
    Publisher(store, tracking, predictors).publish_open("arc")  # first: champion; second: challenger
    before = store.champion("arc")
    assert before["anchor_set_id"] == first["anchor_set_id"]
    # a later refresh proposes the challenger as champion, and it is published
    record_decision(store, "arc", fit_key="key-2", data_version="v1", proposed=second, challenger=None,
                    checks=PASSED)
    done = Publisher(store, tracking, predictors).publish_open("arc")
    assert [(p.anchor_set_id, p.alias, p.previous) for p in done] == \
        [(second["anchor_set_id"], "champion", first["anchor_set_id"])]
    roles = dict(store.query("SELECT anchor_set_id, role FROM anchor_sets").rows())
    assert roles == {first["anchor_set_id"]: "retired", second["anchor_set_id"]: "champion"}
    assert store.query("SELECT count(*) FROM anchor_sets WHERE role = 'champion'").item() == 1
    now = store.champion("arc")
    alias = tracking.client().get_model_version_by_alias("sparseeval-arc", "champion")
    assert str(alias.version) == str(now["registry_version"]) != str(before["registry_version"])
    assert alias.tags["content_hash"] == second["content_hash"]
    assert load_predictor(predictors / "arc").content_hash == second["content_hash"]
    assert audit(store, tracking, predictors, "arc") == []
