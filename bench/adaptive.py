"""Adaptive anchors vs a fixed K on held-out real models: items needed for a narrow enough interval.

Per benchmark of the real Open LLM Leaderboard v1 data (and, with ``--joint``, the mean score of a
``sparseeval-joint`` predictor): hold out ``--test-frac`` of the models (seeded), fit and calibrate a
predictor with ``--kmax`` anchors on the rest (:func:`sparseeval.estimate.fitting.fit_predictor`, which holds out
its own calibration models and stores the adaptive order), then answer the held-out models' anchors in
the predictor's order, ``--batch`` at a time:

* **fixed K**: everyone answers the first K; the smallest K whose *mean* 90 % half-width is at most
  ``--width`` points (the fixed budget a user would have to pick);
* **adaptive**: each model stops at the first batch whose half-width is at most ``--width`` (or at
  ``--kmax``); mean items used, the fraction that reached the width, and coverage at the stop;
* **fixed K matched**: the smallest K at which at least as many models have a half-width <= ``--width``
  as adaptive brings there (what a fixed budget needs for the same per-model guarantee).

Coverage per prefix length (every prefix, everyone answering it) is printed too (target 88-92 %).

    python bench/adaptive.py [--benchmarks arc,gsm8k] [--kmax 60] [--batch 5] [--width 2] [--seeds 0 1] [--joint]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from sparseeval.data.access.sources import read_data
from sparseeval.estimate import calibration as cal
from sparseeval.estimate.adaptive import order_of
from sparseeval.estimate.artifact import PredictorArtifact
from sparseeval.estimate.fitting import fit_joint_predictor, fit_predictor
from sparseeval.estimate.methods.joint import MEAN
from sparseeval.estimate.predicting import anchor_matrix, prediction_outputs

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "openllm_v1"


def prefix_curves(art: PredictorArtifact, output: str, X: np.ndarray, lengths: list[int]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Predictions and half-widths (models x prefix lengths) from the first p anchors of the order."""
    est, calib = {n: (e, c) for n, e, c in prediction_outputs(art)}[output]
    order = np.asarray(order_of(art))
    preds, halves = [], []
    for p in lengths:
        Xp = X.copy()
        Xp[:, order[p:]] = np.nan
        pred = cal.predict_calibrated(est, cal.conditional_impute(Xp, calib["ood"]), calib)
        preds.append(pred)
        halves.append(cal.halfwidths(est, pred, ~np.isnan(Xp), calib))
    return np.stack(preds, axis=1), np.stack(halves, axis=1)


def summarize_curves(pred: np.ndarray, half: np.ndarray, truth: np.ndarray, lengths: list[int],
                     width: float) -> dict[str, float | int | None]:
    covered = (np.abs(pred - truth[:, None]) <= half)  # interval clipping to [0, 1] never uncovers truth
    mean_half = half.mean(axis=0)
    reach = np.flatnonzero(mean_half <= width)
    fixed_k = lengths[int(reach[0])] if reach.size else None
    ok = half <= width
    first = np.where(ok.any(axis=1), ok.argmax(axis=1), len(lengths) - 1)
    items = np.asarray(lengths)[first]
    rows = np.arange(len(truth))
    # the fixed K a per-model guarantee would need: as many models at or below the width as adaptive reaches
    share = (half <= width).mean(axis=0)
    matched = np.flatnonzero(share >= ok.any(axis=1).mean() - 1e-9) if ok.any() else np.zeros(0, dtype=np.int64)
    return {
        "fixed_k": fixed_k,
        "fixed_k_matched": lengths[int(matched[0])] if matched.size else None,
        "coverage_by_prefix": [round(float(c) * 100, 2) for c in covered.mean(axis=0)],
        "halfwidth_by_prefix": [round(float(h) * 100, 3) for h in mean_half],
        "fixed_coverage": float(covered[:, int(reach[0])].mean() * 100) if reach.size else None,
        "adaptive_items": float(items.mean()),
        "adaptive_reached": float(ok.any(axis=1).mean() * 100),
        "adaptive_coverage": float(covered[rows, first].mean() * 100),
        "ratio": float(items.mean() / fixed_k) if fixed_k else None,
        "coverage_min": float(covered.mean(axis=0).min() * 100),
        "coverage_max": float(covered.mean(axis=0).max() * 100),
        "halfwidth_at_kmax": float(mean_half[-1] * 100),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--benchmarks", default="arc,gsm8k,hellaswag,mmlu,truthfulqa")
    ap.add_argument("--method", default="sparseeval-linear")
    ap.add_argument("--kmax", type=int, default=60, help="anchors of the predictor (capped at items - 5)")
    ap.add_argument("--batch", type=int, default=5)
    ap.add_argument("--width", type=float, nargs="+", default=[2.0], help="target half-width(s) in points")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--test-frac", type=float, default=0.2)
    ap.add_argument("--joint", action="store_true", help="also the mean score of a sparseeval-joint predictor")
    ap.add_argument("--joint-k", type=int, default=20, help="joint: items per benchmark")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", type=Path, help="write the rows as JSON")
    args = ap.parse_args(argv)
    parsed = read_data(args.data)
    responses, scores = parsed.responses, parsed.scores
    benches = [b for b in args.benchmarks.split(",") if b]
    rows = []
    for seed in args.seeds:
        targets: list[tuple[str, list[str]]] = [(b, [b]) for b in benches]
        if args.joint:
            targets.append((MEAN, benches))
        for name, parts in targets:
            sc = scores.filter(pl.col("benchmark").is_in(parts))
            have = sc.group_by("model").len().filter(pl.col("len") == len(parts)).get_column("model").sort()
            rng = np.random.default_rng(1000 + seed)
            test = set(rng.choice(have.to_list(), size=round(args.test_frac * have.len()), replace=False).tolist())
            is_test = pl.col("model").is_in(test)
            resp = responses.filter(pl.col("benchmark").is_in(parts))
            t0 = time.perf_counter()
            if name == MEAN:
                art = fit_joint_predictor(resp.filter(~is_test), sc.filter(~is_test), parts, args.joint_k,
                                          seed=seed, device=args.device)
            else:
                n_items = resp.get_column("item_id").n_unique()
                art = fit_predictor(resp.filter(~is_test), sc.filter(~is_test), name, min(args.kmax, n_items - 5),
                                    args.method, seed=seed, device=args.device)
            fit_s = time.perf_counter() - t0
            models, X = anchor_matrix(art, resp.filter(is_test))
            if name == MEAN:
                wide = sc.filter(is_test).pivot(on="benchmark", index="model", values="score")
                truth_map = dict(zip(wide.get_column("model").to_list(),
                                     wide.select(parts).mean_horizontal().to_list(), strict=True))
            else:
                truth_map = dict(sc.filter(is_test).select("model", "score").iter_rows())
            truth = np.array([truth_map[m] for m in models])
            lengths = sorted({*range(args.batch, art.k, args.batch), art.k})
            t1 = time.perf_counter()
            output = name if name == MEAN else art.benchmark
            pred, half = prefix_curves(art, output, X, lengths)
            mode = {n: c for n, _, c in prediction_outputs(art)}[output]["mode"]
            for w in args.width:
                row = {"target": name, "width": w, "seed": seed, "k": art.k, "mode": mode, "models": len(models),
                       "fit_s": fit_s, "curve_s": time.perf_counter() - t1
                       } | summarize_curves(pred, half, truth, lengths, w / 100.0)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    df = pl.DataFrame(rows)
    agg = df.group_by("target", "width", maintain_order=True).agg(
        pl.col("k").first(), pl.col("mode").first(), pl.col("fixed_k").mean(), pl.col("fixed_k_matched").mean(),
        pl.col("adaptive_items").mean(), pl.col("ratio").mean(),
        pl.col("adaptive_reached").mean(), pl.col("adaptive_coverage").mean(), pl.col("fixed_coverage").mean(),
        pl.col("coverage_min").min(), pl.col("coverage_max").max(), pl.col("halfwidth_at_kmax").mean(),
        pl.col("fit_s").mean())
    with pl.Config(tbl_rows=50, tbl_cols=20, float_precision=2, tbl_width_chars=200):
        print(f"90 % intervals, batch {args.batch}; width = target half-width in points")
        print(agg)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
