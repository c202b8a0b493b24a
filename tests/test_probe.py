"""The second stage (:mod:`sparseeval.estimate.probe`): a random probe whose estimate and interval hold by design.

Small cases with known answers first: the draw (per model, stratified, reproducible, never an anchor),
the estimate's unbiasedness and coverage *whatever the anchors said* (the control may be badly wrong),
the finite-population correction, the pseudo-answers, the sequential stop and the cap, answers out of
order, the link of a subset pool and the level. Then the real thing: mmlu of the shared Open LLM
Leaderboard data, fitted on its weakest 90 % with the defaults, and its strongest 10 % predicted through
``sparseeval next`` and ``predict`` as a user runs them.
"""

from __future__ import annotations

import hashlib
import io
import json
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sparseeval.core.errors import UsageError
from sparseeval.core.settings import SETTINGS, SettingError
from sparseeval.estimate.probe import (
    KIND,
    Link,
    ProbePlan,
    answered_prefix,
    design_estimate,
    draw_order,
    plan_of,
    probe_state,
    routed,
    walk,
)
from sparseeval.estimate.probe_fit import CATCH, MOST_ASKED, fit_link, fit_plan, probe_level, strata_of
from sparseeval.estimate.splits import frontier_cut
from sparseeval.interfaces.cli import main
from tests.support import OPENLLM_DIR, needs_real_data


def population(n_models: int = 400, n_items: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(answers, abilities) of a 2PL population: items of spread difficulty and discrimination."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, 1, n_models)
    a, b = rng.uniform(0.5, 2.0, n_items), rng.normal(0, 1.2, n_items)
    Y = (rng.random((n_models, n_items)) < 1 / (1 + np.exp(-a * (theta[:, None] - b)))).astype(np.float32)
    return Y, theta


def plan_for(Y: np.ndarray, k: int = 10, *, scores: np.ndarray | None = None, first: int = 40, batch: int = 20,
             max_items: int = 200, target: float = 0.05, salt: str = "toy/0") -> ProbePlan:
    """A plan fitted on the first 300 rows of ``Y`` (calibration: the next 100), anchors the first ``k`` items."""
    scores = Y.mean(axis=1).astype(np.float64) if scores is None else scores
    fit, cal = slice(0, 300), slice(300, 400)
    return fit_plan(items=[f"i{j}" for j in range(Y.shape[1])], locations=[("toy", j) for j in range(Y.shape[1])],
                    values=Y[fit], observed=np.ones_like(Y[fit], dtype=bool), scores=scores[fit],
                    anchor_columns=np.arange(k), cal_values=Y[cal], cal_observed=np.ones_like(Y[cal], dtype=bool),
                    cal_scores=scores[cal], pred_cal=scores[cal], alpha=0.1, salt=salt, first=first, batch=batch,
                    max_items=max_items, target=target)


def test_each_model_has_its_own_stratified_reproducible_draw_that_never_holds_an_anchor() -> None:
    Y, _ = population()
    plan = plan_for(Y)
    assert plan.items == tuple(f"i{j}" for j in range(10, 300))  # the anchors are not in the pool
    a, again, b = draw_order(plan, "org/a"), draw_order(plan, "org/a"), draw_order(plan, "org/b")
    assert np.array_equal(a, again) and not np.array_equal(a, b)
    assert sorted(a.tolist()) == list(range(len(plan.items)))  # a permutation of the pool
    strata = np.asarray(plan.strata)
    for n in (4, 40, 60, 200):  # every prefix holds each stratum's share, within one item
        counts = np.bincount(strata[a[:n]], minlength=4)
        assert counts.max() - counts.min() <= 1
    # another salt (another benchmark or seed) draws anew; a refit with the same salt draws the same
    assert not np.array_equal(draw_order(replace(plan, salt="toy/1"), "org/a"), a)
    # the order is the documented hash, not NumPy's generator: a light install with another NumPy draws the same
    assert a.tolist() == hashed_order(plan, "org/a")


def hashed_order(plan: ProbePlan, model: str) -> list[int]:
    """The draw as documented, computed here with hashlib alone: each stratum by blake2b-64 (little endian) of
    "salt NUL model NUL item", then the strata round robin."""
    def key(j: int) -> int:
        digest = hashlib.blake2b(f"{plan.salt}\0{model}\0{plan.items[j]}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little")

    queues = [sorted((j for j, h in enumerate(plan.strata) if h == s), key=key) for s in range(max(plan.strata) + 1)]
    return [q[r] for r in range(max(map(len, queues))) for q in queues if r < len(q)]


def test_the_estimate_is_unbiased_and_covers_by_design_even_when_the_anchors_are_wrong() -> None:
    Y, _ = population(n_items=600)
    plan = plan_for(Y, max_items=40)
    model = Y[399]  # a calibration model: the truth is its pool mean (the pool is the benchmark here)
    truth = float(model.mean())
    anchors, pool = model[:10].astype(np.float64), model[10:].astype(np.float64)
    for anchors_said in (truth, 0.15, 0.95):  # right, far too low, far too high
        est, inside = [], []
        for draw in range(300):
            p = replace(plan, salt=f"toy/{draw}")
            e = design_estimate(p, draw_order(p, "m")[:40], pool, anchors, anchors_said)
            est.append(e.predicted)
            inside.append(e.lower <= truth <= e.upper)
        # unbiased: the mean over draws is the truth within its Monte Carlo error (3 standard errors)
        assert abs(np.mean(est) - truth) < 3 * np.std(est) / np.sqrt(len(est)), anchors_said
        assert 0.85 <= np.mean(inside) <= 0.97, anchors_said
    # a control at the model's level narrows the spread; a wrong one only widens it
    spread = {said: np.std([design_estimate(replace(plan, salt=f"toy/{d}"), draw_order(replace(plan, salt=f"toy/{d}"),
                                                                                       "m")[:40],
                                            pool, anchors, said).predicted for d in range(200)])
              for said in (truth, 0.15)}
    assert spread[truth] < spread[0.15]


def test_answering_the_whole_pool_gives_the_exact_score_and_an_all_right_probe_still_a_width() -> None:
    Y, _ = population()
    plan = plan_for(Y, first=400, max_items=400)
    model = Y[350].astype(np.float64)
    whole = design_estimate(plan, draw_order(plan, "m"), model[10:], model[:10], 0.5)
    assert whole.predicted == pytest.approx(model.mean(), abs=1e-9)
    assert whole.design_halfwidth == pytest.approx(0.0, abs=1e-12)  # finite-population correction: nothing left
    ones = np.ones_like(model)
    part = design_estimate(plan, draw_order(plan, "m")[:40], ones[10:], ones[:10], 0.9)
    assert part.upper - part.lower > 0.02  # 40 right of 40 does not prove 100 %: the pseudo-answers


def test_a_lucky_sample_of_zero_one_items_is_no_narrower_than_the_control_expects() -> None:
    """On 0/1 items each stratum's variance is at least the Bernoulli variance the control expects there: a
    first batch that happens to agree (all right where the control says half) must not stop the probe early
    with a narrow interval (sequential stopping on a lucky variance is how its coverage would fall)."""
    Y, _ = population(n_items=600)
    plan = plan_for(Y)
    assert plan.binary
    order = draw_order(plan, "m")[:40]
    ones = np.ones(len(plan.items))
    from sparseeval.estimate.probe import control

    p_hat = control(plan, 0.5, np.ones(10))
    strata = np.asarray(plan.strata)
    floor = sum((np.mean(strata == h)) ** 2 * (1 - 10 / (strata == h).sum())
                * np.mean(p_hat[strata == h] * (1 - p_hat[strata == h])) / 10 for h in range(4))
    m, n_all = len(plan.items), len(plan.items) + 10
    least = plan.t_quantiles[40 - 4 - 1] * m / n_all * np.sqrt(floor)
    assert design_estimate(plan, order, ones, np.ones(10), 0.5).design_halfwidth >= least - 1e-12
    assert design_estimate(replace(plan, binary=False), order, ones, np.ones(10), 0.5).design_halfwidth < least


def test_the_probe_asks_a_first_batch_then_batches_while_too_wide_up_to_its_cap() -> None:
    Y, _ = population(n_items=600)
    model = Y[380].astype(np.float64)
    anchors, pool = model[:10], model[10:]
    plan = plan_for(Y, target=0.03, max_items=120)
    nothing = probe_state(plan, "m", np.full(len(plan.items), np.nan), anchors, 0.5)
    assert nothing.estimate is None and list(nothing.next_items) == draw_order(plan, "m")[:40].tolist()
    done = walk(plan, "m", pool, anchors, 0.5)
    assert done.done and done.answered == 120 and "cap" in done.reason  # 3 points needs more than 120 items
    loose = walk(replace(plan, target=0.2), "m", pool, anchors, 0.5)
    assert loose.done and loose.answered == 40 and "target" in loose.reason
    # a user asks for a narrower target than the predictor's: more items, the same draw
    asked = probe_state(plan, "m", np.where(np.isin(np.arange(len(pool)), draw_order(plan, "m")[:40]), pool, np.nan),
                        anchors, 0.5, target=0.01)
    assert list(asked.next_items) == draw_order(plan, "m")[40:60].tolist()


def test_answers_out_of_the_draws_order_are_not_a_random_sample() -> None:
    Y, _ = population()
    plan = plan_for(Y)
    model = Y[350].astype(np.float64)
    order = draw_order(plan, "m")
    answers = np.full(len(plan.items), np.nan)
    answers[order[:40]] = model[10:][order[:40]]
    answers[order[17]] = np.nan  # one item a run lost: within the 5 % (rounded up) a prefix may miss
    assert answered_prefix(order, answers) == (40, 39, 0)
    one_gap = probe_state(plan, "m", answers, model[:10], 0.5)
    assert one_gap.estimate is not None and one_gap.answered == 39
    answers[order[15:20]] = np.nan  # five in a row: what follows them is no longer the draw's random sample
    assert answered_prefix(order, answers) == (15, 15, 20)
    gaps = probe_state(plan, "m", answers, model[:10], 0.5)
    assert gaps.estimate is None and gaps.ignored == 20 and list(gaps.next_items) == order[15:40].tolist()
    # answers drawn for another name: none is the start of this model's draw, and the reason says so
    other = np.full(len(plan.items), np.nan)
    other[draw_order(plan, "someone else")[:40]] = 1.0
    state = probe_state(plan, "m", other, model[:10], 0.5)
    assert state.estimate is None and "drawn for another name" in state.reason
    # an anchor the run lost is counted at the anchors' expectation (up to 2 of 20); two of ten are asked for
    lost = np.where(np.isin(np.arange(len(plan.items)), order[:40]), model[10:], np.nan)
    twenty = plan_for(Y, k=20)
    assert probe_state(twenty, "m", np.where(np.isin(np.arange(len(twenty.items)), draw_order(twenty, "m")[:40]),
                                             model[20:], np.nan),
                       np.where(np.arange(20) == 3, np.nan, model[:20]), 0.5).estimate is not None
    asked = probe_state(plan, "m", lost, np.where(np.arange(10) < 2, np.nan, model[:10]), 0.5)
    assert asked.estimate is None and "2 remaining anchors" in asked.reason


def test_a_subset_pool_goes_through_a_line_whose_error_is_in_the_interval() -> None:
    Y, theta = population()
    full_score = 1 / (1 + np.exp(-1.3 * theta))  # the benchmark is more than these items
    ones = np.ones_like(Y[:300], dtype=bool)
    whole = fit_link(Y[:300], ones, Y[:300].mean(axis=1), cal_values=Y[300:], cal_observed=ones[:100],
                     cal_scores=Y[300:].mean(axis=1), cal_top=np.ones(100, bool), alpha=0.1)
    assert whole == Link()
    line = fit_link(Y[:300], ones, full_score[:300], cal_values=Y[300:], cal_observed=ones[:100],
                    cal_scores=full_score[300:], cal_top=np.ones(100, bool), alpha=0.1)
    assert not line.whole and line.slope > 0 and line.residual > 0
    with pytest.raises(UsageError, match="does not rise"):
        fit_link(Y[:300], ones, -full_score[:300], cal_values=Y[300:], cal_observed=ones[:100],
                 cal_scores=-full_score[300:], cal_top=np.ones(100, bool), alpha=0.1)
    plan = plan_for(Y, scores=full_score)
    mid = 300 + int(np.argmin(np.abs(full_score[300:] - 0.5)))  # a calibration model near the middle
    e = design_estimate(plan, draw_order(plan, "m")[:40], Y[mid, 10:].astype(np.float64), Y[mid, :10], 0.5)
    assert e.link_halfwidth == plan.link.residual > 0 and 0 < e.lower < e.upper < 1
    # the design's half-width and the line's add in quadrature (independent errors)
    assert (e.upper - e.lower) / 2 == pytest.approx(np.hypot(e.design_halfwidth, e.link_halfwidth))
    # the benches' variant: the score's rest (score - slope x items' mean) told by the anchors
    head = fit_link(Y[:300], ones, full_score[:300], cal_values=Y[300:], cal_observed=ones[:100],
                    cal_scores=full_score[300:], cal_top=np.ones(100, bool), alpha=0.1, anchor_columns=np.arange(10))
    assert len(head.weights) == 10 and head.slope == line.slope
    x = Y[350, :10].astype(np.float64)
    assert float(head.score(0.6, x)) == pytest.approx(head.intercept + np.dot(head.weights, x) + 0.6 * head.slope)
    assert float(head.pool_mean(head.score(0.6, x), x)) == pytest.approx(0.6)


def test_the_level_asks_the_models_the_anchors_cannot_tell_from_the_strongest_but_never_more_than_half() -> None:
    rng = np.random.default_rng(1)
    scores = rng.uniform(0.3, 0.8, 1000)
    pred = scores + rng.normal(0, 0.01, 1000)
    assert probe_level(pred, scores, 0.8) == pytest.approx(np.quantile(pred, 0.8))  # the anchors see the top
    # anchors that saturate: every model above 0.62 is predicted at one value, and some top ones below it
    blind = np.where(scores > 0.62, 0.62, scores)
    blind[np.argsort(scores)[-40:][:15]] = 0.58
    level = probe_level(blind, scores, 0.8)
    top = scores >= np.quantile(scores, 0.9)
    assert np.mean(blind[top] >= level) >= CATCH and level >= np.quantile(blind, 1 - MOST_ASKED)
    assert level < np.quantile(blind, 0.8)
    asked = routed(plan_for(population()[0]), np.array([0.1, 0.9]), np.array([True, False]))
    assert asked.tolist() == [True, True]


def test_strata_are_equal_counts_by_pass_rate() -> None:
    rates = np.array([0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4])
    assert strata_of(rates, 4).tolist() == [3, 0, 2, 1, 2, 0, 3, 1]  # {.1 .2} {.3 .4} {.5 .7} {.8 .9}


def test_a_plan_needs_a_pool_beyond_the_anchors_and_round_trips_as_json() -> None:
    Y, _ = population(n_items=15)
    with pytest.raises(UsageError, match="items beyond the anchors"):
        plan_for(Y, k=10)
    plan = plan_for(population()[0])
    stored = json.loads(json.dumps(plan.as_json()))
    assert stored["kind"] == KIND and plan_of({"probe": stored}) == plan
    assert plan_of({"probe": {"item_ids": ["x"], "threshold": 0.1}}) is None  # an older probe is not a plan


@pytest.mark.parametrize(("name", "bad"), [("frontier_silent_max", "15"), ("frontier_silent_max", "-0.1"),
                                           ("probe_items", "-1"), ("probe_target", "0"), ("probe_target", "80"),
                                           ("probe_batch", "0"), ("probe_from", "1")])
def test_settings_out_of_range_are_refused_naming_the_variable(monkeypatch, name: str, bad: str) -> None:
    monkeypatch.setenv(SETTINGS[name].env, bad)
    with pytest.raises(SettingError, match=SETTINGS[name].env):
        SETTINGS[name].value()


# ------------------------------------------------------------------------------------------------
# mmlu of the shared data, as a user meets it
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mmlu_frontier(tmp_path_factory):
    """``sparseeval fit`` with its defaults on a data folder holding mmlu's weakest 90 % (by full score), and
    the answers of the strongest 10 % it never saw (to every item)."""
    root = tmp_path_factory.mktemp("probe")
    scores = pl.read_parquet(OPENLLM_DIR / "scores.parquet").filter(pl.col("benchmark") == "mmlu")
    responses = pl.read_parquet(OPENLLM_DIR / "responses.parquet").filter(pl.col("benchmark") == "mmlu")
    _, beyond = frontier_cut(scores["score"].to_numpy(), 0.9)
    stronger = scores.filter(pl.Series(beyond))
    data = root / "weakest90"
    data.mkdir()
    keep = ~pl.col("model").is_in(stronger["model"].implode())
    responses.filter(keep).write_parquet(data / "responses.parquet")
    scores.filter(keep).write_parquet(data / "scores.parquet")
    out = root / "mmlu"
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert main(["fit", "--data", str(data), "--benchmark", "mmlu", "--seed", "0", "--frontier-quantile", "off",
                     "--out", str(out)]) == 0
    answers = responses.filter(~keep).rename({"correct": "score"})
    weaker = responses.filter(keep).rename({"correct": "score"})
    return out, answers, weaker, dict(zip(stronger["model"], stronger["score"], strict=True)), printed.getvalue()


def _cli_json(args: list[str], capsys) -> list[dict]:
    capsys.readouterr()
    assert main([*args, "--json", "-"]) == 0
    return json.loads(capsys.readouterr().out)


def _predict(folder: Path, answers: pl.DataFrame, sheet: Path, capsys) -> dict[str, dict]:
    answers.write_csv(sheet)
    return {r["model"]: r for r in _cli_json(["predict", "--predictor", str(folder), "--answers", str(sheet),
                                               "--no-db"], capsys)}


@needs_real_data
@pytest.mark.slow
def test_the_mmlu_frontier_is_estimated_by_its_probe_as_next_asks_and_predict_says_so(mmlu_frontier, tmp_path: Path,
                                                                                     capsys) -> None:
    folder, answers, _, truth, printed = mmlu_frontier
    meta = json.loads((folder / "predictor.json").read_text())
    plan = plan_of(meta["extra"])
    assert plan is not None and not plan.link.whole and "probe: asked of predictions" in printed
    anchors = [a["item_id"] for a in meta["anchors"]]
    alone = _predict(folder, answers.filter(pl.col("item_id").is_in(anchors)), tmp_path / "a.csv", capsys)
    asked = [m for m, r in alone.items() if r["probe_next"]]
    assert len(asked) > 0.8 * len(alone)  # the anchors place most of the stronger models at the top
    assert all(r["stage"] == "anchors" and any("its probe" in w for w in r["warnings"]) for m, r in alone.items()
               if m in asked)
    # next names each model's own first batch (its draw), the same items export --probe-for gives
    sheet = tmp_path / "anchors.csv"
    answers.filter(pl.col("item_id").is_in(anchors)).write_csv(sheet)
    steps = {s["model"]: s for s in _cli_json(["next", "--predictor", str(folder), "--answers", str(sheet)], capsys)}
    model = asked[0]
    named = [n["item_id"] for n in steps[model]["next"]]
    assert len(named) == plan.first_items and all(n["probe"] for n in steps[model]["next"])
    exported = tmp_path / "probe.csv"
    assert main(["export", "--predictor", str(folder), "--format", "csv", "--probe-for", model,
                 "--out", str(exported)]) == 0
    assert pl.read_csv(exported).filter(pl.col("position").is_null())["item_id"].to_list() == named
    # each model answers what next names, until it names nothing more
    given = answers.filter(pl.col("item_id").is_in(anchors))
    for _ in range(10):
        given.write_csv(sheet)
        steps = _cli_json(["next", "--predictor", str(folder), "--answers", str(sheet)], capsys)
        todo = pl.DataFrame([(s["model"], n["item_id"]) for s in steps for n in s["next"]],
                            schema={"model": pl.String, "item_id": pl.String}, orient="row")
        if todo.height == 0:
            break
        given = pl.concat([given, answers.join(todo, on=["model", "item_id"])])
    else:
        raise AssertionError("next never said done")
    final = _predict(folder, given, tmp_path / "final.csv", capsys)
    probed = [m for m, r in final.items() if r["stage"] == "probe"]
    assert set(probed) == set(asked)
    err = np.array([final[m]["predicted"] - truth[m] for m in final])
    before = np.array([alone[m]["predicted"] - truth[m] for m in final])
    inside = np.mean([final[m]["lower"] <= truth[m] <= final[m]["upper"] for m in probed])
    assert np.mean(np.abs(err)) < 0.5 * np.mean(np.abs(before))  # 8.6 points from the anchors alone
    assert abs(np.mean(err[[m in probed for m in final]])) < 0.02 and inside >= 0.85
    r = final[probed[0]]
    assert r["anchors_predicted"] == pytest.approx(alone[probed[0]]["predicted"])
    assert any("estimated by design" in w for w in r["warnings"]) and r["probe_items"] >= plan.first_items


@needs_real_data
@pytest.mark.slow
def test_a_model_not_at_the_top_keeps_the_anchors_estimate_exactly(mmlu_frontier, tmp_path: Path, capsys) -> None:
    folder, _, weaker, _, _ = mmlu_frontier
    some = weaker.filter(pl.col("model").is_in(weaker["model"].unique().sort().head(300).implode()))
    meta = json.loads((folder / "predictor.json").read_text())
    anchors = [a["item_id"] for a in meta["anchors"]]
    alone = _predict(folder, some.filter(pl.col("item_id").is_in(anchors)), tmp_path / "a.csv", capsys)
    everything = _predict(folder, some, tmp_path / "b.csv", capsys)  # every item answered, probe ones too
    ordinary = [m for m, r in alone.items() if not r["probe_next"]]
    assert len(ordinary) > 100
    for m in ordinary:
        assert (everything[m]["predicted"], everything[m]["lower"], everything[m]["upper"], everything[m]["stage"]) \
            == (alone[m]["predicted"], alone[m]["lower"], alone[m]["upper"], "anchors")


@needs_real_data
@pytest.mark.slow
def test_compare_adds_two_probes_errors_in_quadrature(mmlu_frontier, tmp_path: Path, capsys) -> None:
    folder, answers, _, truth, _ = mmlu_frontier
    a, b = sorted(truth)[:2]
    two = answers.filter(pl.col("model").is_in([a, b]))
    rows = _predict(folder, two, tmp_path / "two.csv", capsys)
    assert rows[a]["stage"] == rows[b]["stage"] == "probe"
    [c] = _cli_json(["compare", "--predictor", str(folder), "--answers", str(tmp_path / "two.csv"), a, b], capsys)
    half = np.hypot(*[(rows[m]["upper"] - rows[m]["lower"]) / 2 for m in (a, b)])
    assert c["upper"] - c["lower"] == pytest.approx(2 * half)
    assert c["diff"] == pytest.approx(rows[a]["predicted"] - rows[b]["predicted"]) and not c["open_sides"]


def test_following_the_probe_stops_where_a_model_cannot_answer_what_it_is_asked() -> None:
    """The self-check and the benches walk each stronger model through its probe; one with an anchor or a
    probe item it has no answer to (a dropped cell) is asked for it forever unless the walk stops there."""
    from sparseeval.estimate.fitting import ProbeSettings, fit_predictor
    from sparseeval.estimate.predicting import answer_matrices, follow_probe

    Y, _ = population(n_models=500, n_items=120, seed=3)
    long = pl.DataFrame({"model": np.repeat([f"org{i % 9}/m{i}" for i in range(500)], 120), "benchmark": "toy",
                         "item_id": np.tile([f"i{j}" for j in range(120)], 500), "score": Y.ravel()})
    art = fit_predictor(long, None, "toy", 8, "sparseeval-linear", device="cpu", row_mean_is_score=True,
                        probe=ProbeSettings(target=0.001, max_items=60))
    plan = plan_of(art.extra)
    assert plan is not None
    best = [f"org{i % 9}/m{i}" for i in np.argsort(-Y.mean(axis=1))[:6]]
    models, X, P = answer_matrices(art, long.filter(pl.col("model").is_in(best)))
    P[1, draw_order(plan, models[1])[40:45]] = np.nan  # five dropped cells right after its first batch
    X[2, 0] = np.nan  # a dropped anchor
    preds = follow_probe(art, models, X, P)
    assert [p.stage for p in preds] == ["probe", "probe", "anchors", "probe", "probe", "probe"]
    assert preds[0].probe_items == 60 and preds[1].probe_items == 40  # the cap; the gaps stop it
    # the walk answered its first batch; what it still lacks is the anchor, which it cannot answer
    assert preds[2].probe_items == 0 and "answer its 1 remaining anchors" in " ".join(preds[2].warnings)
