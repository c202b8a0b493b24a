"""Do the published predictors' 90 % intervals hold on models they never saw?

Per benchmark of the real Open LLM Leaderboard v1 data and per K: hold out ``--test-frac`` of the
models (seeded), fit and calibrate a predictor on the rest with :func:`sparseeval.estimate.fitting.fit_predictor`
(which itself holds out its calibration models), then score the held-out models and report
empirical coverage of the intervals (target 88-92 % at alpha 0.1), mean width in points, MAE in
points, coverage with half the anchors missing, the OOD flag rate, and the wall time of one
``predict`` call for one model (the user-facing latency). Prints a table.

    python bench/coverage.py [--data DIR] [--method sparseeval-linear] [--k 20 50] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import polars as pl

import sparseeval.estimate.methods
from sparseeval.data.access.sources import read_data
from sparseeval.estimate.fitting import fit_predictor
from sparseeval.estimate.predicting import predict

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "openllm_v1"


def one_run(responses: pl.DataFrame, scores: pl.DataFrame, bench: str, k: int, method: str, seed: int,
            test_frac: float, device: str) -> dict[str, float]:
    resp_b = responses.filter(pl.col("benchmark") == bench)
    scores_b = scores.filter(pl.col("benchmark") == bench)
    models = scores_b.get_column("model").sort().to_list()
    rng = np.random.default_rng(1000 + seed)
    test = set(rng.choice(models, size=round(test_frac * len(models)), replace=False).tolist())
    is_test = pl.col("model").is_in(test)
    t0 = time.perf_counter()
    art = fit_predictor(resp_b.filter(~is_test), scores_b.filter(~is_test), bench, k, method, seed=seed,
                        device=device)
    fit_s = time.perf_counter() - t0
    test_resp = resp_b.filter(is_test)
    truth = dict(scores_b.filter(is_test).select("model", "score").iter_rows())
    preds = predict(art, test_resp)
    y = np.array([truth[p.model] for p in preds])
    pred = np.array([p.predicted for p in preds])
    lo, hi = np.array([p.lower for p in preds]), np.array([p.upper for p in preds])
    # half the anchors missing (a seeded half per run): is the widened interval still honest?
    drop = rng.choice(art.anchor_item_ids, size=art.k // 2, replace=False).tolist()
    half = predict(art, test_resp.filter(~pl.col("item_id").is_in(drop)))
    lo_h, hi_h = np.array([p.lower for p in half]), np.array([p.upper for p in half])
    one_model = test_resp.filter(pl.col("model") == preds[0].model)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        predict(art, one_model)
        times.append(time.perf_counter() - t)
    return {
        "coverage": float(np.mean((lo <= y) & (y <= hi)) * 100),
        "width": float(np.mean(hi - lo) * 100),
        "mae": float(np.mean(np.abs(pred - y)) * 100),
        "cov_half": float(np.mean((lo_h <= y) & (y <= hi_h)) * 100),
        "width_half": float(np.mean(hi_h - lo_h) * 100),
        "ood_rate": float(np.mean([p.ood for p in preds]) * 100),
        "predict_ms": float(np.median(times) * 1000),
        "fit_s": fit_s,
        "n_test": len(preds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--method", default=None,
                        help="anchor method (default sparseeval-linear, else random-linear)")
    parser.add_argument("--benchmarks", nargs="*", default=None)
    parser.add_argument("--k", type=int, nargs="*", default=[20, 50])
    parser.add_argument("--seeds", type=int, nargs="*", default=[0])
    parser.add_argument("--test-frac", type=float, default=0.2)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    method = args.method or next(m for m in ("sparseeval-linear", "random-linear")
                                 if m in sparseeval.estimate.methods.available_methods())
    parsed = read_data(args.data)
    responses, scores = parsed.responses, parsed.scores
    benches = args.benchmarks or sorted(scores.get_column("benchmark").unique().to_list())
    cols = ("coverage", "width", "mae", "cov_half", "width_half", "ood_rate", "predict_ms", "fit_s")
    print(f"method {method}, 90% split-conformal intervals, seeds {args.seeds}, "
          f"test fraction {args.test_frac} (mean over seeds; width/MAE in points)")
    head = f"{'benchmark':<11} {'K':>3} {'n_test':>6} " + " ".join(f"{c:>10}" for c in cols)
    print(head)
    print("-" * len(head))
    for bench in benches:
        for k in args.k:
            runs = [one_run(responses, scores, bench, k, method, s, args.test_frac, args.device)
                    for s in args.seeds]
            mean = {c: float(np.mean([r[c] for r in runs])) for c in cols}
            print(f"{bench:<11} {k:>3} {runs[0]['n_test']:>6} " + " ".join(f"{mean[c]:>10.2f}" for c in cols),
                  flush=True)


if __name__ == "__main__":
    main()
