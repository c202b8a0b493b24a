"""Adaptive stopping with a per-model interval from the nearest training models, vs fixed K.

Experiment 3 of ``docs/results/adaptive.md``. One fixed greedy order (as ``bench/adaptive_irt.py``);
per prefix p a ridge, corrected by the mean ridge residual of the ``--neighbours`` training models
nearest in Hamming distance on the p answers, with their residual spread as the model's scale
(normalised split conformal, 90 %, on the calibration models). Leaderboards hold many near-copies
(fine-tunes and merges of one base), whose neighbours pin the score down early: the widths differ by
model in *shape*, not only in scale, which is what adaptive stopping needs to beat fixed K.

Adaptive: a model stops at its first prefix (every 5 items) whose half-width c * q_p * sd_p(x) <= W;
c >= 1 is the smallest inflation giving 90 % coverage *at the stop* on the calibration models (the
stop is an optional-stopping choice that per-prefix conformal alone does not cover). Compared with
two fixed K: the plain ridge with one conformal half-width for everyone (the library's fixed-K
intervals without a scale), and this predictor's own mean half-width.

Usage: ``python bench/adaptive_knn.py --data ../shared/data/openllm_v1 --benchmark mmlu``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from adaptive_irt import greedy_order, load_split, ridge

WIDTHS = (2.0, 2.5, 3.0, 4.0, 5.0)
MIN_SCALE = 0.3  # points: a floor, so that ten identical neighbours do not give a zero-width interval


def prefix_fits(Y: np.ndarray, s: np.ndarray, tr: np.ndarray, ca: np.ndarray, te: np.ndarray, order: list[int],
                steps: list[int], neighbours: int) -> dict[int, dict[str, np.ndarray | float]]:
    fits: dict[int, dict[str, np.ndarray | float]] = {}
    for p in steps:
        cols = order[:p]
        w, b = ridge(Y[tr][:, cols], s[tr])
        resid = s[tr] - (Y[tr][:, cols] @ w + b)

        def predict(X: np.ndarray, cols: list[int] = cols, w: np.ndarray = w, b: float = b,
                    resid: np.ndarray = resid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            dist = np.abs(X[:, cols][:, None, :] - Y[tr][:, cols][None]).sum(-1)
            near = np.argsort(dist, axis=1, kind="stable")[:, :neighbours]
            plain = X[:, cols] @ w + b
            return plain, plain + resid[near].mean(1), np.maximum(resid[near].std(1), MIN_SCALE)

        plain_ca, pred_ca, sd_ca = predict(Y[ca])
        plain_te, pred_te, sd_te = predict(Y[te])
        q = np.quantile(np.abs(pred_ca - s[ca]) / sd_ca, 0.9)
        fits[p] = {"pred_ca": pred_ca, "hw_ca": q * sd_ca, "pred_te": pred_te, "hw_te": q * sd_te,
                   "plain_hw": float(np.quantile(np.abs(plain_ca - s[ca]), 0.9)),
                   "plain_mae": float(np.abs(plain_te - s[te]).mean()), "mae": float(np.abs(pred_te - s[te]).mean())}
    return fits


def stop(fits: dict, steps: list[int], truth: np.ndarray, width: float, c: float,
         part: str) -> tuple[float, float, float]:
    """Mean items, coverage at the stop and share of models that reached the width (the others stop at
    the last prefix, with its interval)."""
    items = np.full(truth.size, steps[-1])
    covered = np.zeros(truth.size, bool)
    done = np.zeros(truth.size, bool)
    for p in steps:
        hw = c * fits[p][f"hw_{part}"]
        now = ~done & (hw <= width)
        items[now] = p
        covered[now] = np.abs(fits[p][f"pred_{part}"][now] - truth[now]) <= hw[now]
        done |= now
    last = fits[steps[-1]]
    rest = ~done
    covered[rest] = np.abs(last[f"pred_{part}"][rest] - truth[rest]) <= c * last[f"hw_{part}"][rest]
    return float(items.mean()), float(covered.mean()), float(done.mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/openllm_v1")
    ap.add_argument("--benchmark", default="mmlu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kmax", type=int, default=80)
    ap.add_argument("--neighbours", type=int, default=10)
    args = ap.parse_args()
    Y, s, tr, ca, te = load_split(args.data, args.benchmark, args.seed)
    kmax = min(args.kmax, Y.shape[1])
    steps = sorted({*range(5, kmax + 1, 5), kmax})
    t0 = time.perf_counter()
    fits = prefix_fits(Y, s, tr, ca, te, greedy_order(Y[tr], s[tr], kmax), steps, args.neighbours)
    print(f"{args.benchmark}: {Y.shape[1]} items, {len(tr)}/{len(ca)}/{len(te)} train/calibration/test models, "
          f"{args.neighbours} neighbours, {time.perf_counter() - t0:.0f} s")
    print("MAE by prefix, plain ridge -> with neighbours: " + ", ".join(
        f"{p}: {fits[p]['plain_mae']:.2f} -> {fits[p]['mae']:.2f}" for p in steps if p in (10, 20, 40, kmax)))
    print("| W | fixed K, plain | fixed K, own mean | adaptive items | c | reached % | cov. at stop | "
          "ratio vs plain | ratio vs own |")
    print("|---|---|---|---|---|---|---|---|---|")
    for width in WIDTHS:
        k_plain = next((p for p in steps if fits[p]["plain_hw"] <= width), None)
        k_own = next((p for p in steps if fits[p]["hw_te"].mean() <= width), None)
        c = 1.0
        while stop(fits, steps, s[ca], width, c, "ca")[1] < 0.9 and c < 3.0:
            c += 0.01
        items, cov, reached = stop(fits, steps, s[te], width, c, "te")

        def ratio(k: int | None, items: float = items) -> str:
            return f"{items / k:.2f}" if k else "-"

        print(f"| {width:g} | {k_plain or '-'} | {k_own or '-'} | {items:.1f} | {c:.2f} | {100 * reached:.0f} | "
              f"{100 * cov:.1f} | {ratio(k_plain)} | {ratio(k_own)} |")


if __name__ == "__main__":
    main()
