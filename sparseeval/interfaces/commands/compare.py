"""``sparseeval compare``: is model A better than model B on this benchmark?

Both models' anchor answers are read from ``--answers`` (repeatable: e.g. two lm-eval output
folders); A and B name models in them (optional when exactly two models are present). The
interval of the difference is paired: conformal on differences of calibration model pairs, so
the error the two predictions share cancels. "distinguishable" means the interval excludes 0. A
model the guard flags as possibly beyond the training range (stronger or weaker than every training
model) opens the interval on that side: its anchors cannot say by how much.
"""

from __future__ import annotations

import argparse

from sparseeval.core.errors import UsageError
from sparseeval.estimate.predicting import compare
from sparseeval.interfaces.commands.arguments import add_output_arguments, existing_path, settings_epilog
from sparseeval.interfaces.commands.output import to_stdout, write_records
from sparseeval.interfaces.commands.predict import (
    add_predictor_arguments,
    load_predictors,
    read_all_answers,
)

DESCRIPTION = """\
Is model A better than model B on this benchmark? A paired comparison from their anchor answers.

Both models' answers come from --answers (repeatable: e.g. two lm-eval output folders); MODEL A and
B name models in them (optional when exactly two are present). The interval of the difference A - B
is paired: calibrated on differences of pairs of held-out models, so the error the two predictions
share cancels. "distinguishable" means the interval excludes 0.

example:
  sparseeval compare --predictor hf://ORG/REPO --answers runA/ --answers runB/"""


def run(args: argparse.Namespace) -> int:
    (artifact,) = load_predictors(args, many=False)
    answers = read_all_answers(args.answers, [artifact])
    names = list(args.models)
    if not names:
        present = answers.filter(answers["benchmark"] == artifact.benchmark)["model"].unique().sort()
        if present.len() != 2:
            raise UsageError(f"name the two models to compare; the answers hold {present.len()}: "
                             f"{', '.join(present.head(10).to_list())}")
        names = present.to_list()
    if len(names) != 2:
        raise UsageError(f"compare takes exactly two models, got {len(names)}")
    c = compare(artifact, answers, names[0], names[1])
    alpha = artifact.calibration.get("alpha", 0.1)
    write_records([c.as_dict()], json_to=args.json, csv_to=args.csv)
    if to_stdout(args.json, args.csv):
        return 0
    print(f"{c.benchmark}: {c.model_a} {100 * c.predicted_a:.1f} vs {c.model_b} {100 * c.predicted_b:.1f}")
    print(f"difference {100 * c.diff:+.1f} points, {100 * (1 - alpha):g}% paired interval "
          f"[{100 * c.lower:+.1f}, {100 * c.upper:+.1f}]: "
          + ("distinguishable" if c.distinguishable else "NOT distinguishable"))
    for side in c.open_sides:
        print(f"note: {side}")
    for w in c.warnings:
        print(f"warning: {w}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compare", help="paired comparison of two models from their anchor answers",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=settings_epilog("predictors"))
    add_predictor_arguments(p, many=False)
    p.add_argument("--answers", type=existing_path, action="append", required=True, metavar="PATH",
                   help="answers of both models (lm-eval output folder or long table); repeatable")
    p.add_argument("models", nargs="*", metavar="MODEL", help="the two models A and B (A - B is reported)")
    add_output_arguments(p, "the comparison")
    p.set_defaults(func=run)
