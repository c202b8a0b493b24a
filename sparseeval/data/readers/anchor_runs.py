"""Runs of exported anchor tasks (``sparseeval_*``, :mod:`sparseeval.interfaces.lm_eval_tasks`) read as the harness
tasks they stand for, so ``predict``, ``next`` and ``ingest`` take them like any lm-eval output.

lm-eval records such a task under its own name, numbers its documents 0..k-1 (the anchors' positions)
and reports the predictor's figures as its metrics. The task's config (in the run's results file)
names the harness task, the few-shot count and the metric; every document carries its index among the
harness task's documents (``sparseeval_doc_id``) and the metric's value (``anchor_accuracy``). This
module rewrites a run into the harness task's terms: task ``arc_challenge``, its ``num_fewshot``, the
metric's name, the true doc ids; the estimates (aggregates, not benchmark scores) are dropped.
"""

from __future__ import annotations

from typing import Any

#: the field each exported document carries: its index among the harness task's documents
DOC_FIELD = "sparseeval_doc_id"
#: the per-document metric value an exported task reports (also its documents' raw accuracy: the anchors',
#: and the probe's items' too when the task was exported with ``--probe``)
RAW_KEY = "anchor_accuracy"

#: what the rewritten run says about itself (read by the note for its partial aggregate)
ANCHOR_RUN = "sparseeval_anchor_run"


def anchor_specs(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Exported task name -> its ``sparseeval`` spec, for every exported task of a results document."""
    out = {}
    for task, cfg in (data.get("configs") or {}).items():
        meta = cfg.get("metadata") if isinstance(cfg, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("sparseeval"), dict):
            out[str(task)] = meta["sparseeval"]
    return out


def native_record(record: Any, metric: str) -> Any:
    """One sample of an exported task as the harness task's sample: its true doc id and its metric."""
    if not isinstance(record, dict) or not isinstance(record.get("doc"), dict):
        return record  # the reader refuses it with the line number
    doc_id = record["doc"].get(DOC_FIELD, record.get("doc_id"))
    value = record.get(RAW_KEY)
    return {"doc_id": doc_id, "doc": record["doc"], "filter": record.get("filter"), "metrics": [metric],
            metric: value}


def native_data(data: dict[str, Any], specs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The results document with every exported task renamed to its harness task."""
    rename = {task: spec["base_task"] for task, spec in specs.items()}
    exported_groups = {g for g, children in (data.get("group_subtasks") or {}).items()
                       if children and all(c in rename or c in (data.get("group_subtasks") or {}) for c in children)
                       and any(c in rename for c in children)}
    dropped = set(rename) | exported_groups
    out = {k: v for k, v in data.items() if k not in ("results", "configs", "n-shot", "n-samples", "group_subtasks",
                                                      "groups", "higher_is_better", "versions")}
    out["results"] = {t: v for t, v in (data.get("results") or {}).items() if t not in dropped}
    out["groups"] = {t: v for t, v in (data.get("groups") or {}).items() if t not in dropped}
    out["group_subtasks"] = {g: c for g, c in (data.get("group_subtasks") or {}).items() if g not in dropped}
    out["n-samples"] = {t: v for t, v in (data.get("n-samples") or {}).items() if t not in dropped}
    out["versions"] = {t: v for t, v in (data.get("versions") or {}).items() if t not in dropped}
    configs = {t: c for t, c in (data.get("configs") or {}).items() if t not in dropped}
    shots = {t: n for t, n in (data.get("n-shot") or {}).items() if t not in dropped}
    for task, spec in specs.items():
        base = spec["base_task"]
        cfg = dict((data.get("configs") or {}).get(task) or {})
        configs[base] = {**cfg, "task": base, "num_fewshot": spec["num_fewshot"],
                         "metric_list": [{"metric": spec["metric"], "aggregation": "mean", "higher_is_better": True}]}
        shots[base] = spec["num_fewshot"]
    out["configs"], out["n-shot"] = configs, shots
    out[ANCHOR_RUN] = True
    return out
