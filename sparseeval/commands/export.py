"""``sparseeval export``: the predictors' anchors as an lm-eval ``--samples`` file or a CSV.

Without ``--predictor`` or ``--benchmark`` every predictor published in ``--registry`` is exported.

Run a new model on the anchors only with
``lm_eval run --model ... --tasks <tasks> --samples OUT --log_samples --output_path RUN``,
then score it with ``sparseeval predict --answers RUN``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sparseeval.commands.arguments import positive_int
from sparseeval.commands.predict import add_predictor_arguments, load_predictors
from sparseeval.export import FORMATS, lm_eval_commands, write_export


def run(args: argparse.Namespace) -> int:
    artifacts = load_predictors(args, default_all=True)
    out = write_export(artifacts, args.format, args.out, first=args.first)
    n = sum(a.k if args.first is None else min(a.k, args.first) for a in artifacts)
    print(f"wrote {n} anchors of {', '.join(a.benchmark for a in artifacts)} to {out}")
    if args.format == "lm-eval":
        print("run them with the predictors' training settings (then `sparseeval predict --answers RUN_DIR`):")
        for command in lm_eval_commands(artifacts, out, args.first):
            print(f"  {command}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export anchors for lm-eval (--samples) or as CSV",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_predictor_arguments(p)
    p.add_argument("--format", choices=FORMATS, default="lm-eval")
    p.add_argument("--out", type=Path, required=True, metavar="FILE")
    p.add_argument("--first", type=positive_int, metavar="N",
                   help="only the first N anchors of each predictor's adaptive order (then `sparseeval next`)")
    p.set_defaults(func=run)
