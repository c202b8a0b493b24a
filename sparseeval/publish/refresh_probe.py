"""The second stage on the refresh's path: every benchmark's candidate carries a probe plan
(``$SPARSEEVAL_PROBE_ITEMS``, on by default), and its frontier self-check measures what a user gets from
the two stages together.

Why the self-check measures both: a user of a predictor with a probe is asked its items where the anchors
place a model at the top (``next`` names them, ``predict`` warns until they are answered, the lm-eval task
runs them with ``--probe-for``), and the number such a model gets is the probe's. So the figures that say
how the published predictor fares on models stronger than its training models, and that the
``frontier_misses_flagged`` check gates on, are the two stages'
(:func:`sparseeval.estimate.fitting.two_stage_selfcheck`, each stronger model answering its probe batch by
batch as ``next`` asks); the anchors-alone figures of the same fit stand beside them (``anchors_alone``),
for a user who skips the probe.

Where no probe plan can be fitted (too few items beyond the anchors, a subset pool whose line cannot be
fitted) nothing is guessed: the figures are the anchors', the candidate is published without a probe, and
both say why (``probe_note``). A candidate whose own plan fails while the self-check's succeeded is gated on
the self-check's anchors-alone figures, never on the figures of a probe it does not carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sparseeval.data.matrix import ResponseMatrix
from sparseeval.estimate.artifact import PredictorArtifact
from sparseeval.estimate.fitting import ProbeSettings, attach_probe, two_stage_selfcheck
from sparseeval.estimate.probe import plan_of
from sparseeval.estimate.splits import Split

#: the self-check's keys that describe the probe it was measured with (dropped with it)
PROBE_KEYS = ("probe_items", "probe_target", "probed", "probe_items_mean", "probe_items_max", "anchors_alone")


def selfcheck(matrix: ResponseMatrix, rows: np.ndarray, method: str, k: int, seed: int, probe: ProbeSettings | None,
              *, quantile: float, alpha: float, device: str) -> dict[str, Any]:
    """The frontier self-check of a candidate on its fitting models ``rows``, the two stages together
    (the anchors alone without a probe, or where none can be fitted: then ``probe_note`` says why)."""
    return two_stage_selfcheck(matrix, rows, method, k, seed, quantile=quantile, alpha=alpha, device=device,
                               probe=probe)


def anchors_alone(figures: dict[str, Any], why: str) -> dict[str, Any]:
    """A self-check measured with the probe, as its anchors-alone figures (for a predictor without the
    probe); ``why``: the note it carries. Figures measured without a probe are returned with the note."""
    if "anchors_alone" not in figures:
        return {**figures, "probe_note": why}
    # without its setup: a later refresh must not reuse these as the self-check of that setup
    rest = {key: value for key, value in figures.items() if key not in (*PROBE_KEYS, "setup")}
    return {**rest, **figures["anchors_alone"], "probe_note": why}


def attach(artifact: PredictorArtifact, matrix: ResponseMatrix, split: Split, probe: ProbeSettings | None, *,
           seed: int, alpha: float, frontier: dict[str, Any]) -> dict[str, Any]:
    """Fit the probe plan onto a candidate's ``artifact`` (:func:`sparseeval.estimate.fitting.attach_probe`) and return
    the self-check figures that hold for the candidate as saved (what its checks gate on and it publishes):
    ``frontier`` when it carries the plan (or none was asked), else the anchors-alone figures with why."""
    attach_probe(artifact, matrix, split, probe, seed=seed, alpha=alpha)
    if probe is None or plan_of(artifact.extra) is not None:
        return frontier
    return anchors_alone(frontier, str(artifact.extra.get("probe_note", "fitted without a probe")))


def summary(figures: Mapping[str, Any]) -> str | None:
    """One line on a refreshed benchmark's probe, from its result's figures (the fit step's metadata): the
    second stage its frontier self-check was measured with, or why it has none; None without a probe.
    ``make run``'s summary and ``sparseeval refresh`` print it after "probe: "."""
    if "probe_note" in figures:
        return str(figures["probe_note"])
    if "frontier_anchors_alone_silent_misses" not in figures:
        return None
    return (f"{figures['probe_items']} items first; on the stronger fitting models "
            f"{100 * float(figures['probed']):.0f} % were estimated by their probe "
            f"({float(figures['probe_items_mean']):.0f} items on average, at most {int(figures['probe_items_max'])}): "
            f"MAE {float(figures['frontier_mae']):.2f} points, "
            f"{100 * float(figures['frontier_silent_misses']):.1f} % missed silently (from the anchors alone MAE "
            f"{float(figures['frontier_anchors_alone_mae']):.2f}, "
            f"{100 * float(figures['frontier_anchors_alone_silent_misses']):.1f} %)")
