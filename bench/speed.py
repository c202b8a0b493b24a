"""Speed of SparseEval selection + final fit: gsm8k (5,041 models x 249 items) at K=100.

Prints the time per phase (start, refinement, final fit) and the test accuracy for each
configuration side by side, so speed is never bought with accuracy:

* ``default``: GCV-scored swaps of the 8 weakest anchors x 32 best candidates, ridge AIS;
* ``fast``: a 4x narrower search (4 x 16);
* ``thorough``: a 4x wider search (16 x 64), as an accuracy reference;
* both for the linear and the MLP proxy, on CPU and (when CUDA is present) on the GPU.

    python bench/speed.py                  # gsm8k, K=100, threads = all cores
    python bench/speed.py --threads 2 --benchmark arc --k 20
    python bench/speed.py --methods sparseeval-linear --configs default   # the headline number
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import polars as pl
import torch

from sparseeval.data.access.sources import read_data
from sparseeval.data.matrix import build_matrix
from sparseeval.estimate.evaluation import ProtocolConfig, fit_on_split, score_on_split, split_for_seed
from sparseeval.estimate.methods.device import cpu_threads
from sparseeval.estimate.metrics import score_metrics
from sparseeval.publish.report import print_table

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "openllm_v1"
CONFIGS = {
    "fast": {"n_weak": 4, "n_cand": 16},
    "default": {},
    "thorough": {"n_weak": 16, "n_cand": 64},
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--benchmark", default="gsm8k")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0,
                    help="CPU threads per fit (0 = $SPARSEEVAL_THREADS, else every available CPU)")
    ap.add_argument("--methods", default="sparseeval-linear,sparseeval-mlp")
    ap.add_argument("--configs", default="fast,default,thorough")
    ap.add_argument("--devices", default="cpu,cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)

    parsed = read_data(args.data)
    matrix = build_matrix(parsed.responses, parsed.scores, args.benchmark)
    split = split_for_seed(matrix, args.seed, ProtocolConfig(test_frac=0.2, val_frac=0.1))
    threads = cpu_threads(args.threads or None)
    print(f"{args.benchmark}: {matrix.shape[0]} models x {matrix.shape[1]} items, K={args.k}, "
          f"threads per fit={threads}, load={os.getloadavg()[0]:.2f}, devices={args.devices}")
    rows = []
    for device in args.devices.split(","):
        for method in args.methods.split(","):
            for name in args.configs.split(","):
                t0 = time.perf_counter()
                params = {**CONFIGS[name], "threads": threads}
                est = fit_on_split(matrix, split, method, args.k, args.seed, device=device, params=params)
                total = time.perf_counter() - t0
                m = score_metrics(score_on_split(matrix, split, est), matrix.scores[split.test])
                rows.append({"device": device, "method": method, "config": name,
                             **{f"{k}_s": round(v, 2) for k, v in est.timings_.items()},
                             "total_s": round(total, 2), "swaps": est.selection_["swaps"],
                             "start": est.selection_["start"], "mae": round(m.mae, 3), "tau": round(m.tau, 4)})
                print(rows[-1], flush=True)
    print_table(pl.DataFrame(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
