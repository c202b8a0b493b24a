"""The probe on the refresh's path (``$SPARSEEVAL_PROBE_ITEMS``): what a published predictor's probe
changes in its frontier self-check, and the probe fitted onto each candidate.

Why the self-check changes with it: the probe exists for the models the anchors cannot tell apart at the
top (:mod:`sparseeval.probe`), and a user of a predictor that has one is asked its items there (``next``
asks for them, ``predict`` warns a model at the probe level without them, the lm-eval task folder runs
them with ``--probe``). So the figures that say how the published predictor fares on models stronger
than its training models, and that the ``frontier_misses_flagged`` check gates on, are the figures
with the probe's answers (:func:`sparseeval.scoring.probe_selfcheck`); its anchors-alone figures are
kept beside them (``anchors_alone``), for a user who skips the probe.

Where the probe cannot be fitted (too few calibration models at its level, too few items beyond the
anchors) nothing is guessed: the self-check is measured from the anchors alone, the candidate is
published without a probe, and both say why (``probe_note``). A candidate whose own probe fails while
the self-check's succeeded is gated on the self-check's anchors-alone figures, never on figures of a
probe it does not carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sparseeval import settings as defaults
from sparseeval.artifact import PredictorArtifact
from sparseeval.errors import UsageError
from sparseeval.matrix import ResponseMatrix
from sparseeval.splits import Split

#: the self-check's keys that describe the probe it was measured with (dropped with it)
PROBE_KEYS = ("probe_items", "probe_from", "probe_flagged", "anchors_alone")


def probe_setup(items: int | None, probe_from: float) -> dict[str, Any]:
    """The probe's entries in a fit key or self-check setup: none without a probe, so a deployment that
    never sets ``$SPARSEEVAL_PROBE_ITEMS`` keeps its keys (and ``probe_from`` alone changes nothing)."""
    return {} if items is None else {"probe_items": items, "probe_from": probe_from}


def selfcheck(matrix: ResponseMatrix, rows: np.ndarray, method: str, k: int, seed: int, items: int | None, *,
              quantile: float, alpha: float, device: str, probe_from: float) -> dict[str, Any]:
    """The frontier self-check of a candidate on its fitting models ``rows``: without a probe
    (``items`` None), :func:`sparseeval.evaluation.frontier_selfcheck`'s; with one, the figures with the
    probe's answers and the anchors-alone ones beside them, tagged with the probe's setting, or, when the
    probe cannot be fitted on the self-check's fitting side, the anchors-alone self-check with a
    ``probe_note`` saying why."""
    from sparseeval.evaluation import frontier_selfcheck
    from sparseeval.scoring import probe_selfcheck

    def alone() -> dict[str, Any]:
        return frontier_selfcheck(matrix, rows, method, k, seed, quantile=quantile, alpha=alpha, device=device)

    if items is None:
        return alone()
    try:
        checked = probe_selfcheck(matrix, rows, method, k, seed, items, quantile=quantile, alpha=alpha,
                                  calibration_frac=defaults.DEFAULT_CALIBRATION_FRAC, device=device,
                                  probe_from=probe_from)
    except UsageError as exc:
        return {**alone(), "probe_note": f"measured from the anchors alone: no probe could be fitted on the "
                                         f"self-check's fitting models ({exc})"}
    return {**checked, **probe_setup(items, probe_from)} if checked.get("measured") else checked


def anchors_alone(figures: dict[str, Any], why: str) -> dict[str, Any]:
    """A self-check measured with the probe, as its anchors-alone figures (for a predictor without the
    probe); ``why``: the note it carries. Figures measured without a probe are returned as they are."""
    if "anchors_alone" not in figures:
        return figures
    # without its setup: a later refresh must not reuse these as the self-check of that setup
    rest = {key: value for key, value in figures.items() if key not in (*PROBE_KEYS, "setup")}
    alone = {key: value for key, value in figures["anchors_alone"].items() if key not in PROBE_KEYS}
    return {**rest, **alone, "probe_note": why}


def attach(artifact: PredictorArtifact, matrix: ResponseMatrix, split: Split, items: int | None, *, seed: int,
           alpha: float, probe_from: float, frontier: dict[str, Any]) -> dict[str, Any]:
    """Fit a probe of ``items`` random non-anchor items onto a candidate's ``artifact`` (fitting and
    calibration models as its ``split``; :func:`sparseeval.scoring.probe_for`), with the self-check
    ``frontier`` as its own; return the self-check figures that hold for the candidate as saved (what its
    checks gate on and it publishes): ``frontier`` when it carries the probe (or none was asked), else the
    anchors-alone figures with the reason. Without a probe the artifact is not touched."""
    from sparseeval.scoring import probe_for

    if items is None:
        return frontier
    try:
        probe = probe_for(artifact, matrix, split, items, seed=seed, alpha=alpha, probe_from=probe_from)
    except UsageError as exc:
        why = f"fitted without a probe: {exc}"
        if "anchors_alone" in frontier:
            return anchors_alone(frontier, why)
        measured = f"; its frontier self-check {frontier['probe_note']}" if frontier.get("probe_note") else ""
        return {**frontier, "probe_note": why + measured}
    if "anchors_alone" in frontier:
        probe["selfcheck"] = frontier
    artifact.extra["probe"] = probe
    return frontier


def summary(figures: Mapping[str, Any]) -> str | None:
    """One line on a refreshed benchmark's probe, from its result's figures (the fit step's metadata):
    the probe its frontier self-check was measured with, or why it has none; None without
    ``$SPARSEEVAL_PROBE_ITEMS``. ``make run``'s summary and ``sparseeval refresh`` print it after "probe: "."""
    if "probe_note" in figures:
        return str(figures["probe_note"])
    if "frontier_anchors_alone_silent_misses" not in figures:
        return None
    return (f"{figures['probe_items']} items; the frontier self-check is measured with their answers: "
            f"{100 * float(figures['frontier_silent_misses']):.1f} % of the stronger models missed silently "
            f"(from the anchors alone {100 * float(figures['frontier_anchors_alone_silent_misses']):.1f} %)")
