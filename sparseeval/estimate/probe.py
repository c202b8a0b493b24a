"""The second stage: a random probe whose estimate and interval hold by design where the anchors are blind.

Why: anchors chosen on the training models cannot place a model stronger than all of them (on the
shared mmlu the items that rise most beyond the strongest training models look least informative
below them; docs/results/frontier.md, round 11). Items drawn *at random* from the benchmark's pool do:
the mean of a random sample is unbiased for the pool's mean whatever the model, and its sampling
error is computed from the model's own answers. So a model the anchors place at the top of their range
(:func:`routed`) answers a random probe, and its estimate and interval come from the probe
(:func:`probe_state`), not from exchangeability with the calibration models:

* **the draw** (:func:`draw_order`): the pool's items beyond the anchors, cut into :data:`STRATA`
  equal strata by their training pass rate, each stratum in a random order of its own, taken round
  robin, so every prefix is stratified. Drawn afresh for each model, reproducibly from the model's name
  (a hash: the same order in ``next``, ``predict``, ``compare``, the lm-eval task and the pipeline, on
  any NumPy), so no one draw's luck is shared by every model;
* **the control** (AIPW): each item's expected answer at the level the anchors put the model
  (``sigmoid(logit(pass rate) + shift)``, the shift matching the anchors' estimate), corrected by the
  probe's mean residual per stratum. The correction makes the estimate unbiased whatever the anchors
  said; the control only lowers its variance;
* **the interval**: the stratified residual variance with the finite-population correction, a
  Student t quantile, and four pseudo-answers per stratum so a probe answered all right still gets
  a width (on 0/1 items, never below the Bernoulli variance the control expects in the stratum: a lucky
  first batch must not stop the probe early); on a *subset* pool (the items are not the whole
  benchmark: the shared v1 data) a line fitted on the training models maps the pool's mean to the
  score, and its error at the top widens the interval (that part is a model, not a design);
* **as long as it needs to be**: the first :attr:`ProbePlan.first` items, then batches of
  :attr:`ProbePlan.batch` while the sampling half-width is above :attr:`ProbePlan.target`, up to
  :attr:`ProbePlan.max_items`.

Everything here is NumPy and the standard library (the light install's predict path); the plan is
fitted by :mod:`sparseeval.estimate.probe_fit` and stored as plain JSON (``extra["probe"]``).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

#: the plan's format (an ``extra["probe"]`` without it is the disagreement probe of rounds 8-11: ignored)
KIND = "design"
#: strata of the draw (equal counts by training pass rate): 40 items are 10 per stratum, a batch of 20 is 5
STRATA = 4
#: pseudo-answers per stratum share added to the residual variance (two at each side of the mean, 0.5 away)
PSEUDO = 4
#: the share of a probed model's draw prefix it may leave unanswered (:func:`answered_prefix`)
GAP_SHARE = 0.05
#: the share of its anchors a probed model may leave unanswered (2 of 20)
ANCHORS_MISSING_SHARE = 0.1
#: how the estimate's reasons and warnings name it
STAGE_PROBE, STAGE_ANCHORS = "probe", "anchors"
#: a reason that the line from the pool's mean to the score is extrapolated (a subset pool only)
LINE_BEYOND = "the line from the probe's items to the score is extrapolated"


@dataclass(frozen=True)
class Link:
    """From the pool's mean to the benchmark score: the identity when the pool is the whole benchmark (the
    score is the mean of its items), else ``intercept + slope * pool mean + weights . anchor answers``
    fitted on the training models (``weights`` empty: a line), with its residual half-width ``residual``
    (the larger of its ``1 - alpha`` quantile on calibration models at the top and beyond its fitting
    models) and the training models' largest pool mean ``pool_max`` (beyond it the link is extrapolated)."""

    intercept: float = 0.0
    slope: float = 1.0
    residual: float = 0.0
    pool_max: float = 1.0
    whole: bool = True
    weights: tuple[float, ...] = ()

    def offset(self, anchor_answers: np.ndarray | None) -> float:
        """The part of the score the pool's mean does not carry: the intercept, plus what the anchors say."""
        if not self.weights or anchor_answers is None:
            return self.intercept
        return self.intercept + float(np.dot(self.weights, np.asarray(anchor_answers, dtype=np.float64)))

    def score(self, pool_mean: np.ndarray | float, anchor_answers: np.ndarray | None = None) -> np.ndarray:
        return self.offset(anchor_answers) + self.slope * np.asarray(pool_mean, dtype=np.float64)

    def pool_mean(self, score: np.ndarray | float, anchor_answers: np.ndarray | None = None) -> np.ndarray:
        return (np.asarray(score, dtype=np.float64) - self.offset(anchor_answers)) / self.slope


@dataclass(frozen=True)
class ProbePlan:
    """A published predictor's probe (``extra["probe"]``): the pool beyond the anchors and how to ask it.

    ``items``, ``locations``, ``pass_rates``, ``strata``: the non-anchor items (lm-eval task and doc index,
    training pass rate, stratum); ``anchor_pass_rates``: the anchors' (the control's level is matched over
    the whole pool); ``level``: a prediction at or above it (the ``level_quantile`` quantile of the
    calibration models' predictions) asks for the probe; ``t_quantiles[d - 1]``: Student t's
    ``1 - alpha / 2`` quantile at ``d`` degrees of freedom; ``salt``: what, with the model's name, seeds its
    draw (the benchmark and the seed: a refit on the same anchors keeps every model's draw)."""

    items: tuple[str, ...]
    locations: tuple[tuple[str | None, int | None], ...]
    pass_rates: tuple[float, ...]
    strata: tuple[int, ...]
    anchor_pass_rates: tuple[float, ...]
    link: Link
    level: float
    level_quantile: float
    first: int
    batch: int
    max_items: int
    target: float
    alpha: float
    t_quantiles: tuple[float, ...]
    salt: str
    n_calibration_probed: int = 0
    #: every answer of the training models is 0 or 1: a stratum's variance is then at least the Bernoulli
    #: variance the control expects there (a lucky sample must not stop the probe early with a narrow interval)
    binary: bool = False

    @property
    def pool_size(self) -> int:
        return len(self.items) + len(self.anchor_pass_rates)

    @property
    def first_items(self) -> int:
        """The first batch, at most the whole pool beyond the anchors."""
        return min(self.first, len(self.items))

    @property
    def cap(self) -> int:
        return min(self.max_items, len(self.items))

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["locations"] = [list(loc) for loc in self.locations]
        return {"kind": KIND, **{k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProbePlan:
        fields = {k: v for k, v in d.items() if k != "kind"}
        fields["link"] = Link(**{**fields["link"], "weights": tuple(fields["link"].get("weights", ()))})
        fields["locations"] = tuple((t, None if i is None else int(i)) for t, i in fields["locations"])
        for key in ("items", "pass_rates", "strata", "anchor_pass_rates", "t_quantiles"):
            fields[key] = tuple(fields[key])
        return cls(**fields)


def plan_of(extra: dict[str, Any]) -> ProbePlan | None:
    """The predictor's probe plan (None: it has none, or only the disagreement probe of an older fit)."""
    probe = extra.get("probe")
    return ProbePlan.from_json(probe) if isinstance(probe, dict) and probe.get("kind") == KIND else None


def older_probe(extra: dict[str, Any]) -> bool:
    """Whether the predictor carries the probe of rounds 8-11 (a disagreement check this library no longer
    runs: such a predictor is used from its anchors alone, and says so)."""
    probe = extra.get("probe")
    return isinstance(probe, dict) and probe.get("kind") != KIND


def _key(*parts: str) -> int:
    """A 64-bit hash of ``parts``: the random order of a draw, the same on every platform and NumPy."""
    return int.from_bytes(hashlib.blake2b("\0".join(parts).encode(), digest_size=8).digest(), "little")


def draw_order(plan: ProbePlan, model: str) -> np.ndarray:
    """Positions in ``plan.items`` in the order ``model`` answers them: each stratum in its own random
    order (hashed from the plan's salt, the model and the item), the strata taken round robin, so any
    prefix holds each stratum's share (within one item)."""
    strata = np.asarray(plan.strata)
    queues = []
    for h in range(int(strata.max()) + 1):
        members = np.flatnonzero(strata == h)
        keys = [_key(plan.salt, model, plan.items[j]) for j in members]
        queues.append(members[np.argsort(keys, kind="stable")])
    out = [q[r] for r in range(max(map(len, queues))) for q in queues if r < len(q)]
    return np.asarray(out, dtype=np.int64)


def routed(plan: ProbePlan, predicted: np.ndarray, upward: np.ndarray) -> np.ndarray:
    """Which models the anchors place in the top region: predicted at or above the plan's level, or
    flagged as possibly above the training range (``upward``)."""
    return (np.asarray(predicted) >= plan.level) | np.asarray(upward, dtype=bool)


@dataclass(frozen=True)
class DesignEstimate:
    """A routed model's score from its probe (scores in [0, 1])."""

    predicted: float
    lower: float
    upper: float
    #: the sampling half-width (what more items shrink) and the line's (a subset pool's; 0 on a whole one)
    design_halfwidth: float
    link_halfwidth: float
    pool_mean: float
    #: the line is extrapolated beyond the training models' pool means (a subset pool only)
    beyond_line: bool


@dataclass(frozen=True)
class ProbeState:
    """Where a routed model stands with its probe: the items of its draw it answered in order (``answered``:
    answers in the prefix used; ``ignored``: answers to items after it, not a random sample), its estimate once
    the first batch is answered, and what to run next (positions in the plan's items; empty: done)."""

    model: str
    answered: int
    ignored: int
    estimate: DesignEstimate | None
    next_items: tuple[int, ...] = field(default_factory=tuple)
    reason: str = ""

    @property
    def done(self) -> bool:
        return not self.next_items


def _shift(logits: np.ndarray, target: float) -> float:
    """The shift ``d`` with ``mean(sigmoid(logits + d)) = target`` (monotone in ``d``: bisection)."""
    target = float(np.clip(target, 1e-4, 1 - 1e-4))
    lo, hi = -40.0, 40.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if np.mean(1.0 / (1.0 + np.exp(-(logits + mid)))) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


def control(plan: ProbePlan, anchors_predicted: float, anchor_answers: np.ndarray | None = None) -> np.ndarray:
    """Each probe item's expected answer at the level the anchors put the model: the training pass rates
    shifted on the logit scale until the whole pool's expected mean is the anchors' estimate (through the
    link). Any control keeps the estimate unbiased; a good one narrows it."""
    pool = _logit(np.concatenate([plan.pass_rates, plan.anchor_pass_rates]))
    d = _shift(pool, float(plan.link.pool_mean(anchors_predicted, anchor_answers)))
    return 1.0 / (1.0 + np.exp(-(_logit(np.asarray(plan.pass_rates)) + d)))


def answered_prefix(order: np.ndarray, answers: np.ndarray) -> tuple[int, int, int]:
    """(how far into its draw a model's answers reach, how many of those items it answered, answers to items
    beyond): the longest prefix of the draw, ending on an answered item, with at most :data:`GAP_SHARE` of
    it unanswered (rounded up: one anywhere in the first 20). Why a few gaps: a harness run loses an item
    now and then, and a dropped cell of the training data is not a chosen one; why so few: more is no longer
    the random sample the interval is about (a model that left out its wrong answers would look stronger)."""
    done = ~np.isnan(answers[order])
    gaps = np.cumsum(~done)
    length = np.arange(1, done.size + 1)
    ok = done & (gaps <= np.ceil(GAP_SHARE * length))
    covered = int(length[ok][-1]) if ok.any() else 0
    return covered, int(done[:covered].sum()), int(done[covered:].sum())


def design_estimate(plan: ProbePlan, sample: np.ndarray, answers: np.ndarray, anchor_answers: np.ndarray,
                    anchors_predicted: float) -> DesignEstimate:
    """The stratified AIPW estimate from the probe items ``sample`` (positions: the answered items of a
    prefix of the model's draw) answered ``answers`` (aligned with ``plan.items``) and the anchors answered
    ``anchor_answers`` (an unanswered one, at most :func:`anchors_missing_allowed`, counts at the control's
    expectation, its Bernoulli variance added)."""
    strata = np.asarray(plan.strata)
    p_hat = control(plan, anchors_predicted, anchor_answers)
    m, n = len(plan.items), sample.size
    mean_u, var_u = 0.0, 0.0
    sampled = strata[sample]
    for h in range(int(strata.max()) + 1):
        members = strata == h
        size, taken = int(members.sum()), sample[sampled == h]
        w = size / m
        if taken.size == 0:  # a stratum the gaps emptied: its items at the control's expectation, at most variance
            mean_u += w * p_hat[members].mean()
            var_u += w * w * 0.25
            continue
        resid = answers[taken] - p_hat[taken]
        mean_u += w * (p_hat[members].mean() + resid.mean())
        share = taken.size / n * PSEUDO
        s2 = (np.sum((resid - resid.mean()) ** 2) + share * 0.25) / max(taken.size - 1 + share, 1e-9)
        if plan.binary:
            s2 = max(s2, float(np.mean(p_hat[members] * (1 - p_hat[members]))))
        var_u += w * w * (1 - taken.size / size) * s2 / taken.size
    k = anchor_answers.size
    missing = np.isnan(anchor_answers)
    anchor_p = np.asarray(plan.anchor_pass_rates)
    filled = _fill(anchor_p[missing], plan, anchors_predicted, anchor_answers)
    pool_mean = (float(np.nansum(anchor_answers)) + float(filled.sum()) + m * mean_u) / (m + k)
    var = (m / (m + k)) ** 2 * max(var_u, 0.0) + float(np.sum(filled * (1 - filled))) / (m + k) ** 2
    df = max(n - (int(strata.max()) + 1), 1)
    t = plan.t_quantiles[min(df, len(plan.t_quantiles)) - 1]
    link = plan.link
    anchors_for_link = np.where(missing, 0.0, anchor_answers) if missing.any() else anchor_answers
    if missing.any():
        anchors_for_link[missing] = filled
    score = float(link.score(pool_mean, anchors_for_link))
    design = abs(link.slope) * t * float(np.sqrt(var))
    half = float(np.hypot(design, link.residual))
    return DesignEstimate(predicted=float(np.clip(score, 0.0, 1.0)), lower=max(score - half, 0.0),
                          upper=min(score + half, 1.0), design_halfwidth=float(design),
                          link_halfwidth=float(link.residual), pool_mean=float(pool_mean),
                          beyond_line=(not link.whole) and pool_mean > link.pool_max)


def _fill(rates: np.ndarray, plan: ProbePlan, anchors_predicted: float, anchor_answers: np.ndarray) -> np.ndarray:
    """Unanswered anchors' expected answers at the anchors' level (the control's shift, on their pass rates)."""
    if rates.size == 0:
        return rates
    pool = _logit(np.concatenate([plan.pass_rates, plan.anchor_pass_rates]))
    known = np.where(np.isnan(anchor_answers), np.nan, anchor_answers)
    d = _shift(pool, float(plan.link.pool_mean(anchors_predicted, np.nan_to_num(known))))
    return 1.0 / (1.0 + np.exp(-(_logit(rates) + d)))


def anchors_missing_allowed(k: int) -> int:
    """How many of ``k`` anchors a probed model may leave unanswered (:data:`ANCHORS_MISSING_SHARE` of them,
    rounded down): each counts in the items' mean at the control's expectation, so few, and of a large pool."""
    return int(np.floor(ANCHORS_MISSING_SHARE * k))


def probe_state(plan: ProbePlan, model: str, answers: np.ndarray, anchor_answers: np.ndarray,
                anchors_predicted: float, *, target: float | None = None) -> ProbeState:
    """A routed ``model``'s probe: its estimate from the answered prefix of its draw (``answers``: aligned
    with ``plan.items``, NaN = not answered; :func:`answered_prefix`) once the first batch is in, and the next
    batch while the sampling half-width is above ``target`` (default: the plan's) and the cap is not reached.
    A model with more anchors unanswered than :func:`anchors_missing_allowed` is asked for them first."""
    order = draw_order(plan, model)
    covered, n, ignored = answered_prefix(order, answers)
    target = plan.target if target is None else target
    unanswered = int(np.isnan(anchor_answers).sum())
    if unanswered > anchors_missing_allowed(anchor_answers.size):
        return ProbeState(model, n, ignored, None, tuple(order[covered:max(plan.first_items, covered)].tolist()),
                          f"answer its {unanswered} remaining anchors and the first {plan.first_items} items of its "
                          "probe")
    if covered < plan.first_items:
        stray = (f"; its answers to {ignored} other probe items are not the start of the draw for the name "
                 f"{model!r} (drawn for another name? each model's probe is drawn from its name)") if ignored else ""
        return ProbeState(model, n, ignored, None, tuple(order[covered:plan.first_items].tolist()),
                          f"answer the first {plan.first_items} items of its probe ({n} answered in order){stray}")
    sample = order[:covered][~np.isnan(answers[order[:covered]])]
    est = design_estimate(plan, sample, answers, anchor_answers, anchors_predicted)
    if est.design_halfwidth <= target or covered >= plan.cap:
        why = (f"sampling half-width {100 * est.design_halfwidth:.1f} <= target {100 * target:.1f} points"
               if est.design_halfwidth <= target else f"the probe's cap of {plan.cap} items is reached")
        return ProbeState(model, n, ignored, est, (), why)
    more = order[covered:min(covered + plan.batch, plan.cap)]
    return ProbeState(model, n, ignored, est, tuple(more.tolist()),
                      f"sampling half-width {100 * est.design_halfwidth:.1f} > target {100 * target:.1f} points: "
                      f"{more.size} more of its probe's items")


def walk(plan: ProbePlan, model: str, pool_answers: np.ndarray, anchor_answers: np.ndarray,
         anchors_predicted: float, *, target: float | None = None) -> ProbeState:
    """The probe as a user who follows ``next`` meets it, for a model whose answers to every pool item
    are known (``pool_answers``): the first batch, then a batch at a time until ``next`` says done. The
    frontier self-check and the benches score with it, so their figures are what a user gets."""
    order = draw_order(plan, model)
    answers = np.full(len(plan.items), np.nan)
    n = plan.first_items
    while True:
        answers[order[:n]] = pool_answers[order[:n]]
        state = probe_state(plan, model, answers, anchor_answers, anchors_predicted, target=target)
        if state.done:
            return state
        n += len(state.next_items)
