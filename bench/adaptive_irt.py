"""Per-model adaptive item choice (computerized adaptive testing) vs one fixed anchor order.

The question behind issue 13's adaptive goal: can choosing each model's *next* item from its own
answers so far (instead of one order for everyone) make a model's error fall faster with the number
of items? Adaptive stopping along a fixed order cannot beat the fixed K that reaches a width on
average (docs/results/adaptive.md); a per-model choice could, if it makes each item more informative.

Both arms on the same split of one benchmark of the real sample (40 % calibration + test, 60 % train):

* *fixed*: greedy forward order of the pool items (each next item lowers the ridge training error of
  the full-benchmark score most), a ridge per prefix, split-conformal 90 % half-width on the
  calibration models;
* *cat*: a 1-D 2PL (``sparseeval.estimate.methods.irt.fit_irt``) on the training models, a grid posterior
  of the ability per model, the next item the one with the smallest expected posterior variance of
  g(theta) (g: cubic fit of the full score on the training models' abilities), prediction the
  posterior mean of g, uncertainty sqrt(Var_post g + tau^2) (tau: g's residual on training
  models), normalised split-conformal half-width on the calibration models.

Usage: ``python bench/adaptive_irt.py --data ../shared/data/openllm_v1 --benchmark mmlu --seed 0``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sparseeval.data.access.sources import open_data
from sparseeval.data.matrix import build_matrix
from sparseeval.estimate.methods.irt import fit_irt

GRID = np.linspace(-4, 4, 161)


def load_split(data: str, benchmark: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                                np.ndarray]:
    """The benchmark's matrix as the product reads it (any supported format; full scores in points)
    and a seeded 60 / 20 / 20 % split of its models: train, calibration, test row indices."""
    with open_data(data) as source:
        matrix = build_matrix(*source.long(benchmark), benchmark)
    Y = matrix.values.astype(float)
    s = matrix.scores.astype(float) * 100
    perm = np.random.default_rng(seed).permutation(len(s))
    fifth = len(s) // 5
    return Y, s, perm[2 * fifth:], perm[fifth:2 * fifth], perm[:fifth]


def greedy_order(X: np.ndarray, y: np.ndarray, kmax: int) -> list[int]:
    order: list[int] = []
    for _ in range(kmax):
        errs = {j: ridge_mse(X[:, [*order, j]], y) for j in range(X.shape[1]) if j not in order}
        order.append(min(errs, key=errs.__getitem__))
    return order


def ridge(X: np.ndarray, y: np.ndarray, lam: float = 1.0) -> tuple[np.ndarray, float]:
    xm, ym = X.mean(0), y.mean()
    w = np.linalg.solve((X - xm).T @ (X - xm) + lam * np.eye(X.shape[1]), (X - xm).T @ (y - ym))
    return w, float(ym - xm @ w)


def ridge_mse(X: np.ndarray, y: np.ndarray) -> float:
    w, b = ridge(X, y)
    return float(np.mean((X @ w + b - y) ** 2))


def posterior(X: np.ndarray, M: np.ndarray, pc: np.ndarray, log_prior: np.ndarray) -> np.ndarray:
    L = (X * M) @ np.log(pc.T) + ((1 - X) * M) @ np.log(1 - pc.T) + log_prior
    p = np.exp(L - L.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True)


def run_cat(X: np.ndarray, pc: np.ndarray, g: np.ndarray, tau2: float, log_prior: np.ndarray,
            steps: list[int]) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    m = X.shape[0]
    M = np.zeros_like(X)
    preds, sds = {}, {}
    for step in range(1, max(steps) + 1):
        post = posterior(X, M, pc, log_prior)
        p1 = post @ pc  # predictive P(correct) per model and item
        a1 = post[:, :, None] * pc[None]
        a0 = post[:, :, None] * (1 - pc[None])
        m1 = np.einsum("mgi,g->mi", a1, g) / p1
        m0 = np.einsum("mgi,g->mi", a0, g) / (1 - p1)
        v1 = np.einsum("mgi,g->mi", a1, g * g) / p1 - m1**2
        v0 = np.einsum("mgi,g->mi", a0, g * g) / (1 - p1) - m0**2
        expected = p1 * v1 + (1 - p1) * v0
        expected[M > 0] = np.inf
        M[np.arange(m), expected.argmin(1)] = 1
        if step in steps:
            post = posterior(X, M, pc, log_prior)
            mu = post @ g
            preds[step], sds[step] = mu, np.sqrt(np.maximum(post @ (g * g) - mu**2, 0) + tau2)
    return preds, sds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data/openllm_v1")
    ap.add_argument("--benchmark", default="mmlu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kmax", type=int, default=60)
    args = ap.parse_args()
    Y, s, tr, ca, te = load_split(args.data, args.benchmark, args.seed)
    kmax = min(args.kmax, Y.shape[1])
    steps = list(range(5, kmax + 1, 5))

    t0 = time.perf_counter()
    order = greedy_order(Y[tr], s[tr], kmax)
    fixed = {}
    for k in steps:
        w, b = ridge(Y[tr][:, order[:k]], s[tr])
        q = np.quantile(np.abs(Y[ca][:, order[:k]] @ w + b - s[ca]), 0.9)
        err = np.abs(Y[te][:, order[:k]] @ w + b - s[te])
        fixed[k] = (err.mean(), q, np.mean(err <= q))
    t1 = time.perf_counter()
    irt = fit_irt(Y[tr], dim=1, random_state=args.seed, device="cpu")
    pc = np.clip(1 / (1 + np.exp(-(np.outer(GRID, irt.alpha[:, 0]) - irt.beta))), 1e-6, 1 - 1e-6)
    log_prior = -0.5 * GRID**2
    theta_tr = posterior(Y[tr], np.ones_like(Y[tr]), pc, log_prior) @ GRID
    coef = np.polyfit(theta_tr, s[tr], 3)
    g = np.polyval(coef, GRID)
    tau2 = float(np.var(s[tr] - np.polyval(coef, theta_tr)))
    pred_ca, sd_ca = run_cat(Y[ca], pc, g, tau2, log_prior, steps)
    pred_te, sd_te = run_cat(Y[te], pc, g, tau2, log_prior, steps)
    t2 = time.perf_counter()
    print(f"{args.benchmark}: {Y.shape[1]} items, train {len(tr)}, calibration {len(ca)}, test {len(te)} models; "
          f"fixed order {t1 - t0:.0f} s, cat {t2 - t1:.0f} s; tau {np.sqrt(tau2):.2f} points")
    print("| items | fixed MAE | fixed half-width | fixed cov. | cat MAE | cat half-width mean (p10-p90) | cat cov. |")
    print("|---|---|---|---|---|---|---|")
    for k in steps:
        q = np.quantile(np.abs(pred_ca[k] - s[ca]) / sd_ca[k], 0.9)
        hw = q * sd_te[k]
        err = np.abs(pred_te[k] - s[te])
        lo, hi = np.quantile(hw, [0.1, 0.9])
        print(f"| {k} | {fixed[k][0]:.2f} | {fixed[k][1]:.2f} | {100 * fixed[k][2]:.1f} | {err.mean():.2f} | "
              f"{hw.mean():.2f} ({lo:.2f}-{hi:.2f}) | {100 * np.mean(err <= hw):.1f} |")


if __name__ == "__main__":
    main()
