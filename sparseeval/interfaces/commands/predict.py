"""``sparseeval predict``: full-benchmark scores of new models from their anchor answers.

Also home of what ``export``, ``next`` and ``compare`` share: the predictor arguments (``--predictor``
a folder or ``hf://`` repo, ``--benchmark`` looked up in ``--registry``) and :func:`prediction_record`,
the one place a result row is rendered (the table, ``--json`` and ``--csv`` all come from it).
Each row carries the out-of-distribution flag with its reasons in words (e.g. "stronger than every training
model"), shown under warnings in the table and as ``ood_reasons`` in ``--json``/``--csv``; where a model may
lie above the training range, a note says how far off the predictor was on its own stronger models.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl

from sparseeval.core import settings
from sparseeval.core.errors import UsageError
from sparseeval.data.access.answers import read_answers
from sparseeval.data.benchmarks import canonical_benchmark, default_n_shot, same_metric, split_variant
from sparseeval.estimate.artifact import PredictorArtifact, load_predictor
from sparseeval.estimate.methods.joint import MEAN
from sparseeval.estimate.predicting import Prediction, predict
from sparseeval.estimate.selfcheck import SelfCheck
from sparseeval.interfaces.commands.arguments import (
    add_benchmark_argument,
    add_output_arguments,
    existing_path,
    settings_epilog,
    writable_db,
)
from sparseeval.interfaces.commands.output import to_stdout, write_records
from sparseeval.publish.publishing import published_path

DESCRIPTION = """\
Predict each model's full-benchmark score from its answers to a predictor's anchor items.

The answers are an lm-eval output folder (run with --log_samples), a table with columns model,
benchmark, item_id and score (or correct), or a two-column CSV item_id,correct for one model.
Each row shows the predicted score in points, its 90% interval, how many anchors the model answered,
the stage that gave the number, and warnings (answers unlike the training models', anchors missing, a
score outside the training range). A model the anchors place at the top of their range is asked its own
random probe (`sparseeval next` names the items): once it answered them, its estimate and interval come
from the probe by design (stage "probe N": N items), not from the anchors. Answers run under other
settings (few-shot count, metric) than the predictor was trained on are refused.

Predictions are recorded in the store (the predictions_vs_truth view compares them with full scores
once those arrive) when --db is given or the default store exists; --no-db records nothing.

examples:
  sparseeval predict --predictor hf://ORG/REPO --answers run/
  sparseeval predict --benchmark arc,mmlu --answers run/ --json predictions.json"""


def add_predictor_arguments(parser: argparse.ArgumentParser, *, many: bool = True) -> None:
    """``--predictor SOURCE`` / ``--benchmark B`` (+ ``--registry``); several when ``many``."""
    several = "; repeatable" if many else ""
    parser.add_argument("--predictor", action="append", metavar="SOURCE",
                        help="predictor: a folder (from 'sparseeval fit') or a Hub repo "
                             f"hf://ORG/REPO[@revision][/PATH] (hf://datasets/ORG/REPO... for a dataset repo){several}")
    add_benchmark_argument(parser, "use the published predictor of benchmark B from --registry"
                           + ("" if many else " (one)"))
    parser.add_argument("--registry", type=Path, default=None, metavar="DIR",
                        help="folder of published predictors DIR/<benchmark>/ ("
                             + settings.overrides("predictors") + ", else <data dir>/predictors)")


def published_folders(registry: Path) -> list[Path]:
    """Every published predictor folder ``<registry>/<benchmark>/`` (sorted by benchmark)."""
    return sorted(p.parent for p in registry.glob("*/predictor.json")) if registry.is_dir() else []


def load_predictors(args: argparse.Namespace, *, default_all: bool = False, many: bool = True
                    ) -> list[PredictorArtifact]:
    """The predictors named by ``--predictor`` and ``--benchmark``; with neither, every published
    one in ``--registry`` when ``default_all`` (export), else an error. ``many=False``: exactly one."""
    sources: list[str | Path] = list(args.predictor or [])
    if args.registry is None:
        args.registry = settings.predictor_dir()
    sources += [published_path(args.registry, canonical_benchmark(b)) for b in args.benchmark or []]
    if not sources and default_all:
        sources = list(published_folders(args.registry))
        if not sources:
            raise UsageError(f"no published predictors in {args.registry} (run the pipeline or 'sparseeval fit')")
    if not sources:
        raise UsageError("give --predictor SOURCE (a folder or hf://ORG/REPO) or --benchmark B")
    if not many and len(sources) > 1:
        raise UsageError(f"this command takes one predictor, got {len(sources)}: "
                         f"{', '.join(map(str, sources))}")
    return [load_predictor(s) for s in sources]


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


def metric_mismatches(artifacts: list[PredictorArtifact], answers: pl.DataFrame) -> list[tuple[str, str, str]]:
    """(benchmark, the answers' metric, the predictor's) where the answers were scored by another metric
    than the predictor's training data (the metric is settings data of every row, never part of a name)."""
    if "metric" not in answers.columns:
        return []
    out = []
    for art in artifacts:
        for bench in art.benchmarks:
            want = art.training_settings(bench).get("metric")
            got = answers.filter(pl.col("benchmark") == bench).get_column("metric").drop_nulls().unique().sort()
            out += [(bench, g, want) for g in got.to_list() if not same_metric(bench, g, want)]
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
    scored = {bench: (got, want) for bench, got, want in metric_mismatches(artifacts, answers)}
    if scored and not force_settings:
        bench, (got, want) = next(iter(scored.items()))
        raise UsageError(f"the answers to {bench!r} were scored by metric {got!r} but the predictor was trained on "
                         f"{want!r} results: rerun the anchors scored by {want!r} (see `sparseeval export`), or "
                         "pass --force-settings to predict from them anyway")
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
    preds = [replace(p, warnings=(*p.warnings, f"answers run as {back[p.benchmark]} ({_describe(back[p.benchmark])}), "
                                                f"forced onto {_describe(p.benchmark)}"))
             if p.benchmark in back else
             replace(p, warnings=(*p.warnings, note)) if note and p.benchmark == MEAN else p for p in preds]
    return [replace(p, warnings=(*p.warnings, f"answers scored by {scored[p.benchmark][0]}, forced onto a predictor "
                                               f"trained on {scored[p.benchmark][1]}"))
            if p.benchmark in scored else p for p in preds]


def prediction_record(p: Prediction) -> dict[str, Any]:
    """One result row, as the table, ``--json`` and ``--csv`` show it (scores in [0, 1]). Every field of
    :class:`~sparseeval.estimate.predicting.Prediction` is here, so a field added there reaches every output."""
    return p.as_dict()


#: the table's columns: (header, width, cell of a record); a new column is one line here
COLUMNS: list[tuple[str, int, Any]] = [
    ("model", -40, lambda r: r["model"]),
    ("benchmark", -14, lambda r: r["benchmark"]),
    ("predicted", 9, lambda r: f"{100 * r['predicted']:.1f}"),
    ("interval", 15, lambda r: f"[{100 * r['lower']:5.1f}, {100 * r['upper']:5.1f}]"),
    ("anchors", 8, lambda r: f"{r['n_anchors']}/{r['k']}"),
    # which stage gave the number: the anchors, or the model's probe (with the items it used)
    ("stage", 10, lambda r: f"probe {r['probe_items']}" if r["stage"] == "probe" else "anchors"),
]


def format_table(preds: list[Prediction]) -> str:
    """Fixed-width table, scores in percentage points, warnings last."""
    def cells(values: list[str]) -> str:
        return " ".join(f"{v:<{-w}}" if w < 0 else f"{v:>{w}}" for v, (_, w, _) in zip(values, COLUMNS, strict=True))

    head = cells([h for h, _, _ in COLUMNS]) + "  warnings"
    lines = [head, "-" * len(head)]
    for record in map(prediction_record, preds):
        lines.append(cells([str(cell(record)) for _, _, cell in COLUMNS]) + "  "
                     + ("; ".join(record["warnings"]) or "-"))
    return "\n".join(lines)


def record_in_store(db: Path, artifacts: list[PredictorArtifact], preds: list[Prediction]) -> int:
    """Upsert the predictions into the store ``db`` (keyed by model, benchmark and the predictor's anchor
    set); a joint predictor's ``mean`` row is not a benchmark and is not stored. Returns the rows written."""
    from sparseeval.data.store import Store

    store = Store(db)
    store.apply_schema()
    written = 0
    for art in artifacts:
        rows = [p for p in preds if p.benchmark in art.benchmarks and p.benchmark != MEAN]
        if rows:
            set_id = store.predictor_anchor_set(art)
            written += store.save_predictions([{**p.as_dict(), "anchor_set_id": set_id} for p in rows])
    return written


def run(args: argparse.Namespace) -> int:
    artifacts = load_predictors(args)
    answers = read_all_answers(args.answers, artifacts, args.model)
    preds = predict_all(artifacts, answers, force_settings=args.force_settings)
    if not to_stdout(args.json, args.csv):
        alpha = artifacts[0].calibration.get("alpha", 0.1)
        print(f"predicted full-benchmark scores (points) with {100 * (1 - alpha):g}% intervals")
        print(format_table(preds))
    write_records([prediction_record(p) for p in preds], json_to=args.json, csv_to=args.csv)
    for art in artifacts:  # how far off this predictor was on stronger models, where a model may be one
        selfcheck = SelfCheck.of_predictor(art.extra, art.benchmark)  # a joint predictor's: both cuts
        upward = Counter(p.benchmark for p in preds if p.beyond > 0)
        for note in [] if selfcheck is None else selfcheck.notes(upward):
            print(f"note: {note}", file=sys.stderr)
    db = None if args.no_db else args.db or (settings.db_path() if settings.db_path().is_file() else None)
    if db is not None:
        n = record_in_store(db, artifacts, preds)
        print(f"recorded {n} prediction(s) in {db} (view predictions_vs_truth)", file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("predict", help="predict full-benchmark scores from anchor answers",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=settings_epilog("predictors", "data_dir", "db"))
    add_predictor_arguments(p)
    p.add_argument("--answers", type=existing_path, action="append", required=True, metavar="PATH",
                   help="lm-eval output folder (--log_samples), long table (model, benchmark, item_id, "
                        "score|correct) or CSV item_id,correct; repeatable")
    p.add_argument("--model", help="model name for a two-column item_id,correct file (default: the file's name)")
    add_output_arguments(p, "the predictions")
    p.add_argument("--force-settings", action="store_true",
                   help="predict from answers run under other settings (n-shot, metric) than the predictor's "
                        "training data, with a warning (refused by default)")
    db = p.add_mutually_exclusive_group()
    db.add_argument("--db", type=writable_db, default=None, metavar="FILE",
                    help="record the predictions in this store (" + settings.overrides("db")
                         + "; default: the store at <data dir>/sparseeval.duckdb when it exists)")
    db.add_argument("--no-db", action="store_true", help="record nothing, even when the default store exists")
    p.set_defaults(func=run)
