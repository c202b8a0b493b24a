"""Model splits: disjoint, seeded, family-safe, date-ordered."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparseeval.estimate.splits import make_split, model_family


def _models(n_orgs: int, per_org: list[int]) -> list[str]:
    return [f"org{o}/m{j}" for o in range(n_orgs) for j in range(per_org[o])]


def test_random_split_is_a_partition_with_requested_fractions() -> None:
    models = [f"o{i % 7}/m{i}" for i in range(1000)]
    sp = make_split(models, val_frac=0.1, test_frac=0.2, seed=0)
    all_rows = np.concatenate([sp.train, sp.val, sp.test])
    assert sorted(all_rows.tolist()) == list(range(1000))
    assert sp.sizes() == {"train": 700, "val": 100, "test": 200}


def test_same_seed_same_split_and_different_seed_different_split() -> None:
    models = [f"o/m{i}" for i in range(500)]
    a, b, c = (make_split(models, seed=s) for s in (1, 1, 2))
    assert np.array_equal(a.test, b.test) and np.array_equal(a.train, b.train)
    assert not np.array_equal(a.test, c.test)
    assert len(np.intersect1d(a.test, c.test)) < 0.5 * len(a.test)


@settings(max_examples=40, deadline=None)
@given(per_org=st.lists(st.integers(1, 30), min_size=3, max_size=25), seed=st.integers(0, 10_000))
def test_family_split_never_puts_one_org_on_two_sides(per_org: list[int], seed: int) -> None:
    models = _models(len(per_org), per_org)
    sp = make_split(models, policy="family", val_frac=0.1, test_frac=0.2, seed=seed)
    sides = [{model_family(models[i]) for i in rows} for rows in (sp.train, sp.val, sp.test)]
    assert not (sides[0] & sides[1]) and not (sides[0] & sides[2]) and not (sides[1] & sides[2])
    assert len(sp.train) > 0 and len(sp.test) > 0
    assert len(sp.train) + len(sp.val) + len(sp.test) == len(models)


def test_date_split_tests_on_the_newest_models() -> None:
    models = [f"o{i}/m" for i in range(100)]
    dates = [np.datetime64("2023-01-01") + np.timedelta64(i, "D") for i in range(100)]
    dates[5] = None  # undated models count as old
    sp = make_split(models, policy="date", val_frac=0.1, test_frac=0.2, seed=0, dates=dates)
    assert sp.test.tolist() == list(range(80, 100))
    assert sp.val.tolist() == list(range(70, 80))
    assert 5 in sp.train


def test_bad_fractions_and_policies_are_refused() -> None:
    models = [f"o/m{i}" for i in range(10)]
    with pytest.raises(ValueError, match="val_frac"):
        make_split(models, val_frac=0.5, test_frac=0.6)
    with pytest.raises(ValueError, match="unknown split policy"):
        make_split(models, policy="alphabetical")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="two organisations"):
        make_split(models, policy="family")
    with pytest.raises(ValueError, match="no model has a date"):
        make_split(models, policy="date", dates=[None] * 10)
