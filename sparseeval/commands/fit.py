"""``sparseeval fit``: fit, calibrate and publish a predictor for one benchmark.

Models of ``--data`` are split once with ``--seed``: ``--calibration-frac`` held out for the
conformal intervals and the OOD threshold, the rest fits the method. The predictor folder
(``predictor.json`` + ``state.pt``) goes to ``--out`` (default ``<registry>/<benchmark>``, where
``predict --benchmark`` finds it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import polars as pl

from sparseeval.benchmarks import canonical_benchmark
from sparseeval.commands.predict import DEFAULT_REGISTRY, USER_ERRORS
from sparseeval.readers.base import InputError, ParsedResults
from sparseeval.scoring import fit_predictor


def read_data(path: Path) -> ParsedResults:
    """A long-format source: the project's readers when present, else responses/scores parquet.

    A folder of ``responses.*`` / ``scores.*`` is a long-format folder (``readers.long``); anything
    else goes to the source detector (lm-eval output, leaderboard details, a single long file).
    """
    try:
        from sparseeval.readers.long import read_long
    except ImportError:
        read_long = None
    try:
        from sparseeval.readers.detect import read_source
    except ImportError:
        read_source = None
    if read_long is not None and path.is_dir() and any(path.glob("responses.*")):
        return read_long(path)
    if read_source is not None:
        return read_source(path)
    resp_path, score_path = path / "responses.parquet", path / "scores.parquet"
    if not resp_path.is_file():
        raise InputError(path, "no responses.parquet in this folder")
    try:
        responses = pl.read_parquet(resp_path)
        if "score" not in responses.columns and "correct" in responses.columns:
            responses = responses.rename({"correct": "score"})
        responses = responses.select("model", "benchmark", pl.col("item_id").cast(pl.String),
                                     pl.col("score").cast(pl.Float64))
        scores = pl.read_parquet(score_path).select("model", "benchmark", pl.col("score").cast(pl.Float64)) \
            if score_path.is_file() else None
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputError(path, f"cannot read long-format parquet: {str(exc).splitlines()[0]}") from None
    return ParsedResults(responses=responses, **({"scores": scores} if scores is not None else {}))


def run(args: argparse.Namespace) -> int:
    try:
        bench = canonical_benchmark(args.benchmark)
        data = read_data(args.data)
        t0 = time.perf_counter()
        artifact = fit_predictor(data.responses, data.scores, bench, args.k, args.method,
                                 calibration_frac=args.calibration_frac, seed=args.seed, device=args.device,
                                 alpha=args.alpha, models=data.models)
        out = args.out or args.registry / bench
        saved = artifact.save(out)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    c = saved.calibration
    print(f"{bench}: {saved.method} with {saved.k} anchors fitted on {saved.train_models['count']} models "
          f"in {time.perf_counter() - t0:.1f}s; calibrated on {c['n_calibration']} held-out models: "
          f"MAE {c['calibration_mae_points']:.2f} points, {100 * (1 - c['alpha']):g}% interval "
          f"mean half-width {c['mean_halfwidth_points']:.2f} points ({c['mode']} scale)")
    print(f"saved {out} ({saved.content_hash})")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("fit", help="fit, calibrate and save a predictor for one benchmark",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, metavar="DIR",
                   help="long-format results (responses + scores)")
    p.add_argument("--benchmark", required=True, metavar="B")
    p.add_argument("-k", "--k", type=int, required=True, help="number of anchors")
    p.add_argument("--method", default="sparseeval-mlp", help="registered method (default sparseeval-mlp)")
    p.add_argument("--calibration-frac", type=float, default=0.2)
    p.add_argument("--alpha", type=float, default=0.1, help="interval miscoverage (0.1: 90%% intervals)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--out", type=Path, metavar="PREDICTOR_DIR",
                   help="predictor folder (default <registry>/<benchmark>)")
    p.add_argument("--registry", type=Path, default=DEFAULT_REGISTRY, metavar="DIR")
    p.set_defaults(func=run)
