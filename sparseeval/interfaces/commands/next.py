"""``sparseeval next``: which anchors a model should run next, or that its interval is narrow enough.

Adaptive anchors: run the first batch (``sparseeval export --first N``), then ask ``next`` with the
answers so far. It predicts from what was answered (the interval is calibrated for exactly that
prefix), and either says the target half-width is met or lists the next ``--batch`` anchors in the
predictor's order (never one already answered). ``--samples OUT`` writes them as an lm-eval
``--samples`` file. A model its anchors place at the top of their range runs every anchor and then its
own random probe (drawn from its name: :mod:`sparseeval.estimate.probe`), its first batch and then more while the
probe's sampling half-width is above the predictor's target (``--probe-target``), up to the plan's cap;
its number then comes from the probe, as ``predict`` gives it. For a joint predictor (no probe) the
target applies to the mean score unless ``--output`` names a benchmark.

    sparseeval next --predictor DIR --answers RUN_DIR --batch 10 --target-width 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

from sparseeval.core.atomic import atomic_write_text
from sparseeval.core.errors import UsageError
from sparseeval.data.access.answers import read_answers
from sparseeval.estimate.adaptive import NextStep, next_anchors
from sparseeval.estimate.artifact import PredictorArtifact
from sparseeval.estimate.methods.joint import MEAN
from sparseeval.estimate.predicting import answer_matrices, first_stage, prediction_outputs, probe_states
from sparseeval.estimate.probe import ProbeState, plan_of
from sparseeval.interfaces.commands.arguments import (
    add_output_arguments,
    existing_path,
    non_negative,
    positive_int,
    settings_epilog,
)
from sparseeval.interfaces.commands.output import to_stdout, write_records
from sparseeval.interfaces.commands.predict import add_predictor_arguments, load_predictors

DESCRIPTION = """\
Adaptive anchors: which anchors a model should run next, or that its interval is narrow enough.

Run the first batch of a predictor's anchors (`sparseeval export --first N`), then ask `next` with
the answers so far. It predicts from what was answered (the interval is calibrated for exactly that
prefix of the predictor's order) and either says the target half-width is met, or lists the next
--batch anchors in the predictor's order (never one already answered). --samples writes them as an
lm-eval --samples file. A model its anchors place at the top of their range runs every anchor, then
items of its own random probe (drawn from the model's name): the first batch, then more while the
probe's sampling half-width is above the target (--probe-target, default the predictor's), up to the
plan's cap; its estimate and interval then come from the probe by design, as predict gives them. For
a joint predictor the target is about the mean score unless --output names a benchmark.

example:
  sparseeval next --predictor DIR --answers run/ --batch 10 --target-width 2 --samples next.json"""


def plan(artifact: PredictorArtifact, answers: pl.DataFrame, *, batch: int = 10, target_width: float | None = None,
         output: str | None = None, models: list[str] | None = None,
         probe_target: float | None = None) -> list[NextStep]:
    """Next anchors (or probe items) per model of ``answers`` (``target_width``, ``probe_target`` in [0, 1] units).

    ``models``: also plan for these models even if they answered nothing yet (their first batch).
    ``output``: for a joint predictor, the benchmark (or ``mean``, the default) the target is about.
    ``probe_target``: the probe's target sampling half-width (default: the predictor's plan's).
    """
    relevant = answers.filter(pl.col("benchmark").is_in(artifact.benchmarks))
    if relevant.height:
        names, X, P = answer_matrices(artifact, relevant)
    else:
        names, X, P = [], np.zeros((0, artifact.k), dtype=np.float32), None
    extra = [m for m in (models or []) if m not in names]
    names = names + extra
    X = np.concatenate([X, np.full((len(extra), artifact.k), np.nan, dtype=np.float32)])
    outputs = [name for name, _, _ in prediction_outputs(artifact)]
    want = output or (MEAN if artifact.is_joint else artifact.benchmark)
    if want not in outputs:
        raise UsageError(f"no output {want!r} in this predictor (outputs: {', '.join(outputs)})")
    pred = np.full(len(names), np.nan)
    half = np.full(len(names), np.nan)
    why: list[tuple[str, ...]] = [() for _ in names]
    probe = None if artifact.is_joint else plan_of(artifact.extra)
    states: list[ProbeState | None] = [None for _ in names]
    some = np.flatnonzero((~np.isnan(X)).any(axis=1))
    if some.size:
        g = first_stage(artifact, X[some])[want]  # a joint predictor's output carries its mean's upward flags
        if probe is not None:
            answered = None if P is None else P[some]  # models with no answers yet come after those with some
            for j, state in enumerate(probe_states(probe, [names[i] for i in some], X[some], answered, g,
                                                   target=probe_target)):
                states[some[j]] = state
        pred[some], half[some] = g.pred, g.halfwidth
        for j, i in enumerate(some):
            why[i] = g.reasons[j]
    return next_anchors(artifact, names, X, half, pred, batch=batch, target_width=target_width, flags=why,
                        probes=states if probe is not None else None, plan=probe)


def run(args: argparse.Namespace) -> int:
    (artifact,) = load_predictors(args, many=False)
    bench = None if artifact.is_joint else artifact.benchmark
    answers = pl.concat([read_answers(p, benchmark=bench, model=args.model) for p in args.answers])
    steps = plan(artifact, answers, batch=args.batch,
                 target_width=None if args.target_width is None else args.target_width / 100.0,
                 output=args.output, models=[args.model] if args.model else None,
                 probe_target=None if args.probe_target is None else args.probe_target / 100.0)
    if not steps:
        print(f"error: the answers hold no model for {', '.join(artifact.benchmarks)}", file=sys.stderr)
        return 2
    if not to_stdout(args.json, args.csv):
        for s in steps:
            head = f"{s.model}: {s.n_answered}/{s.k} anchors answered"
            if s.probe_answered:
                head += f", {s.probe_answered} probe items"
            if s.predicted is not None and s.halfwidth is not None:
                head += (f", predicted {100 * s.predicted:.1f} +- {100 * s.halfwidth:.1f} points"
                         + (" (by its probe)" if s.stage == "probe" else ""))
            if s.done:
                print(f"{head}: done ({s.reason})")
            else:
                items = ", ".join(f"{b}:{i}" if artifact.is_joint else i
                                  for b, i in zip(s.next_benchmarks, s.next_item_ids, strict=True))
                print(f"{head}: run next {len(s.next_item_ids)} ({s.reason}): {items}")
    write_records([s.as_dict() for s in steps], json_to=args.json, csv_to=args.csv)
    if args.samples:
        merged: dict[str, set[int]] = {}
        for s in steps:
            for a in s.items:
                if a.task is not None and a.doc_id is not None:
                    merged.setdefault(a.task, set()).add(int(a.doc_id))
        text = json.dumps({t: sorted(d) for t, d in sorted(merged.items())}, indent=1) + "\n"
        atomic_write_text(args.samples, text)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("next", help="adaptive anchors: what to run next, or whether the interval is narrow "
                                           "enough", description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=settings_epilog("predictors"))
    add_predictor_arguments(p, many=False)
    p.add_argument("--answers", type=existing_path, action="append", required=True, metavar="PATH",
                   help="answers so far (lm-eval output folder, long table or item_id,correct CSV); repeatable")
    p.add_argument("--model", help="model name for a two-column item_id,correct file (default: the file's name); "
                                   "also plans the first batch of a model with no answers yet")
    p.add_argument("--batch", type=positive_int, default=10, metavar="N",
                   help="anchors to propose per step (default 10)")
    p.add_argument("--target-width", type=non_negative, metavar="W",
                   help="stop when the interval's half-width is at most W points")
    p.add_argument("--probe-target", type=non_negative, metavar="W",
                   help="a model at the top: run probe items until its sampling half-width is at most W points "
                        "(default: the predictor's, $SPARSEEVAL_PROBE_TARGET when it was fitted)")
    p.add_argument("--output", metavar="B", help="joint predictor: the benchmark the target is about (default: mean)")
    add_output_arguments(p, "the plan (one row per model)")
    p.add_argument("--samples", type=Path, metavar="FILE",
                   help="write the proposed anchors as an lm-eval --samples file")
    p.set_defaults(func=run)
