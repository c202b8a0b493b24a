"""The frontier self-check's figures, typed, and their one serialisation.

A predictor's frontier self-check (:func:`sparseeval.estimate.evaluation.frontier_selfcheck`, the two stages'
:func:`sparseeval.estimate.fitting.two_stage_selfcheck`, the joint predictor's two cuts) says how its method
fared on models stronger than those it learned from. Its figures travel far: ``predictor.json``'s
``extra.frontier`` (what ``predict`` warns from, the model card), the anchor sets' ``params.frontier`` in
DuckDB (what the next refresh reuses), the publishing check, MLflow and the pipeline's metadata. So they are
one type with one JSON form, written by :meth:`SelfCheck.to_json` and read by :meth:`SelfCheck.from_json`
(the shape older predictors carry: a benchmark's figures flat, a joint predictor's under ``outputs`` and
``own_cut``), and no module reads them by key.

* :class:`PredictionFigures`: how predictions with intervals and flags fared on models of known scores
  (and, with a probe, the share it estimated and the items it took);
* :class:`CutFigures`: one output's self-check at one cut: measured or why not, the figures, the cut, and
  with a probe the anchors-alone figures beside the two stages';
* :class:`SelfCheck`: a predictor's: its outputs' figures (a benchmark's one; a joint predictor's every
  benchmark and the mean, cut on the mean score, and each benchmark cut on its own score), with what it was
  measured on when a refresh stored it.

Pure Python (the light install's ``predict`` reads it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from sparseeval.estimate.methods.joint import MEAN

#: the figures of a self-check that the pipeline logs as metrics and shows as metadata
METRICS = ("mae", "bias", "coverage", "flagged", "silent_misses")
#: where a joint predictor's self-check keeps each benchmark output's figures with the cut on its own score
OWN_CUT = "own_cut"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


@dataclass(frozen=True)
class PredictionFigures:
    """How ``predict``'s predictions fared on models with known scores: ``mae``, ``bias`` (points; negative:
    too low), ``coverage``, ``halfwidth`` (points), ``flagged``, ``silent_misses`` (outside the interval and not
    flagged; shares), ``n`` models; ``probed``: the share whose number came from the probe, and the items those
    took (mean, most)."""

    mae: float
    bias: float
    coverage: float
    halfwidth: float
    flagged: float
    silent_misses: float
    n: int
    probed: float = 0.0
    probe_items_mean: float = 0.0
    probe_items_max: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PredictionFigures:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


#: the JSON keys of :class:`CutFigures` (every field but ``other``)
_CUT_KEYS = ("measured", "n", "quantile", "note", "mae", "bias", "coverage", "halfwidth", "flagged", "silent_misses",
             "n_train", "cut_score", "cut_on", "method", "k", "probed", "probe_items_mean", "probe_items_max",
             "probe_items", "probe_target", "anchors_alone", "probe_note")


@dataclass(frozen=True)
class CutFigures:
    """One output's frontier self-check at one cut: the method fitted and calibrated on the fitting models at
    or below the ``quantile`` quantile of the score (``cut_on``: the mean score of a joint predictor's
    benchmarks, or one benchmark's; None: the benchmark's own), scored on the ``n`` stronger ones.

    ``measured`` False: too few models above the cut, ``note`` says so. Measured with a probe: the figures are
    the two stages' (each stronger model the anchors place at the top answering its probe as ``next`` asks),
    ``anchors_alone`` the same fit's from the anchors only; ``probe_note``: why a probe was asked for and is
    not there. ``other``: keys an older (or newer) writer put there, kept as they are."""

    measured: bool
    n: int
    quantile: float | None = None
    note: str | None = None
    mae: float | None = None
    bias: float | None = None
    coverage: float | None = None
    halfwidth: float | None = None
    flagged: float | None = None
    silent_misses: float | None = None
    n_train: int | None = None
    cut_score: float | None = None
    cut_on: str | None = None
    method: str | None = None
    k: int | None = None
    probed: float | None = None
    probe_items_mean: float | None = None
    probe_items_max: int | None = None
    probe_items: int | None = None
    probe_target: float | None = None
    anchors_alone: PredictionFigures | None = None
    probe_note: str | None = None
    other: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def measured_as(cls, figures: PredictionFigures, **cut: Any) -> CutFigures:
        """Measured ``figures`` at the cut ``cut`` describes (quantile, cut_score, n_train, method, k, ...)."""
        return cls(measured=True, **figures.to_json(), **cut)

    @classmethod
    def too_few(cls, n: int, quantile: float, note: str, cut_on: str | None = None) -> CutFigures:
        """Not measured: only ``n`` fitting models above the cut."""
        return cls(measured=False, n=n, quantile=quantile, note=note, cut_on=cut_on)

    # --- reading it -------------------------------------------------------------------------------

    @property
    def probed_with(self) -> bool:
        """Whether the figures are the two stages' (the anchors-alone ones stand beside them)."""
        return self.anchors_alone is not None

    def misses_silently(self, silent_max: float) -> bool:
        """More silent misses than ``silent_max`` (the publishing check's bar; a share that is not a number
        fails it too): what refuses publication, and what ``fit`` and ``predict`` warn of."""
        return self.measured and not (self.silent_misses is not None and self.silent_misses <= silent_max)

    def metrics(self) -> dict[str, float]:
        """The :data:`METRICS` (none when nothing was measured)."""
        return {name: float(getattr(self, name)) for name in METRICS} if self.measured else {}

    def alone_metrics(self) -> dict[str, float]:
        """The anchors-alone :data:`METRICS` beside figures measured with the probe (none otherwise)."""
        alone = self.anchors_alone
        return {} if alone is None else {name: float(getattr(alone, name)) for name in METRICS}

    def store_columns(self) -> dict[str, Any]:
        """The figures as the anchor set's DuckDB columns (``frontier_*``; none when not measured)."""
        if not self.measured:
            return {}
        return {"frontier_mae": self.mae, "frontier_bias": self.bias, "frontier_coverage": self.coverage,
                "frontier_flagged": self.flagged, "frontier_silent": self.silent_misses, "frontier_models": self.n}

    def in_short(self) -> str:
        bias = float(self.bias or 0.0)
        return f"{self.n} models; bias {bias:+.1f}: {'too low' if bias < 0 else 'too high'}"

    def line(self, label: str) -> str:
        """One line of what ``fit`` says of it."""
        if not self.measured:
            return f"frontier self-check, {label}: {self.note or 'not measured'}"
        return (f"frontier self-check, {label}: refitted on the weakest {100 * float(self.quantile or 0):.0f} % of "
                f"the fitting models, on the {self.n} stronger ones MAE {float(self.mae or 0):.2f} points, bias "
                f"{float(self.bias or 0):+.2f}, coverage {float(self.coverage or 0):.3f}, flagged "
                f"{_pct(float(self.flagged or 0))} %, missed silently {_pct(float(self.silent_misses or 0))} %")

    def probe_summary(self) -> str | None:
        """One line on the probe these figures were measured with, or why there is none (None: no probe was
        asked for): what ``make run``'s summary and ``sparseeval refresh`` print after "probe: "."""
        if self.probe_note:
            return self.probe_note
        alone = self.anchors_alone
        if alone is None:
            return None
        return (f"{self.probe_items} items first; on the stronger fitting models {100 * float(self.probed or 0):.0f} % "
                f"were estimated by their probe ({float(self.probe_items_mean or 0):.0f} items on average, at most "
                f"{int(self.probe_items_max or 0)}): MAE {float(self.mae or 0):.2f} points, "
                f"{100 * float(self.silent_misses or 0):.1f} % missed silently (from the anchors alone MAE "
                f"{alone.mae:.2f}, {100 * alone.silent_misses:.1f} %)")

    def without_probe(self, why: str) -> CutFigures:
        """These figures as they hold for the same fit without its probe (the anchors-alone ones where they were
        measured with it), with ``why`` as the probe note."""
        alone = self.anchors_alone
        if alone is None:
            return replace(self, probe_note=why)
        return replace(self, **alone.to_json(), probe_items=None, probe_target=None, anchors_alone=None,
                       probe_note=why)

    # --- its JSON ---------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in _CUT_KEYS if getattr(self, name) is not None}
        if self.anchors_alone is not None:
            out["anchors_alone"] = self.anchors_alone.to_json()
        return {**self.other, **out}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CutFigures:
        known = {k: v for k, v in data.items() if k in _CUT_KEYS}
        alone = known.pop("anchors_alone", None)
        return cls(**{"measured": True, "n": 0, **known},
                   anchors_alone=None if alone is None else PredictionFigures.from_json(alone),
                   other={k: v for k, v in data.items() if k not in _CUT_KEYS})


@dataclass(frozen=True)
class FailedCut:
    """A stored frontier self-check that missed more than the bar silently: above ``cut`` (on the
    prediction of ``scored_by``), the predictions of ``output`` may be too low with no flag."""

    output: str
    scored_by: str  #: the output whose prediction is compared with the cut (``mean`` for a joint's mean cut)
    cut: float
    warning: str


#: the keys of a stored self-check that say what and when it was measured (a refresh's reuse reads them)
_PROVENANCE = ("setup", "measured_on", "matrix_models", "reused")


@dataclass(frozen=True)
class SelfCheck:
    """A predictor's frontier self-check: ``outputs`` (a benchmark's predictor: one, named after it; a joint
    predictor's: each benchmark and the mean, cut on the mean score), ``own_cut`` (a joint predictor's each
    benchmark output cut on its own score; empty otherwise or before it existed), and, stored by a refresh,
    what it was measured with (``setup``), on which data version, on how many models, and when it is a reuse
    of an earlier measurement, since when (``reused``)."""

    outputs: Mapping[str, CutFigures]
    joint: bool = False
    own_cut: Mapping[str, CutFigures] = field(default_factory=dict)
    setup: Mapping[str, Any] | None = None
    measured_on: str | None = None
    matrix_models: int | None = None
    reused: str | None = None

    @classmethod
    def of_benchmark(cls, name: str, figures: CutFigures) -> SelfCheck:
        return cls({name: figures})

    @property
    def figures(self) -> CutFigures:
        """A benchmark predictor's one set of figures."""
        if self.joint or len(self.outputs) != 1:
            raise ValueError("a joint predictor's self-check has one set of figures per output")
        return next(iter(self.outputs.values()))

    def gated(self) -> dict[str, CutFigures]:
        """Every set of figures the publishing check gates on, by label: each output's (under its name), then a
        joint predictor's each benchmark output cut on its own score (:func:`own_cut_label`)."""
        return {**self.outputs, **{own_cut_label(b): f for b, f in self.own_cut.items()}}

    def note(self) -> str:
        """What a refresh says about it beside the figures: why nothing was measured, or when the figures were
        measured (reused); empty when measured now."""
        first = next(iter(self.outputs.values()), None)  # a joint predictor's: one note for all
        return str((first.note if first is not None else None) or self.reused or "")

    def worst(self) -> tuple[str, CutFigures] | None:
        """The gated figures with the most silent misses (a joint predictor's summary line), None when none
        was measured."""
        measured = [(label, f) for label, f in self.gated().items() if f.measured]
        return max(measured, key=lambda pair: float(pair[1].silent_misses or 0.0)) if measured else None

    def with_provenance(self, setup: Mapping[str, Any], measured_on: str, matrix_models: int) -> SelfCheck:
        return replace(self, setup=dict(setup), measured_on=measured_on, matrix_models=matrix_models)

    def without_probe(self, why: str) -> SelfCheck:
        """A benchmark's self-check as it holds without its probe (:meth:`CutFigures.without_probe`); figures
        measured with the probe lose their setup, so a later refresh never reuses them as the self-check of the
        setup with the probe."""
        name, figures = next(iter(self.outputs.items()))
        return replace(self, outputs={name: figures.without_probe(why)},
                       setup=None if figures.probed_with else self.setup)

    def failed_cuts(self, silent_max: float) -> list[FailedCut]:
        """The figures whose silent misses exceed ``silent_max``, as warnings for the predictions above their cut.

        Why: the pipeline never publishes such a predictor, but ``sparseeval fit`` saves what it is asked to, and
        a flag cannot catch these misses (they are silent by definition: the anchors answer like the training
        models' top). What the self-check does know is the score above which its method failed; a prediction
        above it is exactly where a stronger model would land, too low (mmlu on the shared data: 45.6 % of the
        models above 67.0 missed silently, bias -8.3 points)."""
        sets = [(o, f.cut_on or o, f) for o, f in self.outputs.items()]
        sets += [(b, b, f) for b, f in self.own_cut.items()]
        out = []
        for output, scored_by, f in sets:
            if not f.misses_silently(silent_max) or f.cut_score is None:  # self-checks before round 6: no cut kept
                continue
            on = " on the mean of its benchmarks" if scored_by == MEAN and output != MEAN else ""
            out.append(FailedCut(output, scored_by, float(f.cut_score), (
                f"predicted above {_pct(f.cut_score)}{on}, where this predictor's frontier self-check missed "
                f"{_pct(float(f.silent_misses or 0))} % of its stronger fitting models silently (MAE "
                f"{float(f.mae or 0):.1f} points, bias {float(f.bias or 0):+.1f}): this prediction may be too low, "
                "with no flag")))
        return out

    def lines(self, silent_max: float) -> list[str]:
        """What ``fit`` says of the self-check it ran: one line per set of figures, then a warning naming those
        whose silent misses exceed ``silent_max`` (the pipeline's bar: it would not publish such a predictor),
        with where the predictions stop being trustworthy (the cut's score)."""
        lines, failed = [], []
        for label, f in self.gated().items():
            lines.append(f.line(label))
            if f.misses_silently(silent_max):
                failed.append(f"{label} ({_pct(float(f.silent_misses or 0))} % above a score of "
                              f"{_pct(float(f.cut_score or 0))})")
        if failed:
            lines.append(f"warning: missed silently more than {_pct(silent_max)} % of the models stronger than its "
                         f"fitting models: {'; '.join(failed)}. A prediction above that score may be too low with no "
                         "flag, and the pipeline's frontier_misses_flagged check would not publish this predictor "
                         "(more anchors, another method, or `sparseeval evaluate --split frontier` to compare)")
        return lines

    def notes(self, upward: Mapping[str, int]) -> list[str]:
        """What a person reading predictions that may lie above the training range should know (``upward``:
        per output, how many such predictions were made): how the predictor's method fared on models stronger
        than those it learned from, by how much it was off there: the error bar the flagged model's one-sided
        interval cannot give. Nothing for an output with no such prediction or no measured figures."""
        out = []
        for output, f in self.outputs.items():
            n_upward = upward.get(output, 0)
            if n_upward <= 0 or not f.measured:
                continue
            q = float(f.quantile or 0)
            by = " (by their mean score over its benchmarks)" if f.cut_on == MEAN else ""
            note = (f"{n_upward} {output} prediction(s) may lie above the training range: refitted on the weakest "
                    f"{100 * q:.0f} % of its own fitting models{by}, this predictor's method was off by "
                    f"{float(f.mae or 0):.1f} points on average on the strongest {100 * (1 - q):.0f} % "
                    f"({f.in_short()}), and {100 * float(f.silent_misses or 0):.0f} % of them fell outside their "
                    "interval unflagged")
            own = self.own_cut.get(output)
            if own is not None and own.measured:
                note += (f"; cut on their {own.cut_on or output} score instead, off by {float(own.mae or 0):.1f} "
                         f"points ({own.in_short()}), {100 * float(own.silent_misses or 0):.0f} % outside unflagged")
            out.append(note)
        return out

    # --- its JSON ---------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The one JSON form (``predictor.json``'s ``extra.frontier``, DuckDB, MLflow)."""
        provenance = {"setup": dict(self.setup) if self.setup is not None else None, "measured_on": self.measured_on,
                      "matrix_models": self.matrix_models, "reused": self.reused}
        kept = {k: v for k, v in provenance.items() if v is not None}
        if not self.joint:
            return {**self.figures.to_json(), **kept}
        body: dict[str, Any] = {"outputs": {o: f.to_json() for o, f in self.outputs.items()}}
        if self.own_cut:
            body[OWN_CUT] = {b: f.to_json() for b, f in self.own_cut.items()}
        return {**body, **kept}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], name: str) -> SelfCheck:
        """A stored self-check of the predictor of ``name`` (its benchmark, or the joint predictor's name)."""
        provenance = {k: data[k] for k in _PROVENANCE if k in data}
        if isinstance(data.get("outputs"), Mapping):
            return cls({o: CutFigures.from_json(f) for o, f in data["outputs"].items()}, joint=True,
                       own_cut={b: CutFigures.from_json(f) for b, f in (data.get(OWN_CUT) or {}).items()},
                       **provenance)
        return cls({name: CutFigures.from_json({k: v for k, v in data.items() if k not in _PROVENANCE})},
                   **provenance)

    @classmethod
    def of_predictor(cls, extra: Mapping[str, Any], name: str) -> SelfCheck | None:
        """The self-check a predictor carries (``extra``: its ``predictor.json``'s), None when it has none."""
        stored = extra.get("frontier")
        return cls.from_json(stored, name) if isinstance(stored, Mapping) and stored else None


def own_cut_label(benchmark: str) -> str:
    """How the publishing check and the refresh name a joint benchmark output's own-score cut."""
    return f"{benchmark}, cut on its own score"
