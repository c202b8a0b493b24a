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

from sparseeval import settings
from sparseeval.benchmarks import canonical_benchmark
from sparseeval.commands.predict import USER_ERRORS
from sparseeval.progress import progress_bar
from sparseeval.readers.base import InputError
from sparseeval.scoring import fit_predictor
from sparseeval.sources import open_data


def run(args: argparse.Namespace) -> int:
    try:
        bench = canonical_benchmark(args.benchmark)
        with progress_bar("fit", total=3, unit="phase") as tick, open_data(args.data) as data:
            tick(f"read {args.data}")
            t0 = time.perf_counter()
            if bench not in data.benchmarks():
                raise InputError(args.data, f"no benchmark {bench!r} (found: {', '.join(data.benchmarks())})")
            artifact = fit_predictor(*data.long(bench), bench, args.k, args.method,
                                     calibration_frac=args.calibration_frac, seed=args.seed, device=args.device,
                                     alpha=args.alpha, models=data.models(), row_mean_is_score=args.row_mean_is_score,
                                     settings=data.settings(bench))
            tick(f"selected and calibrated {args.k} anchors")
            out = args.out or (args.registry or settings.predictor_dir()) / bench
            saved = artifact.save(out)
            tick(f"saved {out}")
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
                   help="results in any supported format (every model is used for fitting or calibration)")
    p.add_argument("--benchmark", required=True, metavar="B")
    p.add_argument("-k", "--k", type=int, required=True, help="number of anchors")
    p.add_argument("--method", default=settings.DEFAULT_METHOD,
                   help=f"registered method (default {settings.DEFAULT_METHOD})")
    p.add_argument("--calibration-frac", type=float, default=0.2)
    p.add_argument("--alpha", type=float, default=settings.DEFAULT_ALPHA,
                   help="interval miscoverage (0.1: 90%% intervals)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--row-mean-is-score", action="store_true",
                   help="the items are the whole benchmark: a model without a reported score takes its (complete) "
                        "row mean as its score (never assumed: stored items are often a subset)")
    p.add_argument("--out", type=Path, metavar="PREDICTOR_DIR",
                   help="predictor folder (default <registry>/<benchmark>)")
    p.add_argument("--registry", type=Path, default=None, metavar="DIR",
                   help="published predictors folder (default $SPARSEEVAL_PREDICTORS or <data dir>/predictors)")
    p.set_defaults(func=run)
