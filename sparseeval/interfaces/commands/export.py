"""``sparseeval export``: a predictor's anchors as lm-eval runs them (a task folder or a --samples file) or CSV."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from sparseeval.core.errors import UsageError
from sparseeval.estimate.artifact import PredictorArtifact
from sparseeval.interfaces.commands.arguments import positive_int, settings_epilog
from sparseeval.interfaces.commands.predict import add_predictor_arguments, load_predictors
from sparseeval.interfaces.export import FORMATS, lm_eval_commands, probe_items_for, write_export

#: where the printed next steps tell lm-eval to write its run (a name that works as written)
RUN_DIR = "sparseeval_run"

DESCRIPTION = f"""\
Export predictors' anchors for a new model to answer.

--format lm-eval-task (recommended) writes a task folder for lm-eval's --include_path: a task
sparseeval_<benchmark> (a group when there are several benchmarks, or a joint predictor) whose
documents are exactly the anchors, under the prompt, few-shot and metric settings the predictor was
trained with (taken from lm-eval's own task config when lm-eval loads it). lm-eval then prints the
predicted full-benchmark score, its 90% interval, the anchors' raw accuracy and the out-of-distribution
flag in its own results table. The predictors are copied into the folder, so it is self-contained.
With --probe-for MODEL the task also runs MODEL's probe (a random draw of its own): where the anchors
place it at the top, the estimate, its interval and the stage (2: the probe's) come from the probe.

--format lm-eval writes the JSON file lm-eval's --samples option takes ({{task: [doc ids]}}) and prints
the lm_eval commands that run it; score the run with `sparseeval predict --answers {RUN_DIR}`.
--format csv writes one row per anchor (benchmark, task, doc_id, item_id, position).
--format model-card writes a predictor's Hub model card (README.md: benchmarks, anchors, settings,
training population, accuracy, data licence); publish the folder with `hf upload ORG/REPO DIR .`.

Without --predictor or --benchmark every predictor published in --registry is exported.

examples:
  sparseeval export --predictor hf://ORG/REPO --format lm-eval-task --out tasks
  sparseeval export --benchmark arc,mmlu --format lm-eval --out anchors.json"""


def predictor_flags(artifacts: list[PredictorArtifact]) -> str:
    """The ``--predictor`` options naming exactly these predictors (as the user gave them, or their folder)."""
    return " ".join(f"--predictor {shlex.quote(a.source or str(a.folder))}" for a in artifacts)


def probed(artifacts: list[PredictorArtifact], model: str | None, n: int | None) -> str:
    """What an export with ``--probe-for`` wrote beyond the anchors, for its message (after the write, which
    refuses a predictor without a probe plan)."""
    if model is None:
        return ""
    return f" and {sum(len(probe_items_for(a, model, n)) for a in artifacts)} items of {model}'s probe"


def run(args: argparse.Namespace) -> int:
    artifacts = load_predictors(args, default_all=True)
    if args.format == "model-card":
        from sparseeval.core.atomic import atomic_write_text
        from sparseeval.interfaces.model_card import model_card

        if len(artifacts) != 1:
            raise UsageError(f"a model card describes one predictor; got {len(artifacts)}")
        source = artifacts[0].source or ""
        repo = source.removeprefix("hf://") if source.startswith("hf://") else args.repo
        atomic_write_text(args.out, model_card(artifacts[0], repo))
        print(f"wrote the model card of {artifacts[0].benchmark} to {args.out}")
        folder = args.out.parent if args.out.name == "README.md" else artifacts[0].folder
        print("next: publish the folder as a Hub model repo (the Hub's own client, logged in with `hf auth login`):")
        print(f"  hf upload {repo} {shlex.quote(str(folder))} . --repo-type model")
        return 0
    if args.format == "lm-eval-task":
        from sparseeval.interfaces.lm_eval_tasks import write_task_folder

        if args.first is not None:
            raise UsageError("--first applies to --format lm-eval and csv (an lm-eval task runs every anchor)")

        written = write_task_folder(artifacts, args.out, include_paths=args.lm_eval_include, probe_for=args.probe_for,
                                    probe_items=args.probe_items)
        benches = ", ".join(b for a in artifacts for b in a.benchmarks)
        print(f"wrote lm-eval task {written.name} ({sum(a.k for a in artifacts)} anchors"
              f"{probed(artifacts, args.probe_for, args.probe_items)} of {benches}) "
              f"to {args.out}")
        print("next: run the anchors with lm-eval (it prints the estimate), then, if you like, the same here:")
        folder = shlex.quote(str(args.out))
        print(f"  lm_eval run --model hf --model_args pretrained=YOUR_MODEL --include_path {folder} "
              f"--tasks {written.name} --log_samples --output_path {RUN_DIR}")
        print(f"  sparseeval predict {predictor_flags(artifacts)} --answers {RUN_DIR}")
        return 0
    if args.probe_items is not None and args.probe_for is None:
        raise UsageError("--probe-items needs --probe-for MODEL (each model's probe is its own draw)")
    out = write_export(artifacts, args.format, args.out, first=args.first, probe_for=args.probe_for,
                       probe_items=args.probe_items)
    n = sum(a.k if args.first is None else min(a.k, args.first) for a in artifacts)
    benches = ", ".join(a.benchmark for a in artifacts)
    print(f"wrote {n} anchors{probed(artifacts, args.probe_for, args.probe_items)} of {benches} to {out}")
    if args.format == "lm-eval":
        print("next: run them under the predictors' training settings, then score the run:")
        for command in lm_eval_commands(artifacts, shlex.quote(str(out)), args.first, output_path=RUN_DIR,
                                        probe_for=args.probe_for, probe_items=args.probe_items):
            print(f"  {command}")
        print(f"  sparseeval predict {predictor_flags(artifacts)} --answers {RUN_DIR}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export anchors as an lm-eval task folder, an lm-eval --samples file "
                                             "or CSV", description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=settings_epilog("predictors", "data_dir"))
    add_predictor_arguments(p)
    p.add_argument("--format", choices=("lm-eval-task", *FORMATS, "model-card"), default="lm-eval",
                   help="lm-eval-task: a task folder for lm_eval --include_path (lm-eval prints the estimate); "
                        "lm-eval: a --samples file; csv: a table of the anchors; model-card: the predictor's "
                        "Hub README.md (default: lm-eval)")
    p.add_argument("--repo", default="ORG/REPO", metavar="ORG/REPO",
                   help="model-card: the Hub repo the predictor is published as, for the card's usage lines")
    p.add_argument("--out", type=Path, required=True, metavar="PATH",
                   help="the file to write (lm-eval, csv), or the folder (lm-eval-task; created, its task files "
                        "replaced)")
    p.add_argument("--first", type=positive_int, metavar="N",
                   help="only the first N anchors of each predictor's adaptive order (then `sparseeval next`); "
                        "lm-eval and csv formats")
    p.add_argument("--probe-for", metavar="MODEL",
                   help="also the items of MODEL's own probe (its first batch, or --probe-items): what a model the "
                        "anchors place at the top runs next (`sparseeval next` names the same items); "
                        "lm-eval-task: the task runs them and lm-eval prints the probe's estimate")
    p.add_argument("--probe-items", type=positive_int, metavar="N",
                   help="with --probe-for: the first N items of its probe (default: the plan's first batch; "
                        "`sparseeval next` says when more are needed)")
    p.add_argument("--lm-eval-include", type=Path, action="append", default=[], metavar="DIR",
                   help="lm-eval-task: a folder of your own lm-eval task configs that defines the predictor's "
                        "tasks, when they are not lm-eval's built-in ones; repeatable")
    p.set_defaults(func=run)
