"""Export predictors' anchors as what evaluation tools take.

``lm-eval``: the JSON ``{"task_name": [doc indices]}`` that lm-evaluation-harness (0.4.x) takes as
``lm_eval run ... --samples FILE``, so a new model is run on exactly the anchors and nothing else.
``csv``: one row per anchor (benchmark, task, doc_id, item_id) for any other harness or a human.
Several predictors merge into one file (one lm-eval run covers every benchmark). ``probe_for``: a model's
probe items too (the first items of its own draw, :mod:`sparseeval.estimate.probe`; in the CSV, rows without a
position).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from sparseeval.core.atomic import atomic_write, atomic_write_text
from sparseeval.core.errors import UsageError
from sparseeval.data.benchmarks import default_n_shot, split_variant
from sparseeval.estimate.adaptive import order_of, probe_item_info
from sparseeval.estimate.artifact import AnchorInfo, PredictorArtifact
from sparseeval.estimate.probe import draw_order, plan_of

FORMATS = ("lm-eval", "csv")


def selected_anchors(art: PredictorArtifact, first: int | None = None) -> list[AnchorInfo]:
    """All anchors (position order), or the first ``first`` of the predictor's adaptive order."""
    if first is None:
        return list(art.anchors)
    if first < 1:
        raise UsageError(f"--first must be at least 1, got {first}")
    return [art.anchors[p] for p in order_of(art)[:first]]


def probe_items_for(art: PredictorArtifact, model: str, n: int | None = None) -> list[AnchorInfo]:
    """The first ``n`` items of ``model``'s probe draw (default: the plan's first batch): what it runs when
    its anchors place it at the top (``sparseeval next`` names them too, from the same draw)."""
    plan = None if art.is_joint else plan_of(art.extra)
    if plan is None:
        why = art.extra.get("probe_note") or "it was fitted without one, or with an older kind"
        raise UsageError(f"the predictor for {art.benchmark!r} has no probe plan ({why})")
    count = plan.first_items if n is None else n
    if count < 1:
        raise UsageError(f"a probe export needs at least 1 item, got {count}")
    return list(probe_item_info(plan, tuple(draw_order(plan, model)[:count].tolist()), art.benchmark))


def exported_items(art: PredictorArtifact, first: int | None = None, probe_for: str | None = None,
                   probe_items: int | None = None) -> list[AnchorInfo]:
    """:func:`selected_anchors`, followed by the first ``probe_items`` of model ``probe_for``'s probe."""
    return selected_anchors(art, first) + ([] if probe_for is None else probe_items_for(art, probe_for, probe_items))


def lm_eval_samples(artifacts: Sequence[PredictorArtifact], first: int | None = None,
                    probe_for: str | None = None, probe_items: int | None = None) -> dict[str, list[int]]:
    """Merged ``{task: sorted doc indices}`` of the predictors' anchors (``first``: only the first N of
    each predictor's adaptive order, the batch a new model runs before ``sparseeval next``).

    Refuses anchors with no harness location (an open-ended benchmark whose item ids are not
    doc indices): silently dropping them would make every prediction run short of anchors.
    """
    merged: dict[str, set[int]] = {}
    for art in artifacts:
        anchors = exported_items(art, first, probe_for, probe_items)
        unplaced = [a.item_id for a in anchors if a.task is None or a.doc_id is None]
        if unplaced:
            raise UsageError(f"predictor for {art.benchmark!r} has anchors without an lm-eval task/doc id "
                             f"({', '.join(unplaced[:5])}); export --format csv instead")
        for a in anchors:
            merged.setdefault(a.task, set()).add(int(a.doc_id))  # type: ignore[arg-type]
    return {task: sorted(ids) for task, ids in sorted(merged.items())}


def lm_eval_commands(artifacts: Sequence[PredictorArtifact], samples_file: str | Path,
                     first: int | None = None, *, output_path: str = "RUN_DIR", probe_for: str | None = None,
                     probe_items: int | None = None) -> list[str]:
    """The ``lm_eval`` command(s) that answer the anchors under the predictors' training settings.

    The few-shot count is part of what the predictor learned (its benchmark variant: ``arc`` is the
    leaderboard's 25-shot, ``arc@0shot`` a 0-shot one), so it is always given explicitly; lm-eval's
    own default for ``arc_challenge`` (0) would produce answers ``predict`` refuses. ``--num_fewshot``
    applies to every task of a run, so predictors with different counts get one command each (the
    same samples file serves all: lm-eval reads only the tasks it runs).
    """
    by_shots: dict[int, list[str]] = {}
    for art in artifacts:
        for bench in art.benchmarks:  # a joint predictor: each benchmark under its own settings
            base, shots, _ = split_variant(bench)
            recorded = art.training_settings(bench).get("n_shot")
            shots = recorded if recorded is not None else default_n_shot(base) if shots is None else shots
            tasks = by_shots.setdefault(shots, [])
            tasks += [t for t in dict.fromkeys(a.task for a in exported_items(art, first, probe_for, probe_items)
                                               if a.task and (a.benchmark or art.benchmark) == bench)
                      if t not in tasks]
    return [f"lm_eval run --model hf --model_args pretrained=YOUR_MODEL --tasks {','.join(tasks)} "
            f"--num_fewshot {shots} --samples {samples_file} --log_samples --output_path {output_path}"
            for shots, tasks in sorted(by_shots.items()) if tasks]


def anchor_table(artifacts: Sequence[PredictorArtifact], first: int | None = None,
                 probe_for: str | None = None, probe_items: int | None = None) -> pl.DataFrame:
    """One row per anchor: benchmark, task, doc_id, item_id, position (in predictor input order; none for a
    probe item)."""
    return pl.DataFrame(
        [{"benchmark": a.benchmark or art.benchmark, "task": a.task, "doc_id": a.doc_id, "item_id": a.item_id,
          "position": a.position if a.position >= 0 else None}
         for art in artifacts for a in exported_items(art, first, probe_for, probe_items)],
        schema={"benchmark": pl.String, "task": pl.String, "doc_id": pl.Int64, "item_id": pl.String,
                "position": pl.Int64},
    )


def write_export(artifacts: Sequence[PredictorArtifact], fmt: str, out: str | Path, *,
                 first: int | None = None, probe_for: str | None = None, probe_items: int | None = None) -> Path:
    """Write the anchors of ``artifacts`` (``first``: the first N of each one's adaptive order; ``probe_for``:
    and the first ``probe_items`` of that model's probe) to ``out`` in ``fmt`` (atomically; same input, same
    bytes)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; choose {' or '.join(FORMATS)}")
    if not artifacts:
        raise UsageError("nothing to export: no predictor given")
    out = Path(out)
    if fmt == "lm-eval":
        text = json.dumps(lm_eval_samples(artifacts, first, probe_for, probe_items), indent=1) + "\n"
        atomic_write_text(out, text)
    else:
        table = anchor_table(artifacts, first, probe_for, probe_items)
        atomic_write(out, lambda p: table.write_csv(p))
    return out
