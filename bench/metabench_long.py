"""One more real benchmark for the frontier checks: metabench's public R data as a long table.

The shared Open LLM Leaderboard v1 data (``../shared/data/openllm_v1``) holds five benchmarks, derived from
metabench (Kipnis et al., 2024; repository adkipnis/metabench, CC BY-NC-SA 4.0). The same source has a
sixth, winogrande (5,476 models x 106 items), which no design choice of the frontier work looked at
until round 4 (docs/results/frontier.md). This script turns one of metabench's ``analysis/reduced/*.rds``
files into ``responses.parquet`` (model, benchmark, item_id, correct) and ``scores.parquet`` (model,
benchmark, score in [0, 1]) that ``bench/accuracy.py --data`` and ``sparseeval evaluate --data`` read:

    git -C <metabench mirror> show 'HEAD:analysis/reduced/winogrande-4PL-MAP-0.005-seed=1.rds' > wino.rds
    python bench/metabench_long.py wino.rds --benchmark winogrande --out /tmp/wino
    python bench/accuracy.py --data /tmp/wino -k 20 --seeds 3 --method sparseeval-headroom,random,random-linear

Where the file's rows come from: the fitted mirt model's ``Data$data`` (the training models' 0/1
answers), in the order of ``theta.train`` (which names them); the full-benchmark score is
``df.score.base$score`` (percent). Run on ``arc-2PL-MAP-0.005-seed=1.rds`` with ``--check-against
../shared/data/openllm_v1`` it reproduces the shared arc data exactly (428,000 answers, every score), which
is how the reading was verified. Needs the ``rdata`` package (``pip install rdata``; not a dependency of
sparseeval). The output keeps the source's licence: do not commit it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl


def _attributes(obj: Any) -> dict[bytes | None, Any]:
    """An R object's attribute pairlist as {name: value object}."""
    out: dict[bytes | None, Any] = {}
    node = obj.attributes
    while node is not None:
        tag = node.tag
        while tag is not None and tag.info.type.name in ("SYM", "REF") and not isinstance(tag.value, bytes):
            tag = tag.value if tag.info.type.name == "SYM" else tag.referenced_object
        out[tag.value if tag is not None else None] = node.value[0]
        rest = node.value[1] if len(node.value) > 1 else None
        node = rest if rest is not None and rest.info.type.name == "LIST" else None
    return out


def _names(obj: Any) -> list[str]:
    return [x.value.decode() for x in _attributes(obj)[b"names"].value]


def read_reduced(path: Path, benchmark: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(responses, scores) of one metabench ``analysis/reduced`` file."""
    import rdata
    from rdata.conversion import SimpleConverter

    top = rdata.parser.parse_file(path).object
    conv = SimpleConverter(default_encoding="utf8")
    fields = _names(top)
    for needed in ("model", "theta.train", "df.score.base"):
        if needed not in fields:
            raise SystemExit(f"{path}: no {needed!r} in this file (found: {', '.join(fields)}): "
                             "not a metabench analysis/reduced file")
    data = _attributes(top.value[fields.index("model")])[b"Data"]
    answers = conv.convert(data.value[_names(data).index("data")])
    models = [str(m) for m in conv.convert(top.value[fields.index("theta.train")]).coords["dim_0"].values]
    items = [str(i) for i in answers.coords["dim_1"].values]
    Y = np.asarray(answers)
    if len(models) != Y.shape[0]:
        raise SystemExit(f"{path}: {Y.shape[0]} answer rows but {len(models)} named models in theta.train")
    if not np.isin(Y, (0, 1)).all():
        raise SystemExit(f"{path}: answers other than 0/1 in Data$data")
    table = conv.convert(top.value[fields.index("df.score.base")])
    score = {str(m): float(v) / 100.0 for m, v in zip(table.index, table["score"], strict=True)}
    missing = [m for m in models if m not in score]
    if missing:
        raise SystemExit(f"{path}: {len(missing)} models without a score in df.score.base, e.g. {missing[:3]}")
    scores = pl.DataFrame({"model": models, "benchmark": benchmark, "score": [score[m] for m in models]})
    if not scores["score"].is_between(0.0, 1.0).all():
        raise SystemExit(f"{path}: scores outside [0, 100] %")
    responses = pl.DataFrame({"model": np.repeat(models, len(items)), "benchmark": benchmark,
                              "item_id": np.tile(items, len(models)),
                              "correct": Y.astype(np.int8).ravel()})
    return responses, scores


def check_against(responses: pl.DataFrame, scores: pl.DataFrame, shared: Path) -> str:
    """How the extraction agrees with the shared data of the same benchmark (must be exactly)."""
    bench = scores["benchmark"][0]
    ref = pl.read_parquet(shared / "responses.parquet").filter(pl.col("benchmark") == bench)
    joined = responses.join(ref, on=["model", "item_id"], how="inner", suffix="_ref")
    agree = int((joined["correct"] == joined["correct_ref"]).sum())
    ref_scores = pl.read_parquet(shared / "scores.parquet").filter(pl.col("benchmark") == bench)
    worst = scores.join(ref_scores, on="model").select((pl.col("score") - pl.col("score_right")).abs().max()).item()
    return (f"{bench}: {joined.height} of {responses.height} answers found in {shared} ({ref.height} there), "
            f"{agree} agree; largest score difference {worst}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rds", type=Path, help="a metabench analysis/reduced/*.rds file")
    ap.add_argument("--benchmark", required=True, help="the benchmark name to write (e.g. winogrande)")
    ap.add_argument("--out", type=Path, required=True, help="folder for responses.parquet and scores.parquet")
    ap.add_argument("--check-against", type=Path, metavar="DIR",
                    help="a folder with the same benchmark (e.g. ../shared/data/openllm_v1): print the agreement")
    args = ap.parse_args(argv)
    responses, scores = read_reduced(args.rds, args.benchmark)
    args.out.mkdir(parents=True, exist_ok=True)
    responses.write_parquet(args.out / "responses.parquet")
    scores.write_parquet(args.out / "scores.parquet")
    print(f"{args.benchmark}: {scores.height} models x {responses['item_id'].n_unique()} items -> {args.out}")
    if args.check_against:
        print(check_against(responses, scores, args.check_against))
    return 0


if __name__ == "__main__":
    sys.exit(main())
