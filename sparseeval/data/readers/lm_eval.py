"""Reader for lm-evaluation-harness output, every layout the harness has written.

Layouts (read at the harness' release tags; see ``docs/formats.md``):

* **0.3** (``main.py --output_path x.json``): one JSON ``{"results": {task: {"acc": .., "acc_stderr": ..}},
  "versions", "config": {"model_args", "num_fewshot", "limit", ...}}``; plain metric keys, no samples.
* **0.4.0 - 0.4.2** (``__main__.py``): ``results.json`` (or the ``.json`` named by ``--output_path``) with
  ``results`` keyed ``"metric,filter"``, ``groups``, ``configs``, ``versions``, ``n-shot``, ``config``
  (0.4.2: ``date``, ``git_hash``) and, with ``--log_samples``, one ``<model_args>_<task>.jsonl`` per task
  beside it (``/`` and ``=`` of the model args replaced by ``__``) holding ONE JSON ARRAY (indent 2) of
  samples. Samples carry ``doc_id`` and the metric values but no ``filter``: a task with several filters
  lists every document once per filter, in the order of its ``filter_list``.
* **0.4.3+** (``EvaluationTracker``): ``<output>/<sanitized model>/results_<date_id>.json`` (adds
  ``n-samples``, ``model_name``, later ``lm_eval_version``) and ``samples_<task>_<date_id>.jsonl`` (one
  JSON object per line; ``filter`` and ``metrics`` keys since 0.4.8). ``date_id`` is
  ``datetime.now().isoformat()`` with ``:`` replaced by ``-`` (no fraction when it is zero).
* **Python API**: the dict ``simple_evaluate`` returns, dumped as JSON with the per-task ``samples``
  embedded (``{"results": ..., "samples": {task: [...]}}``).

The unit is one (model, task, run): a bad or missing part of a folder becomes a :class:`PartNote` and the
rest is still returned. Every row carries its settings (:data:`~sparseeval.data.readers.base.SETTINGS_SCHEMA`).

The reader is split by concern: :mod:`.lm_eval_results` (the results document and :class:`Run`),
:mod:`.lm_eval_collect` (which files make which runs), :mod:`.lm_eval_plan` (a task's benchmark, metric and
filter), :mod:`.lm_eval_samples` (per-document records); this module reads a run into rows and scores.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from sparseeval.data.benchmarks import MMLU_SUBJECTS, V2_GROUPS
from sparseeval.data.readers.assemble import build_parsed, refuse_empty, settings_frame
from sparseeval.data.readers.base import (
    MODELS_SCHEMA,
    SCORES_SCHEMA,
    SETTINGS_SCHEMA,
    InputError,
    ParsedResults,
    PartNote,
)
from sparseeval.data.readers.files import model_from_folder
from sparseeval.data.readers.lm_eval_collect import _reason, collect
from sparseeval.data.readers.lm_eval_plan import TaskPlan, benchmark_task, filter_order, plan_task
from sparseeval.data.readers.lm_eval_results import (
    HARNESS,
    Run,
    _aggregate,
    base_model_from_results,
    model_name_from_results,
)
from sparseeval.data.readers.lm_eval_samples import peek_samples, read_samples
from sparseeval.data.readers.metric_choice import PREFERRED_METRICS, pick_metric
from sparseeval.data.tasks import harness_group, is_group

#: what importers outside the readers take from here (the exported tasks and ``fit`` name the same metric)
__all__ = ["PREFERRED_METRICS", "iter_lm_eval_files", "pick_metric", "read_lm_eval"]

#: Aggregations whose value is the mean of the per-document values (the only ones checked against samples).
_MEAN_AGGREGATIONS = ("mean",)
#: an aggregate may differ from the mean of its samples by float noise only
TOLERANCE = 1e-3


@dataclass
class _TaskRows:
    plan: TaskPlan
    frame: pl.DataFrame | None = None  #: (item_id, score) when samples were read
    complete: bool = False  #: the samples cover every document the aggregate covers
    contradiction: str | None = None


def _is_group(run: Run, key: str) -> bool:
    return key in run.groups or is_group(key)  # the harness' groups: 0.4.0 has no group_subtasks


def _mean_checkable(run: Run, task: str, metric: str) -> bool:
    config = run.configs.get(task)
    if not config:
        return True
    for m in config.get("metric_list") or []:
        if isinstance(m, dict) and m.get("metric") == metric:
            agg = m.get("aggregation", "mean")
            return not isinstance(agg, str) or agg in _MEAN_AGGREGATIONS
    return True


def read_run(run: Run, model: str, skip_tasks: set[str], samples_only: bool = False
             ) -> tuple[list[pl.DataFrame], list[dict[str, Any]], list[PartNote], list[InputError]]:
    """One run -> response frames, score rows, notes and the errors behind refused parts."""
    notes: list[PartNote] = []
    errors: list[InputError] = []
    where = str(run.path) if run.path is not None else None
    base = {"harness": HARNESS, "harness_version": run.harness_version, "run_at": run.run_at}
    leaves = [t for t in run.results if not _is_group(run, t)]
    tasks = list(run.samples) if samples_only else list(dict.fromkeys([*leaves, *run.samples]))
    rows: dict[str, _TaskRows] = {}
    for task in tasks:
        if task in skip_tasks:
            continue
        part = run.samples.get(task)
        label = part.label if part is not None else f"{where}: {task}"
        broken = False
        try:
            metrics, filters = peek_samples(part) if part is not None else ([], [])
        except InputError as exc:  # that task's samples are refused; its aggregate may still be a score
            notes.append(PartNote(label, "refused", _reason(exc)))
            errors.append(exc)
            metrics, filters, broken = [], [], True
        try:
            plan = plan_task(part.path if part is not None else run.path or Path(task), task, run, metrics,
                             filters)
        except InputError as exc:
            notes.append(PartNote(label, "refused", _reason(exc)))
            errors.append(exc)
            continue
        if isinstance(plan, str):
            if not broken:
                notes.append(PartNote(label, "skipped", plan))
            continue
        entry = rows[task] = _TaskRows(plan=plan)
        if broken:
            continue
        if part is None:
            if run.samples:  # absent, not bad: not logged, or left out of a download on purpose
                notes.append(PartNote(f"{where}: {task}", "skipped",
                                      f"no samples file of task {task}: no per-item rows of it"))
            continue
        try:
            entry.frame = read_samples(part, plan, filter_order(run, task))
        except InputError as exc:
            notes.append(PartNote(label, "refused", _reason(exc)))
            errors.append(exc)
            continue
        original, effective = run.counts(task)
        expected = effective if isinstance(effective, int) else original
        entry.complete = expected is None or entry.frame.height == expected
        agg = _aggregate(run.results.get(task, {}), plan.metric or "", plan.filter)
        if agg is not None and entry.complete and _mean_checkable(run, task, plan.metric or ""):
            mean = float(entry.frame["score"].mean())  # type: ignore[arg-type]
            if abs(mean - agg) > TOLERANCE:
                key = plan.metric if plan.filter is None else f"{plan.metric},{plan.filter}"
                entry.contradiction = (f"aggregate {key} = {agg:.4g} of task {task} contradicts its "
                                       f"{entry.frame.height} samples (mean {mean:.4g}): score not stored")

    responses: list[pl.DataFrame] = []
    for task, entry in rows.items():
        if entry.frame is None:
            continue
        plan = entry.plan
        responses.append(settings_frame(
            entry.frame.with_columns(model=pl.lit(model), benchmark=pl.lit(plan.benchmark)),
            task=benchmark_task(run, plan), n_shot=run.n_shot(task), metric=plan.metric, filter=plan.filter,
            limit=run.limited(task), **base))

    scores: list[dict[str, Any]] = []
    by_bench: dict[tuple[str, str | None], list[_TaskRows]] = {}
    for entry in rows.values():  # per metric too: leaderboard_mmlu_pro (acc) is not lm-eval's mmlu_pro (CoT)
        by_bench.setdefault((entry.plan.benchmark, entry.plan.metric), []).append(entry)
    for (bench, _), members in by_bench.items() if not samples_only else ():
        row, note = _score(run, bench, members, where)
        if note is not None:
            notes.append(note)
        if row is not None:
            scores.append({"model": model, "benchmark": bench, **base, **row})
    return responses, scores, notes, errors



def _score(run: Run, bench: str, members: list[_TaskRows], where: str | None
           ) -> tuple[dict[str, Any] | None, PartNote | None]:
    """The benchmark score of one run, as the leaderboard defines it, with its settings; or a note."""
    if not run.results:
        return None, None
    plan = members[0].plan
    metric, filt = plan.metric or "", plan.filter
    part = f"{where}: {bench}"
    tasks = [m.plan.task for m in members]
    limits = [lim for t in tasks if (lim := run.limited(t)) is not None]
    contradictions = [m.contradiction for m in members if m.contradiction]
    if bench == "mmlu":
        subjects = {m.plan.prefix: m for m in members if m.plan.prefix}
        values = {s: _aggregate(run.results.get(m.plan.task, {}), metric, filt) for s, m in subjects.items()}
        present = {s for s, v in values.items() if v is not None}
        if not set(MMLU_SUBJECTS) <= present:
            if not present:
                return None, None
            return None, PartNote(part, "skipped", f"mmlu score needs all 57 subjects' aggregates "
                                                   f"({len(present & set(MMLU_SUBJECTS))} present): not stored")
        value: float | None = sum(values[s] for s in MMLU_SUBJECTS) / len(MMLU_SUBJECTS)  # type: ignore[misc]
        key = benchmark_task(run, plan)
        n_shot = _members_n_shot(run, key, [m.plan.task for m in subjects.values()])
    elif any(m.plan.prefix is not None for m in members):  # a benchmark of subtasks: its group's aggregate
        key = plan.group or harness_group(bench) or bench
        value = _aggregate(run.results.get(key, {}), metric, filt)
        if value is None and bench in V2_GROUPS:  # 24 separate tasks: the group's size-weighted mean
            value = _weighted_mean(run, bench, members, metric, filt)
        if value is None:
            return None, None
        n_shot = _members_n_shot(run, key, tasks)
    else:
        key = plan.task
        if key not in run.results:
            return None, None
        value = _aggregate(run.results[key], metric, filt)
        if value is None:
            return None, PartNote(part, "refused", f"no aggregate {metric},{filt} for task {key}")
        n_shot = run.n_shot(key)
    if limits:
        if _anchor_subset(members):  # lm_eval --samples: chosen documents, not the first N
            return None, PartNote(part, "skipped", f"anchor run (lm-eval --samples, {limits[0]:g} chosen documents): "
                                                   "its aggregate is not a benchmark score (responses kept)")
        return None, PartNote(part, "skipped", f"run used --limit {limits[0]:g}: its aggregate is not a "
                                               "benchmark score (responses kept)")
    if contradictions:
        return None, PartNote(part, "refused", contradictions[0])
    if value is None or not 0.0 <= value <= 1.0:
        return None, PartNote(part, "refused", f"aggregate {metric!r} of {key!r} is {value!r}, not a score "
                                               "in [0, 1]")
    return {"score": value, "task": key, "n_shot": n_shot, "metric": metric, "filter": filt,
            "limit": None}, None


def _members_n_shot(run: Run, group: str, tasks: Sequence[str]) -> int | None:
    """A group's few-shot count: its subtasks' when they agree. A group runs no documents of its own, and
    the harness's entry for it is no count (0.4.2-0.4.3 wrote 0 for MMLU's group whose 57 subjects ran
    5-shot, from a subgroup not yet filled in; 0.4.5+ writes none). Subtasks that disagree: unknown."""
    counts = {n for t in tasks if (n := run.n_shot(t)) is not None}
    if len(counts) == 1:
        return counts.pop()
    return None if counts else run.n_shot(group)


def _anchor_subset(members: list[_TaskRows]) -> bool:
    """Whether a partial run's documents were chosen (``--samples``), not the first N (``--limit``): a
    --limit run answers doc ids 0..N-1 of every task, an anchor run scattered ones."""
    for m in members:
        if m.frame is None or m.frame.height == 0:
            continue
        docs = sorted(int(i.rsplit(".", 1)[-1]) for i in m.frame.get_column("item_id").to_list()
                      if i.rsplit(".", 1)[-1].isdigit())
        if docs != list(range(len(docs))):
            return True
    return False


def _weighted_mean(run: Run, bench: str, members: list[_TaskRows], metric: str, filt: str | None
                   ) -> float | None:
    """A v2 group's score from its subtasks' aggregates weighted by size, when every subtask is there."""
    by_sub = {m.plan.prefix: m.plan.task for m in members}
    total = weight = 0.0
    for sub in V2_GROUPS[bench][3]:
        task = by_sub.get(sub)
        value = _aggregate(run.results.get(task, {}), metric, filt) if task else None
        size = run.counts(task)[0] if task else None
        if value is None or not isinstance(size, int):
            return None
        total += value * size
        weight += size
    return total / weight if weight else None


def read_lm_eval(path: str | Path) -> ParsedResults:
    """Read one lm-eval source: a model output folder, one results JSON (any version, any file name,
    a Python-API dump with embedded samples) or one samples file.

    responses: from the samples (item id ``doc_id``, ``<subtask>.<doc_id>`` inside MMLU and the v2
    groups); scores: each benchmark's leaderboard score from the aggregates (never from a ``--limit``
    run, never when it contradicts complete samples); models: name, date, size, base model. Within a
    folder the newest run of a task supersedes older ones (noted as skipped). Bad parts are notes.
    """
    path = Path(path)
    runs, notes, _ = collect(path)
    # a samples file alone is that task alone (its results, if beside it, only say metric and filter)
    samples_only = path.is_file() and not any(r.path == path for r in runs)
    if not runs:
        if notes:
            raise InputError(path, "; ".join(f"{n.part}: {n.reason}" for n in notes[:3]))
        raise InputError(path, "no lm-eval results or samples found")
    folder = path if path.is_dir() else path.parent
    fallback = next((model_name_from_results(r.data) for r in reversed(runs) if model_name_from_results(r.data)),
                    None)
    resp_parts: list[pl.DataFrame] = []
    score_rows: list[dict[str, Any]] = []
    model_rows: list[dict[str, Any]] = []
    errors: list[InputError] = []
    seen: dict[tuple[str, str], Run] = {}
    ordered = sorted(runs, key=lambda r: r.order, reverse=True)  # newest first
    for rank, run in enumerate(ordered):
        model = model_name_from_results(run.data) or fallback or model_from_folder(folder)
        skip: set[str] = set()
        for task in [*run.results, *run.samples]:
            newer = seen.get((model, task))
            if newer is not None and newer is not run:
                skip.add(task)
        for task in sorted(skip):
            part = run.samples[task].label if task in run.samples else f"{run.path}: {task}"
            if task in run.samples or not _is_group(run, task):
                notes.append(PartNote(part, "skipped", f"superseded by the newer run "
                                                       f"{seen[(model, task)].path or seen[(model, task)].date_id}"))
        for task in [*run.results, *run.samples]:
            seen.setdefault((model, task), run)
        resp, scores, run_notes, run_errors = read_run(run, model, skip, samples_only)
        notes.extend(run_notes)
        errors.extend(run_errors)
        resp_parts += [r.with_columns(_run=pl.lit(-rank, dtype=pl.Int64)) for r in resp]
        score_rows += [{**s, "_run": -rank} for s in scores]
        if run.path is not None:
            config = run.data.get("config") or {}
            n_params = config.get("model_num_parameters")
            model_rows.append({
                "model": model, "submitted_at": run.run_at,
                "n_params": float(n_params) if isinstance(n_params, int | float) and n_params > 0 else None,
                "base_model": base_model_from_results(run.data), "_run": rank,  # the earliest run dates it
            })
    if not model_rows:
        model_rows.append({"model": fallback or model_from_folder(folder), "submitted_at": None, "n_params": None,
                           "base_model": None, "_run": 0})
    responses = pl.concat(resp_parts, how="diagonal_relaxed") if resp_parts else pl.DataFrame()
    scores = pl.DataFrame(score_rows, schema={**SCORES_SCHEMA, **SETTINGS_SCHEMA, "_run": pl.Int64}) \
        if score_rows else pl.DataFrame()
    models = pl.DataFrame(model_rows, schema={**MODELS_SCHEMA, "_run": pl.Int64})
    layouts = sorted({r.layout for r in runs})
    sources = sorted({p for r in runs for p in [r.path, *(s.path for s in r.samples.values())] if p is not None})
    parsed = build_parsed(responses, scores, models, sources, notes, ", ".join(layouts))
    return refuse_empty(path, parsed, errors)


def iter_lm_eval_files(folder: Path) -> Iterable[Path]:
    """The files of one lm-eval unit (for ingest bookkeeping)."""
    runs, _, _ = collect(folder)
    yield from sorted({p for r in runs for p in [r.path, *(s.path for s in r.samples.values())] if p})
