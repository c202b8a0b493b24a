"""Can a fit choose a subset pool's link (the line, or the line with the anchor head) from its training models?

On a subset pool the probe estimates the pool's mean by design, and a link fitted on the training models
maps it to the score (``sparseeval.estimate.probe_fit.fit_link``). Two links are built: the **line** (the
pool mean alone, the default) and the **anchor head** (plus a ridge of the score's rest on the anchors'
answers, ``ProbeSettings(anchor_head=True)``). On the shared v1 data each wins on different benchmarks at
the frontier (docs/results/second_stage.md): the head on arc and hellaswag, whose pools saturate, the line on
mmlu, whose anchors are blind. A predictor could carry whichever its own training models prefer, if they
could tell. This measures whether they can, with no draw noise (every pool item answered, so only the
link's error is left), per benchmark and protocol:

* ``same anchors``: the fit's own anchors; both links refitted on its fitting models at or below their 90th
  percentile of the score and measured on the ones above (what ``_beyond_residual`` does for the line);
* ``re-selected``: the anchors chosen again on those weaker fitting models alone (as the frontier
  self-check's inner fit chooses them), both links fitted there, measured on the stronger fitting models;
* ``held out``: both links fitted on every fitting model with the fit's anchors, measured on the models the
  protocol holds out (the frontier: above the 90th percentile of the score; random: a seeded fifth).

A choice works where the link a check prefers is the one that wins on the held-out models.

    python bench/link_choice.py [--data DIR] [--benchmarks a,b] [--protocols frontier random] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from bench.second_stage import held_out
from sparseeval.data.access.sources import read_data
from sparseeval.data.matrix import build_matrix
from sparseeval.estimate.fitting import fit_predictor
from sparseeval.estimate.probe_fit import fit_link

SHARED_V1 = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "openllm_v1"
LINKS = ("line", "head")
TOP = 0.9


def answers(responses: pl.DataFrame, scores: pl.DataFrame, items: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(every item's answer, the score) of the models of ``scores`` that answered every one of ``items``
    (columns in the order of ``items``)."""
    matrix = build_matrix(responses.filter(pl.col("model").is_in(scores.get_column("model").to_list())), scores,
                          scores.get_column("benchmark")[0])
    column = {item: j for j, item in enumerate(matrix.items)}
    if missing := [i for i in items if i not in column]:
        raise SystemExit(f"{len(missing)} of the fit's items were answered by none of these models: {missing[:3]}")
    take = np.array([column[i] for i in items])
    full = matrix.observed[:, take].all(axis=1)
    return matrix.values[full][:, take].astype(np.float64), matrix.scores[full].astype(np.float64)


def link_errors(fit_on: tuple[np.ndarray, np.ndarray], measure_on: tuple[np.ndarray, np.ndarray],
                anchors: np.ndarray) -> dict[str, tuple[float, float]]:
    """Per link, (MAE, bias) in points on ``measure_on`` of the link fitted on ``fit_on``, each from its
    models' every-item mean (and, for the head, their anchors' answers)."""
    (values, scores), (values_m, scores_m) = fit_on, measure_on
    observed = np.ones_like(values, dtype=bool)
    out = {}
    for name in LINKS:
        link = fit_link(values, observed, scores, cal_values=values, cal_observed=observed, cal_scores=scores,
                        cal_top=np.ones(scores.size, dtype=bool), alpha=0.1,
                        anchor_columns=anchors if name == "head" else None)
        err = np.array([float(link.score(v.mean(), v[anchors])) for v in values_m]) - scores_m
        out[name] = (float(np.mean(np.abs(err)) * 100), float(np.mean(err) * 100))
    return out


def one_row(responses: pl.DataFrame, scores: pl.DataFrame, bench: str, protocol: str, seed: int,
            k: int) -> dict[str, dict[str, tuple[float, float]]]:
    test = held_out(scores, protocol, seed)
    train = scores.filter(~pl.col("model").is_in(list(test))).sort("model")
    cut = float(np.quantile(train.get_column("score").to_numpy(), TOP))
    weaker = train.filter(pl.col("score") <= cut)
    stronger = train.filter(pl.col("score") > cut)

    def fit(models: pl.DataFrame) -> tuple[list[str], np.ndarray]:
        art = fit_predictor(responses.filter(pl.col("model").is_in(models.get_column("model").to_list())),
                            models, bench, k, "sparseeval-headroom", seed=seed, device="cpu", probe=None)
        assert art.estimator.anchors_ is not None
        return list(art.item_ids), np.asarray(art.estimator.anchors_)

    items, anchors = fit(train)
    inner_items, inner_anchors = fit(weaker)
    return {
        "same anchors": link_errors(answers(responses, weaker, items), answers(responses, stronger, items), anchors),
        "re-selected": link_errors(answers(responses, weaker, inner_items),
                                   answers(responses, stronger, inner_items), inner_anchors),
        "held out": link_errors(answers(responses, train, items),
                                answers(responses, scores.filter(pl.col("model").is_in(list(test))), items), anchors),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=SHARED_V1)
    ap.add_argument("--benchmarks", default="arc,gsm8k,hellaswag,mmlu,truthfulqa")
    ap.add_argument("--protocols", nargs="+", default=["frontier", "random"], choices=["frontier", "random"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-k", type=int, default=20)
    args = ap.parse_args()
    parsed = read_data(args.data)
    print("MAE (bias) in points, line / head; 'picks': the link the check prefers, 'right' when the held-out "
          "models prefer it too")
    print(f"{'benchmark':10s} {'protocol':8s} | {'same anchors':>26s} {'picks':>6s} | {'re-selected':>26s} "
          f"{'picks':>6s} | {'held out':>26s} {'wins':>5s}")
    for bench in args.benchmarks.split(","):
        resp = parsed.responses.filter(pl.col("benchmark") == bench)
        sc = parsed.scores.filter(pl.col("benchmark") == bench)
        for protocol in args.protocols:
            row = one_row(resp, sc, bench, protocol, args.seed, args.k)
            best = {check: min(LINKS, key=lambda n, c=check: row[c][n][0]) for check in row}
            cells = []
            for check in ("same anchors", "re-selected"):
                verdict = "right" if best[check] == best["held out"] else "wrong"
                cells.append(" / ".join(f"{row[check][n][0]:5.2f} ({row[check][n][1]:+5.2f})" for n in LINKS)
                             + f" {best[check]:>4s} {verdict}")
            held = " / ".join(f"{row['held out'][n][0]:5.2f} ({row['held out'][n][1]:+5.2f})" for n in LINKS)
            print(f"{bench:10s} {protocol:8s} | {cells[0]} | {cells[1]} | {held} {best['held out']:>5s}", flush=True)


if __name__ == "__main__":
    main()
