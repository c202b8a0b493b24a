"""Fitting a predictor's probe plan (:mod:`sparseeval.estimate.probe`): fit time only (SciPy for the t quantiles).

Everything is fitted on the models a predictor was fitted or calibrated on, never on the models it
scores: the pass rates and the line on the fitting models, the probe level and the line's residual on
the calibration models (held out from the estimator, so their anchor predictions err as a new model's do).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy import stats

from sparseeval.core import settings as defaults
from sparseeval.core.errors import UsageError
from sparseeval.estimate.calibration import conformal_quantile
from sparseeval.estimate.probe import STRATA, Link, ProbePlan

#: fewest fitting models with every item answered that fit a subset pool's line
MIN_LINE_MODELS = 30
#: fewest calibration models at the probe level whose residual the line's half-width is taken from
#: (fewer: every calibration model's)
MIN_TOP_MODELS = 30
#: the level asks at least this share of the calibration models that score in their top :data:`TOP_SHARE`
CATCH = 0.95
TOP_SHARE = 0.1
#: ... but never more than this share of the calibration models (the level is at least their median prediction)
MOST_ASKED = 0.5
#: a model's items' mean fits or checks a subset pool's line when it answered at least this share of them
MIN_ANSWERED = 0.9
#: the largest gap between a fitting model's score and its items' mean for the pool to count as the whole
#: benchmark (scores are stored as float32)
WHOLE_POOL_TOLERANCE = 1e-4


def pass_rates(values: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Each item's smoothed pass rate among the rows given ((sum + 0.5) / (answered + 1): never 0 or 1, so
    its logit is finite for an item nobody, or everybody, got right)."""
    total = np.where(observed, values, 0.0).sum(axis=0)
    return (total + 0.5) / (observed.sum(axis=0) + 1.0)


def strata_of(rates: np.ndarray, n_strata: int = STRATA) -> np.ndarray:
    """Equal-count strata by pass rate (ties in column order): stratum 0 the hardest items."""
    rank = np.empty(rates.size, dtype=np.int64)
    rank[np.argsort(rates, kind="stable")] = np.arange(rates.size)
    return (rank * n_strata) // rates.size


def pool_means(values: np.ndarray, observed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each row's mean over the items it answered, whether it answered at least :data:`MIN_ANSWERED` of
    them): the pool mean of a model with a few cells missing (the embedded leaderboard drops some at
    random) is its mean over the rest; one that answered less is not used to fit or check a line."""
    answered = observed.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(observed, values, 0.0).sum(axis=1) / answered
    return means, answered >= MIN_ANSWERED * observed.shape[1]


def fit_link(values: np.ndarray, observed: np.ndarray, scores: np.ndarray, *, cal_values: np.ndarray,
             cal_observed: np.ndarray, cal_scores: np.ndarray, cal_top: np.ndarray, alpha: float,
             anchor_columns: np.ndarray | None = None) -> Link:
    """The link from the pool's mean to the score: the identity when every fitting model that answered
    every item scores exactly its mean (the pool is the benchmark), else a least-squares line on the
    fitting models that answered nearly every item, its half-width the larger of the ``1 - alpha``
    conformal quantile of its residual on the calibration models in ``cal_top`` (on every calibration
    model when fewer than :data:`MIN_TOP_MODELS`) and its error beyond its fitting models'
    (:func:`_beyond_residual`).

    Why a line and not a curve: on a subset pool no link is right beyond the training models (on the shared
    v1 data the models above the 90th percentile score 4-6 points more than training models with the same
    items' mean); the line is the only one that extrapolates on mmlu (1.8 points with every item, where an
    isotonic or quadratic link misses by 5.8 or 2.9), and its error at the top is what its half-width takes
    (docs/results/second_stage.md)."""
    full = observed.all(axis=1)
    if full.sum() >= MIN_LINE_MODELS and \
            np.max(np.abs(values[full].mean(axis=1) - scores[full])) <= WHOLE_POOL_TOLERANCE:
        return Link()
    means, usable = pool_means(values, observed)
    if usable.sum() < MIN_LINE_MODELS:
        raise UsageError(f"{int(usable.sum())} fitting models answered at least {100 * MIN_ANSWERED:g} % of the "
                         f"items; the line from a probe's items to the score needs at least {MIN_LINE_MODELS}")
    slope, intercept = np.polyfit(means[usable], scores[usable], 1)
    if slope <= 0:
        raise UsageError(f"the items' mean does not rise with the score on the fitting models (slope {slope:.3f})")
    cal_means, cal_usable = pool_means(cal_values, cal_observed)
    top = cal_usable & cal_top if (cal_usable & cal_top).sum() >= MIN_TOP_MODELS else cal_usable
    if not top.any():
        raise UsageError("no calibration model answered enough of the items: the line's error cannot be measured")
    link = Link(intercept=float(intercept), slope=float(slope), pool_max=float(means[usable].max()), whole=False)
    if anchor_columns is not None:
        link = _with_anchor_head(link, values[usable][:, anchor_columns], scores[usable] - slope * means[usable])
    anchors_cal = None if anchor_columns is None else cal_values[top][:, anchor_columns]
    resid = cal_scores[top] - np.array([float(link.score(m, None if anchors_cal is None else anchors_cal[i]))
                                        for i, m in enumerate(cal_means[top])])
    half = max(conformal_quantile(np.abs(resid), alpha), _beyond_residual(means[usable], scores[usable], alpha))
    return replace(link, residual=half)


def _with_anchor_head(link: Link, anchors: np.ndarray, rest: np.ndarray) -> Link:
    """The link with a ridge of the score's rest (score - slope x pool mean) on the anchors' answers: the part
    of the score the pool's items do not carry, as the anchors tell it (an experiment: the "residual head"
    of docs/results/second_stage.md)."""
    from sklearn.linear_model import RidgeCV

    head = RidgeCV(alphas=np.logspace(-2, 4, 13)).fit(anchors, rest)
    return replace(link, intercept=float(head.intercept_), weights=tuple(float(w) for w in head.coef_))


def _beyond_residual(means: np.ndarray, scores: np.ndarray, alpha: float) -> float:
    """The line's error on models stronger than those it is fitted on: refitted on the fitting models at or
    below their :data:`TOP_SHARE` score cut, its ``1 - alpha`` conformal quantile on the ones above (0 with
    too few of them). Why: the line's error where it extrapolates is larger than at the top of its range
    (the shared mmlu: 4.4 points above the cut of its fitting models, 3.2 at the top of its calibration
    models), and the models the probe is for are the ones beyond."""
    above = scores > np.quantile(scores, 1 - TOP_SHARE)
    if above.sum() < MIN_TOP_MODELS or (~above).sum() < MIN_LINE_MODELS:
        return 0.0
    slope, intercept = np.polyfit(means[~above], scores[~above], 1)
    return conformal_quantile(np.abs(scores[above] - (intercept + slope * means[above])), alpha)


def probe_level(pred_cal: np.ndarray, cal_scores: np.ndarray, level_quantile: float) -> float:
    """The prediction from which a model is asked the probe: the ``level_quantile`` quantile of the calibration
    models' predictions, lowered until it asks :data:`CATCH` of the calibration models that *score* in their
    top :data:`TOP_SHARE`, but never below their median prediction (:data:`MOST_ASKED`).

    Why lowered: where the anchors cannot tell the strongest models from a cluster just below them (the shared
    mmlu: 15 % of the calibration models tie at one prediction, and a fifth of the models above the 90th
    percentile are predicted below it), a level set by share alone leaves those stronger models to the
    anchors, which miss them by 8 points with no flag. Asking every model the anchors cannot tell from the
    strongest training models costs probe items on more ordinary models (mmlu: about half), never a worse
    estimate for a stronger one (docs/results/second_stage.md)."""
    by_share = float(np.quantile(pred_cal, level_quantile))
    strongest = pred_cal[cal_scores >= np.quantile(cal_scores, 1 - TOP_SHARE)]
    catch = float(np.quantile(strongest, 1 - CATCH)) if strongest.size else by_share
    return max(min(by_share, catch), float(np.quantile(pred_cal, 1 - MOST_ASKED)))


def fit_plan(*, items: list[str], locations: list[tuple[str | None, int | None]], values: np.ndarray,
             observed: np.ndarray, scores: np.ndarray, anchor_columns: np.ndarray, cal_values: np.ndarray,
             cal_observed: np.ndarray, cal_scores: np.ndarray, pred_cal: np.ndarray, alpha: float, salt: str,
             level_quantile: float = defaults.SETTINGS["probe_from"].default_value,
             first: int = defaults.SETTINGS["probe_items"].default_value,
             batch: int = defaults.SETTINGS["probe_batch"].default_value,
             max_items: int = defaults.SETTINGS["probe_max"].default_value,
             target: float = defaults.SETTINGS["probe_target"].default_value / 100,
             anchor_head: bool = False) -> ProbePlan:
    """A predictor's probe plan from its fitting models (``values``/``observed``/``scores``: every item) and
    its calibration models (``cal_*``, with ``pred_cal``: the predictor's own predictions from their anchors,
    as ``predict`` makes them). ``items``/``locations``: every matrix column's id and lm-eval place;
    ``anchor_columns``: the anchors' columns. ``target``: the sampling half-width (score units) at which a
    probed model is done. Refuses (``UsageError``, with why) a pool too small to stratify or a subset pool
    whose line cannot be fitted."""
    if not 0.0 < level_quantile < 1.0:
        raise UsageError(f"the probe's level quantile must be in (0, 1), got {level_quantile}")
    pool = np.setdiff1d(np.arange(len(items)), np.asarray(anchor_columns))
    if pool.size < 2 * STRATA:
        raise UsageError(f"{pool.size} items beyond the anchors; a probe needs at least {2 * STRATA}")
    rates = pass_rates(values, observed)
    level = probe_level(pred_cal, cal_scores, level_quantile)
    top = pred_cal >= level
    # the line's error where stronger models are: the calibration models that *score* in the top share
    scoring_top = cal_scores >= np.quantile(cal_scores, level_quantile)
    link = fit_link(values, observed, scores, cal_values=cal_values, cal_observed=cal_observed,
                    cal_scores=cal_scores, cal_top=scoring_top, alpha=alpha,
                    anchor_columns=np.asarray(anchor_columns) if anchor_head else None)
    cap = max(max_items, first)
    return ProbePlan(
        items=tuple(items[c] for c in pool), locations=tuple(locations[c] for c in pool),
        pass_rates=tuple(float(r) for r in rates[pool]), strata=tuple(int(h) for h in strata_of(rates[pool])),
        anchor_pass_rates=tuple(float(r) for r in rates[np.asarray(anchor_columns)]), link=link, level=level,
        level_quantile=float(level_quantile), first=int(first), batch=int(batch), max_items=int(cap),
        target=float(target), alpha=float(alpha),
        t_quantiles=tuple(float(stats.t.ppf(1 - alpha / 2, df)) for df in range(1, cap + 1)), salt=salt,
        n_calibration_probed=int(top.sum()), binary=bool(np.isin(values[observed], (0.0, 1.0)).all()))
