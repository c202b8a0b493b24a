"""The second stage (the design-based probe, ``sparseeval/estimate/probe.py``) against the anchors and its rivals,
on both protocols and both kinds of pool.

Per benchmark and seed, two protocols: **frontier** (fit on the models at or below the 90th percentile of the
score, predict the stronger rest) and **random** (hold out a seeded fifth). Each fit is ``sparseeval fit``'s
own (:func:`sparseeval.estimate.fitting.fit_predictor`, default method, K = 20, the default probe); the held-out models
are predicted by ``predict``:

* ``anchors``: from their anchors alone (today's estimate before this stage);
* ``probe@40``: a model the anchors place at the top answers the first 40 items of its own draw;
* ``probe@seq``: ... and then more, batch by batch, as ``sparseeval next`` asks (default target);
* ``--draws`` fresh draws per model (another salt each), the figures averaged over them;
* the rivals, on the same routed models and the same first 40 items' budget (each its own seeded draw per
  model, unstratified): ``mean@40`` the plain mean of 40 random pool items, ``cv@40`` with the training pass
  rates as a control variate (difference estimator), ``ppi@40`` prediction-powered inference with the
  control's coefficient tuned on the sample (PPI++), ``aipw@40`` the chosen control without strata. Each
  through the same link (identity on a whole pool, the line on a subset) and with its own t interval.
* ``random-20``: the calibrated mean of 20 random items (``--method random``, every model).

Printed per row: MAE and bias (points), 90 % coverage, silent misses (outside the interval, not flagged),
the share probed, and the probe items per probed model (mean / max). ``../shared/data/openllm_v2`` holds
pools that are the whole benchmark (the score is the mean of its items: unbiased by design); the v1 data's
pools are a subset (a line maps their mean to the score).

    python bench/second_stage.py [--data DIR ...] [--benchmarks a,b] [--seeds 0 1] [--protocols frontier random]
                                 [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from sparseeval.data.access.sources import read_data
from sparseeval.estimate.fitting import ProbeSettings, fit_predictor
from sparseeval.estimate.predicting import (
    Prediction,
    _predict_matrix,
    answer_matrices,
    follow_probe,
    prediction_figures,
)
from sparseeval.estimate.probe import STAGE_PROBE, ProbePlan, control, draw_order, plan_of
from sparseeval.estimate.splits import frontier_cut

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DEFAULT_DATA = [SHARED / "openllm_v1", SHARED / "openllm_v2"]


def held_out(scores: pl.DataFrame, protocol: str, seed: int) -> set[str]:
    """The models predicted: the strongest tenth (frontier) or a seeded fifth (random, from the sorted names)."""
    scores = scores.sort("model")
    models = scores.get_column("model").to_list()
    if protocol == "frontier":
        _, beyond = frontier_cut(scores.get_column("score").to_numpy(), 0.9)
        return {m for m, b in zip(models, beyond, strict=True) if b}
    order = np.random.default_rng(seed).permutation(len(models))
    return {models[i] for i in order[: len(models) // 5]}


def srs(plan: ProbePlan, model: str, n: int, seed: int) -> np.ndarray:
    """An unstratified random sample of ``n`` pool positions for ``model`` (the rivals' draw)."""
    keys = [int.from_bytes(hashlib.blake2b(f"{seed}/{model}/{item}".encode(), digest_size=8).digest(), "little")
            for item in plan.items]
    return np.argsort(keys)[:n]


def rival(kind: str, plan: ProbePlan, model: str, pool: np.ndarray, anchors: np.ndarray, s1: float,
          seed: int, n: int = 40) -> tuple[float, float, float]:
    """(estimate, lower, upper) of a rival estimator from ``n`` unstratified random pool items."""
    take = srs(plan, model, min(n, len(plan.items)), seed)
    y = pool[take].astype(np.float64)
    q = np.asarray(plan.pass_rates)
    if kind == "mean":
        resid, base = y, 0.0
    elif kind == "cv":
        resid, base = y - q[take], float(q.mean())
    elif kind == "ppi":  # PPI++: the control's coefficient tuned on the sample (power tuning), clipped to [0, 1]
        p_hat = control(plan, s1)
        c = np.cov(y, p_hat[take])
        lam = float(np.clip(c[0, 1] / c[1, 1], 0.0, 1.0)) if c[1, 1] > 0 else 0.0
        resid, base = y - lam * p_hat[take], lam * float(p_hat.mean())
    else:  # aipw without strata
        p_hat = control(plan, s1)
        resid, base = y - p_hat[take], float(p_hat.mean())
    m, k = len(plan.items), anchors.size
    mean_u = base + resid.mean()
    var = (1 - take.size / m) * resid.var(ddof=1) / take.size
    pool_mean = (anchors.sum() + m * mean_u) / (m + k)
    se = m / (m + k) * np.sqrt(var)
    half = np.hypot(plan.link.slope * stats.t.ppf(1 - plan.alpha / 2, take.size - 1) * se, plan.link.residual)
    score = float(plan.link.score(pool_mean))
    return float(np.clip(score, 0, 1)), score - half, score + half


def figures(est: np.ndarray, lo: np.ndarray, hi: np.ndarray, flagged: np.ndarray, truth: np.ndarray,
            probed: np.ndarray, items: np.ndarray) -> dict[str, float]:
    err = est - truth
    inside = (truth >= lo - 1e-9) & (truth <= hi + 1e-9)
    return {"mae": float(np.mean(np.abs(err)) * 100), "bias": float(np.mean(err) * 100),
            "coverage": float(inside.mean()), "silent_misses": float((~inside & ~flagged).mean()),
            "probed": float(probed.mean()), "items_mean": float(items[probed].mean()) if probed.any() else 0.0,
            "items_max": int(items.max()) if probed.any() else 0}


def from_preds(preds: list[Prediction], truth: np.ndarray) -> dict[str, float]:
    f = prediction_figures(preds, truth)
    return {"mae": f.mae, "bias": f.bias, "coverage": f.coverage, "silent_misses": f.silent_misses,
            "probed": f.probed, "items_mean": f.probe_items_mean, "items_max": f.probe_items_max}


def one_run(responses: pl.DataFrame, scores: pl.DataFrame, bench: str, protocol: str, seed: int,
            k: int, device: str, draws: int = 1, anchor_head: bool = False) -> dict[str, Any]:
    test = held_out(scores, protocol, seed)
    is_test = pl.col("model").is_in(list(test))
    t0 = time.perf_counter()
    art = fit_predictor(responses.filter(~is_test), scores.filter(~is_test), bench, k, "sparseeval-headroom",
                        seed=seed, device=device, probe=ProbeSettings(anchor_head=anchor_head))
    fit_s = time.perf_counter() - t0
    plan = plan_of(art.extra)
    truth_of = dict(scores.filter(is_test).select("model", "score").iter_rows())
    answers = responses.filter(is_test)
    models, X, P = answer_matrices(art, answers)
    truth = np.array([truth_of[m] for m in models])
    alone = _predict_matrix(art, models, X)
    row: dict[str, Any] = {"benchmark": bench, "protocol": protocol, "seed": seed, "n": len(models),
                           "fit_s": round(fit_s, 1), "items_in_pool": len(art.item_ids),
                           "whole_pool": bool(plan.link.whole) if plan else None,
                           "probe_note": art.extra.get("probe_note"), "anchors": from_preds(alone, truth)}
    if plan is None or P is None:
        return row
    per_draw: dict[str, list[dict[str, float]]] = {}
    for draw in range(draws):  # each a fresh draw per model (another salt), as another predictor's would be
        art.extra["probe"] = replace(plan, salt=f"{plan.salt}#{draw}" if draw else plan.salt).as_json()
        drawn = plan_of(art.extra)
        assert drawn is not None
        first = np.full(P.shape, np.nan, dtype=np.float32)
        for i, m in enumerate(models):
            o = draw_order(drawn, m)[:drawn.first_items]
            first[i, o] = P[i, o]
        once = _predict_matrix(art, models, X, first)
        per_draw.setdefault("probe@40", []).append(from_preds(once, truth))
        per_draw.setdefault("probe@seq", []).append(from_preds(follow_probe(art, models, X, P), truth))
        routed = np.array([p.stage == STAGE_PROBE or p.probe_next > 0 for p in once])
        base = np.array([[p.predicted, p.lower, p.upper] for p in alone])
        flags = np.array([p.ood for p in alone])
        for kind in ("mean", "cv", "ppi", "aipw"):
            est = base.copy()
            for i in np.flatnonzero(routed):
                est[i] = rival(kind, drawn, models[i], P[i], X[i].astype(np.float64), alone[i].predicted,
                               seed * 1000 + draw)
            per_draw.setdefault(f"{kind}@40", []).append(
                figures(est[:, 0], est[:, 1], est[:, 2], flags & ~routed, truth, routed,
                        np.where(routed, min(40, len(drawn.items)), 0)))
    art.extra["probe"] = plan.as_json()
    for name, runs in per_draw.items():
        row[name] = {key: float(np.mean([r[key] for r in runs])) for key in runs[0]} | {
            "items_max": int(max(r["items_max"] for r in runs)), "draws": len(runs)}
    rnd = fit_predictor(responses.filter(~is_test), scores.filter(~is_test), bench, 20, "random", seed=seed,
                        device=device, probe=None)
    row["random-20"] = from_preds(_predict_matrix(rnd, *answer_matrices(rnd, answers)[:2]), truth)
    return row


COLUMNS = ("anchors", "probe@40", "probe@seq", "mean@40", "cv@40", "ppi@40", "aipw@40", "random-20")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, nargs="+", default=DEFAULT_DATA)
    ap.add_argument("--benchmarks", default=None, help="comma-separated (default: every benchmark of the data)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--protocols", nargs="+", default=["frontier", "random"], choices=["frontier", "random"])
    ap.add_argument("-k", type=int, default=20)
    ap.add_argument("--draws", type=int, default=10,
                    help="probe draws per model (each model's own, seeded from another salt): their figures averaged")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--anchor-head", action="store_true",
                    help="a subset pool's link with a ridge of the score's rest on the anchors (the experiment)")
    ap.add_argument("--json", type=Path, help="also write every row here")
    args = ap.parse_args()
    rows = []
    print(f"{'data':11s} {'benchmark':10s} {'proto':8s} {'seed':>4s} {'estimator':10s} | {'MAE':>6s} {'bias':>6s} "
          f"{'cover':>6s} {'silent':>6s} {'probed':>6s} {'items':>11s}")
    for data in args.data:
        parsed = read_data(data)
        benches = args.benchmarks.split(",") if args.benchmarks else \
            sorted(parsed.responses.get_column("benchmark").unique().to_list())
        for bench in benches:
            resp = parsed.responses.filter(pl.col("benchmark") == bench)
            if resp.height == 0:
                continue
            sc = parsed.scores.filter(pl.col("benchmark") == bench)
            for protocol in args.protocols:
                for seed in args.seeds:
                    r = one_run(resp, sc, bench, protocol, seed, args.k, args.device, args.draws, args.anchor_head)
                    r["data"] = data.name
                    rows.append(r)
                    for col in COLUMNS:
                        if col not in r:
                            continue
                        f = r[col]
                        items = f"{f['items_mean']:5.1f}/{f['items_max']:3d}" if f["probed"] else "-"
                        print(f"{data.name:11s} {bench:10s} {protocol:8s} {seed:4d} {col:10s} | {f['mae']:6.2f} "
                              f"{f['bias']:+6.2f} {f['coverage']:6.3f} {f['silent_misses']:6.3f} {f['probed']:6.2f} "
                              f"{items:>11s}", flush=True)
                    if r.get("probe_note"):
                        print(f"{'':36s}probe note: {r['probe_note']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
