"""The probe (``fit --probe N``) on the frontier and in distribution, beside the anchors alone.

Per benchmark of the real Open LLM Leaderboard v1 data, seed and ``--probe-from`` quantile, two
protocols: **frontier** (fit on the models at or below the 90th percentile of the score, predict the
stronger rest) and **random** (hold out a seeded 20 %). Each fit is ``sparseeval fit``'s own
(:func:`sparseeval.scoring.fit_predictor` with ``probe_items``); the held-out models are predicted by
``predict`` twice, from their answers to the anchors alone and with the probe's items too. Printed side
by side: MAE and bias (points), 90 % coverage, half-width, flagged, flagged by the probe, silent misses
(outside the interval and not flagged), and "asked": the share of models at the probe level that did
not answer it (from the anchors alone), i.e. the probe's cost. These are the tables of
``docs/results/frontier.md``, rounds 8 and 9.

A benchmark with fewer non-anchor items than ``--items`` gets four fifths of them (hellaswag's 58
stored items: 30).

    python bench/probe.py [--data DIR] [--benchmarks mmlu,arc] [--seeds 0 1] [--probe-from 0.8 0.5]
                          [--items 40] [--prefixes 6 8 10 14] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

import sparseeval.methods
from sparseeval.adaptive import order_of
from sparseeval.scoring import fit_predictor, predict, prediction_figures
from sparseeval.sources import read_data
from sparseeval.splits import frontier_cut

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "openllm_v1"
BENCHMARKS = ("mmlu", "truthfulqa", "gsm8k", "arc", "hellaswag", "winogrande")


def held_out(scores: pl.DataFrame, protocol: str, seed: int) -> set[str]:
    """The models predicted: the strongest tenth (frontier) or a seeded fifth (random, drawn from the
    sorted names: the same split whatever order a reader gives)."""
    scores = scores.sort("model")
    models = scores.get_column("model").to_list()
    if protocol == "frontier":
        _, beyond = frontier_cut(scores.get_column("score").to_numpy(), 0.9)
        return {m for m, b in zip(models, beyond, strict=True) if b}
    order = np.random.default_rng(seed).permutation(len(models))
    return {models[i] for i in order[: len(models) // 5]}


def one_run(responses: pl.DataFrame, scores: pl.DataFrame, bench: str, *, k: int, items: int, seed: int,
            probe_from: float, protocol: str, method: str, device: str,
            prefixes: tuple[int, ...] = ()) -> dict[str, Any]:
    test = held_out(scores, protocol, seed)
    is_test = pl.col("model").is_in(list(test))
    n_items = responses.get_column("item_id").n_unique()
    n = min(items, (4 * (n_items - k)) // 5)
    t0 = time.perf_counter()
    art = fit_predictor(responses.filter(~is_test), scores.filter(~is_test), bench, k, method, seed=seed,
                        device=device, probe_items=n, probe_from=probe_from)
    fit_s = time.perf_counter() - t0
    truth = dict(scores.filter(is_test).select("model", "score").iter_rows())
    answers = responses.filter(is_test)
    alone = predict(art, answers.filter(pl.col("item_id").is_in(art.anchor_item_ids)))
    checked = predict(art, answers)
    row: dict[str, Any] = {"benchmark": bench, "seed": seed, "protocol": protocol, "probe_from": probe_from,
                           "items": n, "n": len(checked), "fit_s": round(fit_s, 1),
                           "level": art.extra["probe"]["level"], "threshold": art.extra["probe"]["threshold"]}
    for label, preds in (("alone", alone), ("probe", checked)):
        row[label] = prediction_figures(preds, np.array([truth[p.model] for p in preds]))
    row["asked"] = float(np.mean([any("answer the probe" in w for w in p.warnings) for p in alone]))
    row["prefixes"] = {}
    for n_first in prefixes:  # an early stop (`next`): the first anchors of the adaptive order, and the probe
        first = [art.anchors[i].item_id for i in order_of(art)[:n_first]]
        preds = predict(art, answers.filter(pl.col("item_id").is_in(first + art.extra["probe"]["item_ids"])))
        row["prefixes"][n_first] = prediction_figures(preds, np.array([truth[p.model] for p in preds]))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--benchmarks", default=",".join(BENCHMARKS[:5]))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--probe-from", type=float, nargs="+", default=[0.8, 0.5])
    ap.add_argument("--protocols", nargs="+", default=["frontier", "random"], choices=["frontier", "random"])
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("-k", type=int, default=20)
    ap.add_argument("--method", default="sparseeval-headroom", choices=sparseeval.methods.available_methods())
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--prefixes", type=int, nargs="*", default=[],
                    help="also predict the random split from the first N anchors of the adaptive order (and the "
                         "probe), as `next` stops early: the share the probe flags per N")
    ap.add_argument("--json", type=Path, help="also write every row here")
    args = ap.parse_args()

    parsed = read_data(args.data)
    responses, scores = parsed.responses, parsed.scores
    rows = []
    print(f"{'benchmark':10s} {'seed':>4s} {'proto':8s} {'from':>4s} {'N':>3s} | {'MAE':>12s} {'bias':>14s} "
          f"{'coverage':>12s} {'silent':>12s} {'flagged':>12s} {'half-width':>12s} {'probe-fl':>8s} {'asked':>6s}")
    for bench in args.benchmarks.split(","):
        resp_b = responses.filter(pl.col("benchmark") == bench)
        scores_b = scores.filter(pl.col("benchmark") == bench)
        for seed in args.seeds:
            for protocol in args.protocols:
                for q in args.probe_from:
                    r = one_run(resp_b, scores_b, bench, k=args.k, items=args.items, seed=seed, probe_from=q,
                                protocol=protocol, method=args.method, device=args.device,
                                prefixes=tuple(args.prefixes) if protocol == "random" else ())
                    rows.append(r)
                    a, b = r["alone"], r["probe"]
                    print(f"{bench:10s} {seed:4d} {protocol:8s} {q:4.2f} {r['items']:3d} | "
                          f"{a['mae']:5.2f}->{b['mae']:5.2f} {a['bias']:+6.2f}->{b['bias']:+6.2f} "
                          f"{a['coverage']:.3f}->{b['coverage']:.3f} "
                          f"{a['silent_misses']:.3f}->{b['silent_misses']:.3f} "
                          f"{a['flagged']:.3f}->{b['flagged']:.3f} {a['halfwidth']:5.2f}->{b['halfwidth']:5.2f} "
                          f"{b['probe_flagged']:8.3f} {r['asked']:6.3f}", flush=True)
                    for n_first, f in r["prefixes"].items():
                        print(f"{'':29s}first {n_first:2d} anchors + probe: MAE {f['mae']:5.2f}, coverage "
                              f"{f['coverage']:.3f}, flagged {f['flagged']:.3f}, by the probe {f['probe_flagged']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
