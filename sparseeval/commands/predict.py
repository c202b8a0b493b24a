"""``sparseeval predict``: full-benchmark scores of new models from their anchor answers.

Prints one row per model and benchmark (prediction, 90 % conformal interval, anchors answered,
warnings such as OOD with its reason, e.g. "stronger than every training model"); ``--json`` also
writes the rows for machines. Also home of the predictor
arguments shared by ``export`` and ``compare`` (``--predictor DIR`` or ``--benchmark B`` looked
up in a ``--registry`` of published predictors ``DIR/<benchmark>/``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import polars as pl

from sparseeval import settings
from sparseeval.answers import read_answers
from sparseeval.artifact import PredictorArtifact, load_predictor
from sparseeval.atomic import atomic_write_text
from sparseeval.benchmarks import canonical_benchmark, default_n_shot, split_variant
from sparseeval.commands.arguments import existing_path
from sparseeval.errors import UsageError
from sparseeval.methods.joint import MEAN
from sparseeval.publishing import published_path
from sparseeval.scoring import Prediction, predict


def add_predictor_arguments(parser: argparse.ArgumentParser, *, many: bool = True) -> None:
    """``--predictor DIR`` / ``--benchmark B`` (+ ``--registry``), repeatable when ``many``."""
    action = "append" if many else "store"
    parser.add_argument("--predictor", action=action, type=Path, metavar="DIR",
                        help="predictor folder (from 'sparseeval fit')" + (", repeatable" if many else ""))
    parser.add_argument("--benchmark", action=action, metavar="B",
                        help="use the published predictor of benchmark B from --registry"
                             + (", repeatable" if many else ""))
    parser.add_argument("--registry", type=Path, default=None, metavar="DIR",
                        help="folder of published predictors <DIR>/<benchmark>/ "
                             "(default $SPARSEEVAL_PREDICTORS or <$SPARSEEVAL_DATA_DIR>/predictors)")


def published_folders(registry: Path) -> list[Path]:
    """Every published predictor folder ``<registry>/<benchmark>/`` (sorted by benchmark)."""
    return sorted(p.parent for p in registry.glob("*/predictor.json")) if registry.is_dir() else []


def load_predictors(args: argparse.Namespace, *, default_all: bool = False) -> list[PredictorArtifact]:
    """The predictors named by ``--predictor`` and ``--benchmark``; with neither, every published
    one in ``--registry`` when ``default_all`` (export), else an error."""
    folders = [args.predictor] if isinstance(args.predictor, Path) else list(args.predictor or [])
    if args.registry is None:
        args.registry = settings.predictor_dir()
    benches = [args.benchmark] if isinstance(args.benchmark, str) else list(args.benchmark or [])
    folders += [published_path(args.registry, canonical_benchmark(b)) for b in benches]
    if not folders and default_all:
        folders = published_folders(args.registry)
        if not folders:
            raise UsageError(f"no published predictors in {args.registry} (run the pipeline or 'sparseeval fit')")
    if not folders:
        raise UsageError("give --predictor DIR or --benchmark B")
    return [load_predictor(f) for f in folders]


def read_all_answers(paths: list[Path], artifacts: list[PredictorArtifact],
                     model: str | None = None) -> pl.DataFrame:
    """Concatenated answers; a file without a benchmark column takes the single predictor's."""
    bench = artifacts[0].benchmark if len(artifacts) == 1 and not artifacts[0].is_joint else None
    return pl.concat([read_answers(p, benchmark=bench, model=model) for p in paths])


def settings_mismatches(artifacts: list[PredictorArtifact], answers: pl.DataFrame) -> list[tuple[str, str]]:
    """(answers' benchmark variant, predictor benchmark) pairs where the answers were run under other
    settings than the predictor's training data (``arc@0shot`` answers for an ``arc`` predictor)."""
    present = set(answers.get_column("benchmark").unique().to_list())
    out = []
    for art in artifacts:
        for bench in art.benchmarks:  # a joint predictor reads several benchmarks
            if bench in present:
                continue
            base = split_variant(bench)[0]
            out += [(b, bench) for b in sorted(present) if split_variant(b)[0] == base]
    return out


def _describe(benchmark: str) -> str:
    base, shots, metric = split_variant(benchmark)
    shots = default_n_shot(base) if shots is None else shots
    return f"{shots}-shot" + (f", metric {metric}" if metric else "")


def predict_all(artifacts: list[PredictorArtifact], answers: pl.DataFrame, *,
                force_settings: bool = False) -> list[Prediction]:
    """Predictions of every predictor whose benchmark the answers cover.

    Answers run under other settings (few-shot count, metric) than the predictor was trained on are
    refused: an anchor answered 0-shot is not the item the predictor learned from 25-shot answers.
    ``force_settings`` uses them anyway, with a warning on every prediction.
    """
    mismatched = settings_mismatches(artifacts, answers)
    if mismatched and not force_settings:
        got, want = mismatched[0]
        raise UsageError(f"the answers were run as {got!r} ({_describe(got)}) but the predictor {want!r} was "
                         f"trained on {_describe(want)} results: rerun the anchors with the predictor's settings "
                         f"(see `sparseeval export`), or pass --force-settings to predict from them anyway")
    forced: dict[str, str] = {}
    if mismatched:
        forced = dict(mismatched)
        answers = answers.with_columns(pl.col("benchmark").replace(forced))
    present = set(answers.get_column("benchmark").unique().to_list())
    usable = [a for a in artifacts if any(b in present for b in a.benchmarks)]
    if not usable:
        raise UsageError(f"the answers cover benchmarks {', '.join(sorted(present))}, none of which has a "
                         f"predictor here ({', '.join(b for a in artifacts for b in a.benchmarks)})")
    preds = [p for a in usable for p in predict(a, answers)]
    back = {want: got for got, want in forced.items()}
    forced_joint = [a for a in usable if a.is_joint and any(b in back for b in a.benchmarks)]
    note = "; ".join(f"answers run as {back[b]} ({_describe(back[b])}), forced onto {_describe(b)}"
                     for a in forced_joint for b in a.benchmarks if b in back)
    return [replace(p, warnings=(*p.warnings, f"answers run as {back[p.benchmark]} ({_describe(back[p.benchmark])}), "
                                               f"forced onto {_describe(p.benchmark)}"))
            if p.benchmark in back else
            replace(p, warnings=(*p.warnings, note)) if note and p.benchmark == MEAN else p for p in preds]


def format_table(preds: list[Prediction]) -> str:
    """Fixed-width table, scores in percentage points."""
    head = f"{'model':<40} {'benchmark':<14} {'predicted':>9} {'interval':>15} {'anchors':>8}  warnings"
    lines = [head, "-" * len(head)]
    for p in preds:
        interval = f"[{100 * p.lower:5.1f}, {100 * p.upper:5.1f}]"
        lines.append(f"{p.model:<40} {p.benchmark:<14} {100 * p.predicted:9.1f} {interval:>15} "
                     f"{f'{p.n_anchors}/{p.k}':>8}  {'; '.join(p.warnings) or '-'}")
    return "\n".join(lines)


def write_json(preds: list[Prediction], out: Path) -> None:
    """``[{model, benchmark, predicted, lower, upper, n_anchors, ood, ood_reasons}]``, written atomically
    (``ood_reasons``: why the model may lie outside what the training models cover, in words)."""
    rows = [{"model": p.model, "benchmark": p.benchmark, "predicted": p.predicted, "lower": p.lower,
             "upper": p.upper, "n_anchors": p.n_anchors, "ood": p.ood, "ood_reasons": list(p.ood_reasons)}
            for p in preds]
    atomic_write_text(out, json.dumps(rows, indent=1) + "\n")


def run(args: argparse.Namespace) -> int:
    artifacts = load_predictors(args)
    answers = read_all_answers(args.answers, artifacts, args.model)
    preds = predict_all(artifacts, answers, force_settings=args.force_settings)
    alpha = artifacts[0].calibration.get("alpha", 0.1)
    print(f"predicted full-benchmark scores (points) with {100 * (1 - alpha):g}% conformal intervals")
    print(format_table(preds))
    if args.json:
        write_json(preds, args.json)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("predict", help="predict full-benchmark scores from anchor answers",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_predictor_arguments(p)
    p.add_argument("--answers", type=existing_path, action="append", required=True, metavar="PATH",
                   help="lm-eval output folder (--log_samples), long table (model, benchmark, item_id, "
                        "score|correct) or CSV item_id,correct; repeatable")
    p.add_argument("--model", help="model name for a two-column item_id,correct file (default: file name)")
    p.add_argument("--json", type=Path, metavar="OUT", help="also write the predictions as JSON")
    p.add_argument("--force-settings", action="store_true",
                   help="predict from answers run under other settings (n-shot, metric) than the predictor's "
                        "training data, with a warning (refused by default)")
    p.set_defaults(func=run)
