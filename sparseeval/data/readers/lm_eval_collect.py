"""Which files of an lm-eval source make which runs: results paired with their samples.

A folder holds results and samples of several runs (0.4.3+ pairs them by ``date_id``, 0.4.0-0.4.2 by
``<model_args>_<task>`` names); a results file or a samples file given alone brings its own run's
partners from beside it; a run of exported anchor tasks is rewritten into the harness tasks it stands
for. The pairing is the part of the reader that looks at file names, so it lives apart from reading them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparseeval.data.readers.anchor_runs import anchor_specs, native_data, native_record
from sparseeval.data.readers.base import InputError, PartNote
from sparseeval.data.readers.files import LFS_REASON, is_lfs_pointer, read_json
from sparseeval.data.readers.lm_eval_results import (
    _RESULTS_RE,
    Run,
    SamplesPart,
    is_lm_eval_results,
    results_layout,
    sanitized_model_args,
)
from sparseeval.data.readers.lm_eval_samples import _SAMPLES_RE, iter_records, sniff_samples
from sparseeval.data.tasks import LEADERBOARD_V2_TASKS


def _old_layout_task(stem: str, data: Mapping[str, Any]) -> str | None:
    """The task of a 0.4.0-0.4.2 samples file ``<model_args>_<task>`` of the results ``data``."""
    prefix = sanitized_model_args(data)
    tasks = list(data.get("configs") or {}) + list(data.get("results") or {})
    if prefix is not None and stem.startswith(prefix + "_") and stem[len(prefix) + 1:] in tasks:
        return stem[len(prefix) + 1:]
    return None


def is_v2_samples(name: str) -> bool:
    """A ``samples_<task>_<date>.jsonl`` of one of the Open LLM Leaderboard v2's exact tasks."""
    m = _SAMPLES_RE.match(name)
    return m is not None and m["task"] in LEADERBOARD_V2_TASKS


def _run_from_results(path: Path, data: dict[str, Any]) -> Run:
    m = _RESULTS_RE.match(path.name)
    run = Run(path=path, data=data, date_id=m["date"] if m else None, layout=results_layout(data, path))
    embedded = data.get("samples")
    if isinstance(embedded, dict):
        for task, records in embedded.items():
            if isinstance(records, list):
                run.samples[str(task)] = SamplesPart(task=str(task), path=path, records=records)
    return run


def collect(path: Path) -> tuple[list[Run], list[PartNote], list[Path]]:
    """The runs of an lm-eval source (a model folder, one results JSON, one samples file).

    A results file given alone reads only its own run's samples (same ``date_id``, or the 0.4.0-0.4.2
    ``<model_args>_<task>.jsonl`` names); a folder pairs every samples file with its results.
    """
    notes: list[PartNote] = []
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    elif path.is_file():
        files = [path]
    else:
        raise InputError(path, "no such file or folder")
    runs: list[Run] = []
    results_by_date: dict[str, Run] = {}
    samples_files: list[Path] = []
    for p in files:
        name = p.name.lower()
        if is_lfs_pointer(p):
            if _SAMPLES_RE.match(p.name) or name.endswith(".jsonl"):
                samples_files.append(p)  # refused when its task is read
            else:
                notes.append(PartNote(str(p), "refused", LFS_REASON))
            continue
        if name.endswith(".json") and not sniff_samples(p):
            try:
                data = read_json(p)
            except InputError as exc:
                if path.is_file():
                    raise
                if _RESULTS_RE.match(p.name):
                    notes.append(PartNote(str(p), "refused", exc.problem if exc.line is None
                                          else f"{exc.problem} (line {exc.line})"))
                continue
            if is_lm_eval_results(data):
                run = _run_from_results(p, data)
                runs.append(run)
                if run.date_id:
                    results_by_date[run.date_id] = run
            elif path.is_file():
                raise InputError(p, "JSON file is not lm-eval results")
        elif name.endswith((".jsonl", ".json")) and sniff_samples(p):
            samples_files.append(p)
    if path.is_file() and runs:  # a results file alone: its own run's samples beside it
        run = runs[0]
        for p in sorted(path.parent.iterdir()):
            if p == path or not p.is_file():
                continue
            m = _SAMPLES_RE.match(p.name)
            if (m and run.date_id and m["date"] == run.date_id) or (
                    not m and p.suffix == ".jsonl" and _old_layout_task(p.stem, run.data)):
                samples_files.append(p)
    for p in samples_files:
        m = _SAMPLES_RE.match(p.name)
        if m:
            run = results_by_date.get(m["date"])
            if run is None and path.is_file():  # a samples file alone: its run's results, if beside it
                sibling = p.parent / f"results_{m['date']}.json"
                if sibling.is_file() and not is_lfs_pointer(sibling):
                    try:
                        data = read_json(sibling)
                    except InputError:
                        data = None
                    if is_lm_eval_results(data):
                        run = _run_from_results(sibling, data)
                        runs.append(run)
                        results_by_date[m["date"]] = run
            if run is None:
                run = Run(path=None, data={}, date_id=m["date"], layout="lm-eval-0.4.3+")
                runs.append(run)
                results_by_date[m["date"]] = run
            run.samples[m["task"]] = SamplesPart(task=m["task"], path=p)
            continue
        owner = next(((r, t) for r in runs if r.path is not None
                      and (t := _old_layout_task(p.stem, r.data)) is not None), None)
        if owner is None and path.is_file():
            for sibling in sorted(p.parent.glob("*.json")):
                try:
                    data = read_json(sibling) if not is_lfs_pointer(sibling) else None
                except InputError:
                    continue
                if is_lm_eval_results(data) and (t := _old_layout_task(p.stem, data)) is not None:
                    run = _run_from_results(sibling, data)
                    runs.append(run)
                    owner = (run, t)
                    break
        if owner is not None:
            owner[0].samples[owner[1]] = SamplesPart(task=owner[1], path=p)
        else:
            task = p.stem.removeprefix("samples_")
            run = Run(path=None, data={}, date_id=None, layout="lm-eval-0.4.0" if p.suffix == ".json"
                      else "lm-eval-0.4.3+")
            run.samples[task] = SamplesPart(task=task, path=p)
            runs.append(run)
    for run in runs:
        notes += _as_harness_tasks(run)
    return runs, notes, files


def _as_harness_tasks(run: Run) -> list[PartNote]:
    """Rewrite a run of exported anchor tasks (``sparseeval export --format lm-eval-task``) into the harness
    tasks they stand for (:mod:`sparseeval.data.readers.anchor_runs`); notes for samples that cannot be read."""
    specs = anchor_specs(run.data)
    if not specs:
        return []
    notes: list[PartNote] = []
    merged: dict[str, tuple[Path, dict[Any, Any]]] = {}
    for task, spec in specs.items():
        part = run.samples.pop(task, None)
        if part is None:
            continue
        try:
            records = [native_record(r, spec["metric"]) for _, r in iter_records(part)]
        except InputError as exc:
            notes.append(PartNote(part.label, "refused", _reason(exc)))
            continue
        path, by_doc = merged.setdefault(spec["base_task"], (part.path, {}))
        for r in records:  # a harness task in two exported entries (a joint and a single predictor): once
            key = (r.get("doc_id"), r.get("filter")) if isinstance(r, dict) else id(r)
            seen = by_doc.setdefault(key, r)
            if isinstance(r, dict) and seen is not r and seen.get(spec["metric"]) != r.get(spec["metric"]):
                notes.append(PartNote(part.label, "refused", f"document {key[0]} of {spec['base_task']} was answered "
                                                             f"twice in this run, differently ({task} and another "
                                                             "exported task): run the two exports separately"))
                by_doc[key] = None
    run.data = native_data(run.data, specs)
    for base, (path, by_doc) in merged.items():
        if None not in by_doc.values():
            run.samples[base] = SamplesPart(task=base, path=path, records=list(by_doc.values()))
    return notes


def _reason(exc: InputError) -> str:
    where = []
    if exc.line is not None:
        where.append(f"line {exc.line}")
    if exc.column is not None:
        where.append(f"column {exc.column!r}")
    return exc.problem + (f" ({', '.join(where)})" if where else "")
