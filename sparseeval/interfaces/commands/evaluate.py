"""``sparseeval evaluate``: compare anchor methods on held-out models of a results folder.

Every method, K and seed runs on the same model splits (one split per seed), and the JSON output
holds one record per run: ``{benchmark, method, k, seed, mae, tau, rho, max_error, seconds, ...}``
with MAE in percentage points. ``--split frontier`` trains on the models at or below the
``--frontier-quantile`` quantile of the score and tests on the stronger rest (validation and
calibration from the training side only); with a calibration share (the default there) every run also
reports bias, interval coverage, half-width, the share flagged and the silent misses (outside the
interval and not flagged).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from tqdm import tqdm

from sparseeval.core import settings
from sparseeval.core.errors import UsageError, UserError
from sparseeval.data.access.sources import DataSource, model_dates, open_data
from sparseeval.data.benchmarks import canonical_benchmark
from sparseeval.data.matrix import build_matrix
from sparseeval.estimate.evaluation import EvalResult, ProtocolConfig, run_joint_protocol, run_protocol, summarize
from sparseeval.estimate.methods import available_methods
from sparseeval.estimate.methods.joint import JOINT_METHOD, common_models
from sparseeval.estimate.splits import FRONTIER_POLICIES, FRONTIER_QUANTILE
from sparseeval.interfaces.commands.arguments import (
    add_benchmark_argument,
    add_output_arguments,
    check_k_below_items,
    device,
    existing_path,
    open_fraction,
    positive_int,
    seed,
    settings_epilog,
)
from sparseeval.interfaces.commands.output import to_stdout, write_records
from sparseeval.publish.report import print_table

#: calibration share of the fitting side under a frontier split (as ``sparseeval fit`` holds out)
FRONTIER_CALIBRATION = 0.2

DESCRIPTION = """\
Compare anchor methods on held-out models: for every method, K and seed, fit on the training models
of a split and measure the error of the predicted full scores on models the fit never saw.

Every method runs on the same splits (one split per seed). The table shows per benchmark, method and
K the mean absolute error (points) and Kendall's tau over the seeds, and the seconds a fit took;
--json and --csv write one record per run. Needs the [fit] extra: pip install 'sparseeval[fit]'.

example:
  sparseeval evaluate --data results/ --benchmark arc,mmlu --method random-linear,sparseeval-linear -k 10,20"""


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in available_methods()]
    if unknown or not methods:
        raise argparse.ArgumentTypeError(
            f"unknown method(s) {', '.join(unknown) or text!r}; choose from {', '.join(available_methods())}")
    return methods


def add_arguments(p: argparse.ArgumentParser, **defaults: object) -> argparse.ArgumentParser:
    """The comparison's arguments: the one front end the CLI and ``bench/accuracy.py`` share (the
    pipeline's ``evaluation`` asset calls the same :func:`sparseeval.estimate.evaluation.run_protocol` with its
    resource settings). ``defaults`` override the CLI's (the bench runs a larger grid by default)."""
    p.add_argument("--data", required="data" not in defaults, type=existing_path, metavar="PATH",
                   help="results in any supported format (a long table, lm-eval output, lighteval, leaderboard "
                        "details)")
    add_benchmark_argument(p, "benchmark(s) to compare on (default: every benchmark in --data)")
    p.add_argument("--method", "--methods", dest="method", default=[settings.SETTINGS["method"].value()],
                   type=_methods, metavar="M[,M...]",
                   help="method(s), comma-separated (default: the one `fit` uses; " + settings.overrides("method")
                        + ")")
    p.add_argument("-k", "--k", default=[settings.SETTINGS["k"].value()], type=_int_list, metavar="K[,K...]",
                   help="anchor count(s), comma-separated, e.g. 10,20,30 (default: " + settings.overrides("k") + ")")
    seeds = settings.SETTINGS["compare_seeds"].default_value
    p.add_argument("--seeds", type=positive_int, default=seeds, metavar="N",
                   help=f"number of seeds (splits), seeds offset..offset+N-1 (default {seeds})")
    p.add_argument("--seed-offset", type=seed, default=settings.DEFAULT_SEED, metavar="S",
                   help=f"first seed (default {settings.DEFAULT_SEED})")
    p.add_argument("--test-frac", type=open_fraction, default=settings.DEFAULT_TEST_FRAC, metavar="F",
                   help="share of the models held out as test models of each split "
                        f"(default {settings.DEFAULT_TEST_FRAC})")
    p.add_argument("--val-frac", type=open_fraction, default=settings.DEFAULT_VAL_FRAC, metavar="F",
                   help="share of the models a method may use to tune itself, never scored "
                        f"(default {settings.DEFAULT_VAL_FRAC})")
    p.add_argument("--split", choices=("random", "family", "date", *FRONTIER_POLICIES),
                   default=settings.DEFAULT_SPLIT_POLICY,
                   help="how test models are held out: random; family (whole model families, e.g. every "
                        "fine-tune of one base model); date (the newest models); frontier (the models above the "
                        "--frontier-quantile quantile of the score: are estimates right on models stronger than "
                        "every training model?); frontier-low (below the 1 - Q quantile) "
                        f"(default {settings.DEFAULT_SPLIT_POLICY})")
    p.add_argument("--frontier-quantile", type=open_fraction, default=FRONTIER_QUANTILE, metavar="Q",
                   help=f"frontier splits: train on the models at or below this quantile of the score "
                        f"(default {FRONTIER_QUANTILE})")
    p.add_argument("--calibration-frac", type=fraction_or_zero, default=None, metavar="F",
                   help="hold out this share of the training side as calibration models, and report interval "
                        f"coverage, width and out-of-distribution flags too (default {FRONTIER_CALIBRATION} with a "
                        "frontier split, else 0: point predictions only)")
    p.add_argument("--device", default=settings.SETTINGS["device"].value(), type=device,
                   help="auto (CUDA when present), cpu, cuda or cuda:N; " + settings.overrides("device"))
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--row-mean-is-score", action="store_true",
                   help="the items are the whole benchmark: a model without a reported score takes its (complete) "
                        "row mean as its score (never assumed: stored items are often a subset)")
    p.set_defaults(**defaults)
    return p


def protocol_config(args: argparse.Namespace) -> ProtocolConfig:
    """The protocol the arguments ask for (a frontier split calibrates by default: coverage and flags are
    what it is about)."""
    frac = args.calibration_frac
    if frac is None:
        frac = FRONTIER_CALIBRATION if args.split in FRONTIER_POLICIES else 0.0
    return ProtocolConfig(split_policy=args.split, val_frac=args.val_frac, test_frac=args.test_frac,
                          frontier_quantile=args.frontier_quantile, calibration_frac=frac)


def fraction_or_zero(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 0.9:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 0.9), got {text!r}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="compare anchor methods on held-out models",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=settings_epilog("method", "k", "device"))
    add_arguments(p)
    add_output_arguments(p, "one record per run")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with open_data(args.data) as data:
        results = compare(args, data)
    return _write(args, results)


def compare(args: argparse.Namespace, data: DataSource,
            on_benchmark: Callable[[list[EvalResult]], None] | None = None, *,
            config: ProtocolConfig | None = None) -> list[EvalResult]:
    """Every method x K x seed of ``args`` on ``data``'s benchmarks (one split per seed shared by all
    methods); ``on_benchmark`` sees the results so far after each benchmark (a long run that stops
    early still leaves its finished benchmarks). ``config``: the protocol (default: from ``args``)."""
    present = data.benchmarks()
    names = args.benchmark.split(",") if isinstance(args.benchmark, str) else list(args.benchmark or [])
    if not names or names == ["all"]:
        benchmarks = present
    else:
        benchmarks = [canonical_benchmark(b) for b in names if b.strip()]
        if not benchmarks:
            raise UsageError(f"--benchmark {args.benchmark!r}: names no benchmark (found: {', '.join(present)})")
        missing = [b for b in benchmarks if b not in present]
        if missing:
            raise UsageError(f"{args.data}: no benchmark {', '.join(missing)} (found: {', '.join(present)})")
    config = config or protocol_config(args)
    seeds = list(range(args.seed_offset, args.seed_offset + args.seeds))
    if JOINT_METHOD in args.method:
        return _run_joint(args, data, benchmarks, config, seeds)
    total = len(benchmarks) * len(args.method) * len(args.k) * len(seeds)
    results: list[EvalResult] = []
    with tqdm(total=total, desc="evaluate", unit="run", disable=args.no_progress, file=sys.stderr) as bar:
        for bench in benchmarks:
            matrix = build_matrix(*data.long(bench), bench, row_mean_is_score=args.row_mean_is_score)
            check_k_below_items(max(args.k), len(matrix.items), bench, args.data)
            dates = model_dates(data.models(), matrix.models) if args.split == "date" else None

            def tick(result: object) -> None:
                bar.set_postfix_str(f"{result.benchmark} {result.method} k={result.k} "  # type: ignore[attr-defined]
                                    f"mae={result.mae:.2f}")  # type: ignore[attr-defined]
                bar.update(1)

            try:
                results += run_protocol(matrix, args.method, args.k, seeds, config=config, device=args.device,
                                        dates=dates, progress=tick)
            except UserError as exc:
                raise UsageError(f"{bench}: {exc}") from exc
            if on_benchmark is not None:
                on_benchmark(results)
    return results


def _run_joint(args: argparse.Namespace, data: DataSource, benchmarks: list[str], config: ProtocolConfig,
               seeds: list[int]) -> list[EvalResult]:
    """sparseeval-joint in the method list: every method on the models that have every listed benchmark,
    same split per seed; K is per benchmark (the joint method spends K x benchmarks items in all)."""
    matrices = [build_matrix(*data.long(b), b, row_mean_is_score=args.row_mean_is_score) for b in benchmarks]
    models = common_models(matrices)
    dates = model_dates(data.models(), models) if args.split == "date" else None
    n_rows = sum(len(benchmarks) + 1 for _ in args.method) * len(args.k) * len(seeds)
    with tqdm(total=n_rows, desc="evaluate", unit="row", disable=args.no_progress, file=sys.stderr) as bar:
        def tick(result: object) -> None:
            bar.set_postfix_str(f"{result.benchmark} {result.method} k={result.k} "  # type: ignore[attr-defined]
                                f"mae={result.mae:.2f}")  # type: ignore[attr-defined]
            bar.update(1)

        results = run_joint_protocol(matrices, args.method, args.k, seeds, config=config, device=args.device,
                                     dates=dates, progress=tick)
    print(f"{len(models)} models have every benchmark ({', '.join(benchmarks)}); K is per benchmark", file=sys.stderr)
    return results


def _write(args: argparse.Namespace, results: list) -> int:
    if args.json is not None:
        write_records([r.row() | {"anchors": r.anchors} for r in results], json_to=args.json)
    if args.csv is not None:
        write_records([r.row() for r in results], csv_to=args.csv)
    if to_stdout(args.json, args.csv):
        return 0
    summary = summarize(results)
    extra = [c for c in ("bias_mean", "coverage_mean", "halfwidth_mean", "flagged_mean", "silent_misses_mean")
             if c in summary.columns]
    table = summary.select("benchmark", "method", "k", "seeds", "mae_mean", "mae_sd", *extra, "tau_mean",
                           "tau_sd", "seconds_mean")
    print_table(table)
    return 0
