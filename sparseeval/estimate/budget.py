"""A time budget for the comparison of methods: what to run at leaderboard scale.

The pipeline's default comparison (6 methods x K in {10, 20} x 3 seeds) is minutes on the bundled
data but would take far longer per benchmark at 7,000 models x 30,000 items. :func:`comparison_plan`
estimates each fit from the matrix size (a cost model fitted on ``bench/scale.py`` measurements on
2 cores, see ``docs/results/scale.md``) and cuts the plan until it fits the budget, in this order:

1. seeds down to 2;
2. methods, most expensive first, never the published method's pair (``sparseeval-linear`` and the
   ``random-linear`` bar it must beat, see :data:`ALWAYS`);
3. seeds down to 1;
4. the largest K, down to one.

The plan says what it cut (``reduced``, ``dropped``), so the comparison is reported as such.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from sparseeval.core import settings

#: environment variable of the comparison's budget in seconds (per benchmark)
BUDGET_ENV = settings.SETTINGS["compare_budget_s"].env
DEFAULT_BUDGET_S: float = settings.SETTINGS["compare_budget_s"].default_value
#: the comparison's default Ks and seeds (``$SPARSEEVAL_COMPARE_KS``, ``$SPARSEEVAL_COMPARE_SEEDS`` from the seed)
DEFAULT_KS: tuple[int, ...] = settings.SETTINGS["compare_ks"].default_value
DEFAULT_SEEDS = tuple(range(settings.DEFAULT_SEED,
                            settings.DEFAULT_SEED + settings.SETTINGS["compare_seeds"].default_value))
#: methods a reduced comparison still runs (the published method family and its bar)
ALWAYS = ("random-linear", "sparseeval-linear")

#: reference size of the cost model
REF_MODELS, REF_ITEMS = 7000, 30000
#: method -> (seconds at the reference size and K=20 on 2 cores, exponent of models, of items, of K).
#: ``sparseeval-*`` and ``random-linear`` from ``bench/scale.py`` at 7,000 x 30,000 (K=20 and K=100,
#: docs/results/scale.md; the matrix copies are in :data:`COPY_S_PER_CELL`); the others were not
#: measured at that size and are deliberately pessimistic guesses (IRT fits a 2PL on every cell).
COST: dict[str, tuple[float, float, float, float]] = {
    "random": (0.5, 1.0, 1.0, 0.0),
    "random-linear": (0.5, 1.0, 1.0, 0.0),
    "anchor-points": (15.0, 1.0, 1.0, 0.5),
    "irt": (180.0, 1.0, 1.0, 0.0),
    "p-irt": (180.0, 1.0, 1.0, 0.0),
    "gp-irt": (180.0, 1.0, 1.0, 0.0),
    "sparseeval-linear": (17.0, 1.0, 1.0, 0.25),
    "sparseeval-mlp": (20.0, 1.0, 1.0, 0.25),
    "sparseeval-headroom": (21.0, 1.0, 1.0, 0.25),  # sparseeval-mlp plus a few GCV-scored swaps (at most K/2)
}
#: fixed cost per fit regardless of size (split, copies, final fits)
OVERHEAD_S = 1.0
#: the matrix copies every fit makes (``with_nan`` and the training rows) scale with the cells
COPY_S_PER_CELL = 2e-8


def estimate_fit_seconds(method: str, k: int, n_models: int, n_items: int) -> float:
    """Rough seconds of one fit of ``method`` at ``k`` on 2 cores (unknown methods: the dearest known)."""
    base, a, b, c = COST.get(method, max(COST.values()))
    return (OVERHEAD_S + COPY_S_PER_CELL * n_models * n_items
            + base * (n_models / REF_MODELS) ** a * (n_items / REF_ITEMS) ** b * (k / 20) ** c)


@dataclass(frozen=True)
class ComparisonPlan:
    """Methods x Ks x seeds to run, its estimated seconds, and what the budget cut."""

    methods: tuple[str, ...]
    ks: tuple[int, ...]
    seeds: tuple[int, ...]
    estimated_s: float
    budget_s: float
    requested: tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]
    dropped: list[str] = field(default_factory=list)

    @property
    def reduced(self) -> bool:
        return bool(self.dropped)

    @property
    def fits(self) -> int:
        return len(self.methods) * len(self.ks) * len(self.seeds)

    def describe(self) -> str:
        head = (f"{len(self.methods)} methods x K {','.join(map(str, self.ks))} x {len(self.seeds)} seeds "
                f"(~{self.estimated_s:.0f} s of a {self.budget_s:.0f} s budget)")
        return head + (f"; REDUCED from the requested comparison: {'; '.join(self.dropped)}" if self.reduced
                       else "; as requested")


def _total(methods: Sequence[str], ks: Sequence[int], n_seeds: int, n_models: int, n_items: int) -> float:
    return n_seeds * sum(estimate_fit_seconds(m, k, n_models, n_items) for m in methods for k in ks)


def budget_from_env(default: float = DEFAULT_BUDGET_S) -> float:
    """``$SPARSEEVAL_COMPARE_BUDGET_S`` in seconds (0 or less: no budget), else ``default``; a value
    that is not a number is refused naming the variable."""
    setting = settings.SETTINGS["compare_budget_s"]
    if not setting.is_set():
        return default
    value = setting.value()
    return math.inf if value <= 0 else value


def comparison_plan(n_models: int, n_items: int, methods: Sequence[str] | None = None,
                    ks: Sequence[int] = DEFAULT_KS, seeds: Sequence[int] = DEFAULT_SEEDS, *,
                    budget_s: float | None = None) -> ComparisonPlan:
    """The comparison to run on a ``n_models`` x ``n_items`` benchmark within ``budget_s`` seconds
    (default ``$SPARSEEVAL_COMPARE_BUDGET_S`` or 300; 0 or less: no budget). Ks above the item count
    are left out, as :func:`sparseeval.estimate.evaluation.run_protocol` would skip them."""
    budget = budget_from_env() if budget_s is None else (math.inf if budget_s <= 0 else float(budget_s))
    req_methods = tuple(methods if methods is not None else settings.PROTOCOL_METHODS)
    req_ks = tuple(k for k in ks if k <= n_items) or (min(ks),)
    req_seeds = tuple(seeds)
    cur_m, cur_k, n_seeds = list(req_methods), sorted(req_ks), len(req_seeds)
    dropped: list[str] = []

    def over() -> bool:
        return _total(cur_m, cur_k, n_seeds, n_models, n_items) > budget

    while over() and n_seeds > 2:
        n_seeds -= 1
    if n_seeds < len(req_seeds):
        dropped.append(f"seeds {len(req_seeds)} -> {n_seeds}")
    while over():
        optional = [m for m in cur_m if m not in ALWAYS]
        if not optional:
            break
        worst = max(optional, key=lambda m: estimate_fit_seconds(m, max(cur_k), n_models, n_items))
        cur_m.remove(worst)
        dropped.append(f"method {worst} (~{estimate_fit_seconds(worst, max(cur_k), n_models, n_items):.0f} s a fit)")
    if over() and n_seeds > 1:
        dropped.append(f"seeds {n_seeds} -> 1")
        n_seeds = 1
    while over() and len(cur_k) > 1:
        dropped.append(f"K={cur_k.pop()}")
    estimated = _total(cur_m, cur_k, n_seeds, n_models, n_items)
    if estimated > budget:
        dropped.append(f"still over budget (~{estimated:.0f} s): the minimal comparison runs anyway")
    return ComparisonPlan(methods=tuple(m for m in req_methods if m in cur_m), ks=tuple(cur_k),
                          seeds=req_seeds[:n_seeds], estimated_s=estimated, budget_s=budget,
                          requested=(req_methods, req_ks, req_seeds), dropped=dropped)
