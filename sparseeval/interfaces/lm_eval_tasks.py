"""``sparseeval export --format lm-eval-task``: a task folder that makes lm-eval print the estimate itself.

The folder, for ``lm_eval --include_path DIR --tasks sparseeval_<benchmark>``, holds one YAML per
*leaf* (a predictor's anchors in one harness task) and, where there are several, group YAMLs:

* one benchmark in one harness task (``arc`` -> ``arc_challenge``): the task ``sparseeval_arc``;
* a benchmark spread over several harness tasks (MMLU's subjects): the group ``sparseeval_mmlu`` of
  leaves ``sparseeval_mmlu__mmlu_anatomy`` ...;
* a joint predictor: the group ``sparseeval_joint`` of ``sparseeval_joint_<benchmark>`` entries;
  several predictors: the group ``sparseeval`` of their entries.

A leaf YAML names no prompt, split or metric of its own: it names the harness task and the
predictor's settings (n-shot, metric, filter), and its ``class``
(:class:`sparseeval.interfaces.lm_eval_anchor_task.AnchorTask`) takes everything else from lm-eval's own config of
that task when lm-eval loads it. Its documents are exactly the anchors (with ``--probe-for MODEL``, and
the first items of that model's probe draw: a task cannot ask for them only where the anchors put a model
at the top, so it runs them, and the estimate uses them exactly where ``predict`` would; ``anchor_accuracy``
then covers both). Every leaf reports ``estimate`` (the predicted full-benchmark score),
``estimate_lower``/``estimate_upper`` (the interval), ``ood`` (1 when the interval may not hold),
``stage`` (1: the anchors gave the number, 2: the probe did), ``probe_next`` (probe items the model is
asked to run next: 0 when none or done) and ``anchor_accuracy`` (the raw score); a group averages them over its
leaves, which all report their benchmark's same estimate (so the average is that estimate) and weights
the raw accuracy by anchors. With several benchmarks every leaf also reports ``mean_estimate`` (a joint
predictor's own mean output, with ``mean_lower``/``mean_upper``; else the mean of the benchmarks'
estimates), which the top group shows.

The predictors are copied into ``DIR/predictors/`` (hash-checked when lm-eval loads them), so the folder
needs nothing but ``pip install sparseeval`` next to lm-eval. Writing needs no lm-eval.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sparseeval.core.atomic import atomic_folder
from sparseeval.core.errors import UsageError
from sparseeval.data.benchmarks import default_n_shot, split_variant
from sparseeval.data.readers.anchor_runs import DOC_FIELD, RAW_KEY  # noqa: F401  (the task's document field and metric)
from sparseeval.estimate.artifact import LEGACY_STATE_FILE, META_FILE, STATE_FILE, PredictorArtifact
from sparseeval.interfaces.export import exported_items

PREFIX = "sparseeval"
#: what lm-eval instantiates for a leaf (imported by lm-eval, from the installed sparseeval)
TASK_CLASS = "sparseeval.interfaces.lm_eval_anchor_task.AnchorTask"
#: a file marking a folder this export wrote (so a new export may replace it whole)
MARKER = ".sparseeval-lm-eval-task"
#: the per-benchmark figures every leaf reports (a group averages them: equal values, so the same number)
ESTIMATE_KEYS = ("estimate", "estimate_lower", "estimate_upper", "ood", "stage", "probe_next")
MEAN_KEYS = ("mean_estimate", "mean_lower", "mean_upper")


@dataclass(frozen=True)
class WrittenTask:
    """What ``--tasks`` to give lm-eval, and the leaves under it."""

    name: str
    leaves: tuple[str, ...]


class _Function(str):
    """A ``!function module.name`` reference in the YAML (lm-eval's tag for a Python object)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Function, lambda dumper, value: dumper.represent_scalar("!function", str(value)))


def task_name(*parts: str) -> str:
    """An lm-eval task name from benchmark / task names: letters, digits and ``_`` only."""
    return "_".join(re.sub(r"[^0-9A-Za-z_]+", "_", p).strip("_") for p in parts if p)


def leaf_settings(art: PredictorArtifact, benchmark: str) -> dict[str, Any]:
    """The n-shot, metric and filter the predictor's training data for ``benchmark`` were run with
    (recorded at fit time; the plain leaderboard name's defaults when nothing was recorded)."""
    mine = art.training_settings(benchmark)
    base, shots, _ = split_variant(benchmark)
    n_shot = mine.get("n_shot")
    if n_shot is None:
        n_shot = default_n_shot(base) if shots is None else shots
    return {"num_fewshot": int(n_shot), "metric": mine.get("metric") or _default_metric(base),
            "filter": mine.get("filter") or None}


def _default_metric(base: str) -> str | None:
    from sparseeval.data.readers.lm_eval import PREFERRED_METRICS

    names = PREFERRED_METRICS.get(base)
    return names[0] if names else None


def _plan(artifacts: Sequence[PredictorArtifact], probe_for: str | None = None,
          probe_items: int | None = None) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """(top task name, leaf specs, group specs) of an export (``probe_for``: that model's first
    ``probe_items`` probe items run too)."""
    several = sum(len(a.benchmarks) for a in artifacts) > 1
    single_joint = len(artifacts) == 1 and artifacts[0].is_joint
    top = task_name(PREFIX, "joint") if single_joint else PREFIX if several else \
        task_name(PREFIX, artifacts[0].benchmark)
    leaves: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    entries: list[str] = []
    used: set[str] = set()
    for art in artifacts:
        folder = task_name(art.benchmark)
        # the anchors, then the model's probe items (position -1; a joint predictor has no probe)
        run = exported_items(art, probe_for=None if art.is_joint else probe_for, probe_items=probe_items)
        unplaced = [a.item_id for a in run if a.task is None or a.doc_id is None]
        if unplaced:
            raise UsageError(f"predictor for {art.benchmark!r} has {'items' if probe_for else 'anchors'} without an "
                             f"lm-eval task/doc id ({', '.join(unplaced[:5])}): it cannot be exported as an "
                             "lm-eval task")
        for bench in art.benchmarks:
            entry = task_name(PREFIX, "joint", bench) if art.is_joint else task_name(PREFIX, bench)
            if entry in used:
                raise UsageError(f"two predictors export benchmark {bench!r}: export them separately")
            used.add(entry)
            tasks = sorted({a.task for a in run if (a.benchmark or art.benchmark) == bench})  # type: ignore[type-var]
            names = [entry] if len(tasks) == 1 else [f"{entry}__{task_name(t)}" for t in tasks]
            for name, task in zip(names, tasks, strict=True):
                docs = sorted(int(a.doc_id) for a in run  # type: ignore[arg-type]
                              if a.task == task and (a.benchmark or art.benchmark) == bench)
                probed = {"probe_for": probe_for} if probe_for and not art.is_joint else {}
                leaves.append({"name": name, "benchmark": bench, "base_task": task, "doc_ids": docs, **probed,
                               "predictor": f"predictors/{folder}", "predictor_hash": art.content_hash,
                               **leaf_settings(art, bench)})
            if len(tasks) > 1:
                groups.append({"name": entry, "children": names, "keys": [*ESTIMATE_KEYS]})
            entries.append(entry)
    if several:  # a joint predictor has its own mean output (with an interval); else the benchmarks' mean
        groups.append({"name": top, "children": entries, "keys": list(MEAN_KEYS if single_joint else MEAN_KEYS[:1])})
    return top, leaves, groups


def _leaf_yaml(leaf: dict[str, Any], export: str, leaves: list[str], mean_keys: Sequence[str],
               include_paths: Sequence[Path], out: Path) -> dict[str, Any]:
    spec = {"export": export, "leaves": leaves, "mean_keys": list(mean_keys),
            "include_path": [str(Path(p).resolve()) for p in include_paths],
            "export_dir": str(out.resolve()),
            **{k: leaf[k] for k in ("benchmark", "base_task", "doc_ids", "probe_for", "num_fewshot", "metric",
                                    "filter", "predictor", "predictor_hash") if k in leaf}}
    return {"task": leaf["name"], "class": _Function(TASK_CLASS), "metadata": {"version": 1, "sparseeval": spec}}


def _group_yaml(name: str, children: list[str], keys: Sequence[str]) -> dict[str, Any]:
    metrics = [{"metric": k, "aggregation": "mean", "weight_by_size": False} for k in keys]
    metrics.append({"metric": RAW_KEY, "aggregation": "mean", "weight_by_size": True})
    return {"group": name, "task": children, "aggregate_metric_list": metrics, "metadata": {"version": 1}}


def _copy_predictor(art: PredictorArtifact, dest: Path) -> None:
    assert art.folder is not None
    dest.mkdir(parents=True)
    for name in (META_FILE, STATE_FILE, LEGACY_STATE_FILE, "README.md", "LICENSE"):
        src = art.folder / name
        if src.is_file():
            shutil.copyfile(src, dest / name)  # the Hub cache links blobs: copy the bytes, not the link


def write_task_folder(artifacts: Sequence[PredictorArtifact], out: str | Path,
                      include_paths: Sequence[Path] = (), probe_for: str | None = None,
                      probe_items: int | None = None) -> WrittenTask:
    """Write the lm-eval task folder for ``artifacts`` to ``out`` (atomically: built beside it and moved
    into place). An existing ``out`` is replaced only if an earlier export wrote it. ``probe_for``: the task
    also runs the first ``probe_items`` of that model's probe (lm-eval cannot ask for them only where the
    anchors put a model at the top), and the estimate uses them exactly where ``predict`` would."""
    if not artifacts:
        raise UsageError("nothing to export: no predictor given")
    out = Path(out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).is_file())):
        raise UsageError(f"--out {out}: exists and was not written by `sparseeval export --format lm-eval-task`; "
                         "give a new folder")
    top, leaves, groups = _plan(artifacts, probe_for, probe_items)
    mean_keys = next((g["keys"] for g in groups if g["name"] == top), [])
    names = [leaf["name"] for leaf in leaves]
    def fill(tmp: Path) -> None:
        (tmp / MARKER).write_text("written by sparseeval export --format lm-eval-task\n")
        for art in artifacts:
            _copy_predictor(art, tmp / "predictors" / task_name(art.benchmark))
        for leaf in leaves:
            doc = _leaf_yaml(leaf, top, names, mean_keys, include_paths, out)
            (tmp / f"{leaf['name']}.yaml").write_text(yaml.dump(doc, Dumper=_Dumper, sort_keys=False))
        for group in groups:
            doc = _group_yaml(group["name"], group["children"], group["keys"])
            (tmp / f"{group['name']}.yaml").write_text(yaml.dump(doc, Dumper=_Dumper, sort_keys=False))

    atomic_folder(out, fill)
    return WrittenTask(top, tuple(names))
