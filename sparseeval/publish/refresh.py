"""What a refresh decides before and after it fits: skip keys and the publishing checks.

**Skip keys.** A refresh may skip only when nothing that changes its result has changed. Keying
the skip on (method, K, seed) let a changed alpha, split policy or check tolerance silently do
nothing. A fit key is the hash of the data version and *every* setting the fit, its calibration
and its checks read, plus the predictor format version; the comparison has its own key (data
version and the comparison settings). The store keeps the decision made for each key
(``fit_decisions``), so "up to date" is a lookup, and the sensor asks the same question.

**Publishing checks.** One set of predicates for a benchmark's candidate and for every output
of the joint predictor (each benchmark and the mean), so the two cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sparseeval.core.settings import JOINT, SETTINGS, RefreshSettings
from sparseeval.estimate.artifact import FORMAT_VERSION
from sparseeval.estimate.selfcheck import CutFigures

if TYPE_CHECKING:  # annotations only
    from sparseeval.data.store import Store

#: the checks a proposal must pass before it may be published, and what each asks
PUBLISH_CHECKS: dict[str, str] = {
    "beats_random_linear": "held-out MAE at most that of random anchors with a ridge (random-linear), "
                           "on the same held-out models, for every output",
    "coverage_near_nominal": "cross-fitted interval coverage within the tolerance of nominal, for every output",
    "beats_mean_score": "held-out MAE at most (1 - MIN_SKILL) of guessing every model the training models' mean "
                        "score, for every output: a predictor without skill (answers unrelated to the scores, "
                        "as in a broken re-run) is never published",
    "anchors_valid": "the anchors are K distinct items of the benchmark(s)",
    "frontier_misses_flagged": "on a frontier split of the candidate's own fitting models (fitted on the weakest 90 %, "
                               "scored on the strongest 10 %), at most FRONTIER_SILENT_MAX of those stronger models "
                               "fall outside their interval without being flagged (the interval's own miscoverage "
                               "counts in it): a predictor that saturates at the top of its training range says so, "
                               "or is not published. A joint predictor is cut twice: on the mean "
                               "score, where every output (each benchmark and the mean) must pass, and on each "
                               "benchmark's own score, where that benchmark's output must pass",
}

#: the default bar of ``frontier_misses_flagged`` (the setting's default; the pipeline passes the setting)
FRONTIER_SILENT_MAX = float(SETTINGS["frontier_silent_max"].default)

#: what a failed ``frontier_misses_flagged`` tells its operator (the check's metadata, ``make run``'s summary):
#: how to publish such a predictor knowingly, and what its users are told then (``predict`` warns above
#: the cut at the default bar whatever the setting: :func:`sparseeval.estimate.predicting.predict`)
FRONTIER_OVERRIDE = ("to publish it knowingly, raise SPARSEEVAL_FRONTIER_SILENT_MAX above its silent share: every "
                     "prediction above the self-check's cut then carries the warning that it may be too low, "
                     "with no flag")

#: the least skill a published predictor must show over guessing the mean score (a fraction of its MAE)
MIN_SKILL = 0.1

#: bump when the decision logic itself changes what a refresh with the same settings would produce
DECISION_VERSION = 2


def _digest(payload: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def fit_key(data_version: str, settings: Mapping[str, Any]) -> str:
    """The fit key of a refresh: data version, every fit setting, the predictor format version."""
    return _digest({"data_version": data_version, "settings": dict(settings), "format_version": FORMAT_VERSION,
                    "decision_version": DECISION_VERSION})


def joint_key_settings(s: RefreshSettings, benchmarks: Sequence[str] | None = None) -> dict[str, Any]:
    """The joint predictor's fit key settings: its declared ones (:meth:`RefreshSettings.key_settings`) and,
    once chosen, its benchmarks; the one place the refresh and the sensor compute it."""
    out = s.key_settings(JOINT)
    return out if benchmarks is None else {**out, "benchmarks": list(benchmarks)}


def joint_fit_key(versions: Mapping[str, str], s: RefreshSettings) -> str:
    """The joint predictor's fit key over its benchmarks' data ``versions`` (benchmark -> data version, in
    the joint's order): the one computation the refresh (from its matrices) and the sensor's question
    (from the store) share, so both name the same state."""
    return fit_key(joint_data_version(versions), joint_key_settings(s, list(versions)))


def comparison_key(data_version: str, settings: Mapping[str, Any]) -> str:
    """The comparison's key: data version and the comparison settings (methods, Ks, seeds, split)."""
    return _digest({"data_version": data_version, "comparison": dict(settings)})


def joint_data_version(versions: Mapping[str, str]) -> str:
    """The joint predictor's data version: its benchmarks' data versions together (the fit step
    computes it from the matrices it reads, the sensor from the store: equal when both agree)."""
    return hashlib.sha256("|".join(f"{b}={v}" for b, v in sorted(versions.items())).encode()).hexdigest()[:16]


def stale_benchmarks(store: Store, fit_settings: Mapping[str, Any], *, skip: Sequence[str] = ()
                     ) -> dict[str, tuple[str, str]]:
    """Benchmarks whose refresh would do something: ``benchmark -> (request key, reason)``.

    A benchmark is stale when its fit key (its data version and the settings now) has no decision
    yet (new data, a corrected file, a changed setting, an unfinished publication). The request key
    names exactly that state, so asking twice for the same state is one request. (The method
    comparison has its own rule and schedule: :func:`sparseeval.publish.comparison.comparisons_due`.)"""
    versions = store.data_versions()
    decided = store.latest_fit_keys()
    out: dict[str, tuple[str, str]] = {}
    for bench, version in versions.items():
        if bench in skip:
            continue
        fk = fit_key(version, fit_settings)
        if decided.get(bench) != fk:
            why = "never refreshed" if bench not in decided else "new data or changed settings"
            out[bench] = (fk[:16], f"{why} (data version {version}, fit key {fk[:12]})")
    return out


def up_to_date(store: Store, benchmark: str, key: str) -> dict[str, Any] | None:
    """The decision already made for ``key`` when it is ``benchmark``'s latest one and no publication
    is pending; None when the refresh must run."""
    decision = store.latest_decision(benchmark)
    if decision is None or decision["fit_key"] != key or store.open_publications(benchmark):
        return None
    return decision


@dataclass(frozen=True)
class Check:
    """One publishing check's outcome and the figures it was decided on."""

    name: str
    passed: bool
    metadata: dict[str, Any]

    @property
    def override(self) -> str | None:
        """How to publish knowingly what this check refused (None: nothing to say)."""
        hint = self.metadata.get("to_publish_anyway")
        return str(hint) if hint else None


def publishing_checks(*, mae: Mapping[str, float], baseline: Mapping[str, float], mean_guess: Mapping[str, float],
                      coverage: Mapping[str, float | None], nominal: float, tolerance: float,
                      items: Sequence[str], expected_k: int, known_items: set[str],
                      frontier: Mapping[str, CutFigures] | None = None,
                      frontier_silent_max: float = FRONTIER_SILENT_MAX) -> list[Check]:
    """The checks of :data:`PUBLISH_CHECKS` over every output (one benchmark, or each benchmark and the
    mean of a joint predictor). ``mean_guess``: the held-out MAE of guessing the training mean. A
    coverage of None (too few held-out models to measure) does not fail the check but says so.
    ``frontier``: per output, the frontier self-check's figures (:meth:`SelfCheck.gated`); None when it was
    not run, which passes with a note saying so."""
    outputs = list(mae)
    worse = [o for o in outputs if mae[o] > baseline[o]]
    unskilled = [o for o in outputs if not mae[o] <= (1.0 - MIN_SKILL) * mean_guess[o]]
    off = [o for o in outputs if coverage.get(o) is not None and abs(float(coverage[o]) - nominal) > tolerance]
    unmeasured = [o for o in outputs if coverage.get(o) is None]
    one = len(outputs) == 1

    def per_output(values: Mapping[str, Any]) -> Any:
        return next(iter(values.values())) if one else dict(values)

    valid = len(set(items)) == len(items) == expected_k and set(items) <= known_items
    return [
        Check("beats_random_linear", not worse, {"test_mae": per_output(mae), "random_linear_mae": per_output(baseline),
                                                 **({"worse": worse} if not one else {})}),
        Check("beats_mean_score", not unskilled, {"test_mae": per_output(mae), "mean_guess_mae": per_output(mean_guess),
                                                  "min_skill": MIN_SKILL,
                                                  **({"unskilled": unskilled} if not one else {})}),
        Check("coverage_near_nominal", not off, {"coverage": per_output(coverage), "nominal": nominal,
                                                 "tolerance": tolerance,
                                                 **({"off": off} if not one else {}),
                                                 "note": f"too few held-out models to measure: {', '.join(unmeasured)}"
                                                 if unmeasured else ""}),
        Check("anchors_valid", valid, {"k": expected_k, "items": len(items), "unique": len(set(items)),
                                       "unknown": len(set(items) - known_items)}),
        frontier_check(frontier, frontier_silent_max),
    ]


def frontier_check(frontier: Mapping[str, CutFigures] | None, silent_max: float) -> Check:
    """``frontier_misses_flagged``: every output's frontier silent-miss share at most ``silent_max``; the
    message carries the numbers (share silent, MAE, bias, coverage, share flagged, models)."""
    name = "frontier_misses_flagged"
    if frontier is None:
        return Check(name, True, {"silent_max": silent_max, "note": "not measured: no frontier self-check ran "
                                                                    "for this predictor"})
    unmeasured = {o: f.note or "not measured" for o, f in frontier.items() if not f.measured}
    measured = {o: f for o, f in frontier.items() if f.measured}
    if not measured:
        return Check(name, True, {"silent_max": silent_max, "note": "; ".join(f"{o}: {n}" for o, n in
                                                                             unmeasured.items())})
    silent = [o for o, f in measured.items() if f.misses_silently(silent_max)]
    figures = {o: {key: (round(float(v), 4) if isinstance(v, float) else v) for key, v in f.to_json().items()}
               for o, f in measured.items()}
    message = "; ".join(
        f"{o}: {100 * float(f.silent_misses or 0):.1f} % of {f.n} stronger models missed silently "
        f"(max {100 * silent_max:g} %), MAE {float(f.mae or 0):.2f} points, bias {float(f.bias or 0):+.2f}, "
        f"coverage {float(f.coverage or 0):.3f}, flagged {100 * float(f.flagged or 0):.1f} %{_with_probe(f)}"
        for o, f in measured.items())
    one = len(measured) == 1
    return Check(name, not silent, {"silent_max": silent_max, "message": message,
                                    **({"to_publish_anyway": FRONTIER_OVERRIDE} if silent else {}),
                                    "figures": next(iter(figures.values())) if one else figures,
                                    **({"silent": silent} if not one else {}),
                                    **({"note": "; ".join(f"{o}: {n}" for o, n in unmeasured.items())}
                                       if unmeasured else {})})


def _with_probe(figures: CutFigures) -> str:
    """How a self-check measured with the two stages says so in the check's message (the figures assume a
    model the anchors place at the top answered its probe as ``next`` asks; from its anchors alone they are
    these)."""
    alone = figures.anchors_alone
    if alone is None:
        return ""
    return (f", {100 * float(figures.probed or 0):.0f} % of them estimated by their probe "
            f"({float(figures.probe_items_mean or 0):.0f} items on average; from the anchors alone "
            f"{100 * alone.silent_misses:.1f} % missed silently, MAE {alone.mae:.2f})")


def checks_json(checks: Sequence[Check]) -> str:
    """The outcomes as stored in ``anchor_sets.checks`` (read back by the pipeline's asset checks)."""
    return json.dumps({c.name: {"passed": c.passed, **c.metadata} for c in checks}, sort_keys=True, default=str)


def stored_checks(row: Mapping[str, Any]) -> list[Check]:
    """The checks stored with an anchor set (empty when it was never checked)."""
    raw = json.loads(row.get("checks") or "{}")
    return [Check(name, bool(v.pop("passed")), v) for name, v in raw.items()]


def matrix_range_check(matrix: Any) -> Check:
    """Every cell and target of ``matrix`` in [0, 1] (the store enforces it; a matrix from anywhere
    else, such as an old intermediate file, may not)."""
    import numpy as np

    ok = bool(np.all((matrix.scores >= 0) & (matrix.scores <= 1)) and np.all((matrix.values >= 0)
                                                                              & (matrix.values <= 1)))
    return Check("scores_within_unit_interval", ok, {
        "score_min": float(matrix.scores.min()) if matrix.scores.size else None,
        "score_max": float(matrix.scores.max()) if matrix.scores.size else None})
