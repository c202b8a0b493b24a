"""lm-eval's side of an exported anchor task (:mod:`sparseeval.interfaces.lm_eval_tasks`): imported by lm-eval only.

:class:`AnchorTask` is the harness's own :class:`~lm_eval.api.task.ConfigurableTask`, built from the
config lm-eval itself loads for the predictor's task (prompt, choices, splits, few-shot source, metrics,
filters: nothing retyped), with four changes: its name, the predictor's few-shot count, only the
predictor's filter, and its documents (exactly the anchors, and a model's probe items when exported with
``--probe-for MODEL``, each carrying its index among the task's documents). Per document it computes the
harness's own metrics and keeps the predictor's one.

The estimate needs every anchor of a predictor, and a benchmark's anchors may sit in several tasks
(MMLU's subjects, a joint predictor's benchmarks), while lm-eval aggregates each task on its own.
So each answer is also kept in a registry of this process, per export and task, and each task's
aggregation predicts from the registry (once per export: the result is cached). The registry holds
what *this* process scored; when lm-eval spreads a run over several processes the task's own
answers (which lm-eval gathers) no longer match the registry, and the estimate is refused (NaN, and
an error in the log naming the way out: one process, or ``sparseeval predict`` on the samples).

Tested with lm-eval 0.4.13: the harness config comes from its TaskManager's loader.
"""

from __future__ import annotations

import functools
import logging
import math
from pathlib import Path
from typing import Any

from lm_eval.api.task import ConfigurableTask

from sparseeval.data.readers.anchor_runs import DOC_FIELD, RAW_KEY
from sparseeval.interfaces.lm_eval_tasks import ESTIMATE_KEYS

log = logging.getLogger("sparseeval")

#: export name -> task name -> {"task": harness task, "predictor": folder, "docs": {doc id: value}}
_ANSWERS: dict[str, dict[str, dict[str, Any]]] = {}
#: export name -> (registry fingerprint, estimates by benchmark) of the last prediction
_ESTIMATES: dict[str, tuple[Any, dict[str, dict[str, float]]]] = {}


class AnchorRunError(RuntimeError):
    """Why an estimate cannot be given for this run (logged; the figure is NaN)."""


@functools.cache
def _manager(include: tuple[str, ...]) -> Any:
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=list(include) or None)


def harness_config(task: str, include: tuple[str, ...] = ()) -> dict[str, Any]:
    """lm-eval's own config of ``task`` (what it would build the task from), functions resolved."""
    manager = _manager(include)
    entry = manager.task_index.get(task)
    if entry is None:
        where = f" or in {', '.join(include)}" if include else ""
        raise ValueError(f"lm-eval has no task {task!r} among its own{where}: export with --lm-eval-include "
                         "naming the folder of your task configs")
    return dict(manager._factory._load_full_config(entry, None))


def _predictor(folder: str, expected_hash: str) -> Any:
    art = _load(folder)
    if art.content_hash != expected_hash:
        raise AnchorRunError(f"{folder}: predictor {art.content_hash} is not the one exported ({expected_hash})")
    return art


@functools.cache
def _load(folder: str) -> Any:
    from sparseeval.estimate.artifact import load_predictor

    return load_predictor(folder)


class AnchorTask(ConfigurableTask):
    """An exported leaf: the harness task's anchors, reporting the predictor's estimate."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        config = dict(config or {})
        meta = dict(config.get("metadata") or {})
        spec = dict(meta["sparseeval"])
        self._spec = spec
        self._leaf = str(config["task"])
        self._anchor_docs: Any = None
        here = Path(meta.get("config_source") or spec["export_dir"]).parent \
            if meta.get("config_source") else Path(spec["export_dir"])
        self._predictor_dir = str((here / spec["predictor"]).resolve())
        native = harness_config(spec["base_task"], tuple(spec.get("include_path") or ()))
        merged = {k: v for k, v in native.items() if k not in ("tag", "group", "task_alias", "group_alias")}
        merged["task"] = self._leaf
        merged["num_fewshot"] = int(spec["num_fewshot"])
        merged["metadata"] = {**(native.get("metadata") or {}), **meta}
        filters = merged.get("filter_list")
        if spec.get("filter") and isinstance(filters, list) and len(filters) > 1:
            kept = [f for f in filters if isinstance(f, dict) and f.get("name") == spec["filter"]]
            if not kept:
                raise ValueError(f"{self._leaf}: lm-eval's {spec['base_task']} has no filter {spec['filter']!r} "
                                 f"(it has {', '.join(str(f.get('name')) for f in filters)})")
            merged["filter_list"] = kept
        if not spec.get("metric"):  # nothing recorded at fit time: the task's own metric, as the reader picks it
            from sparseeval.data.readers.lm_eval import pick_metric

            declared = [m["metric"] for m in merged.get("metric_list") or [] if isinstance(m, dict)]
            spec["metric"] = pick_metric(spec["benchmark"], declared)
            merged["metadata"]["sparseeval"] = spec  # the run's results file says which metric was kept
        super().__init__(config=merged)
        # a new run loads its tasks anew: start this task's answers afresh
        _ANSWERS.setdefault(spec["export"], {})[self._leaf] = {
            "task": spec["base_task"], "predictor": self._predictor_dir, "hash": spec["predictor_hash"], "docs": {}}
        _ESTIMATES.pop(spec["export"], None)

    # -- documents: exactly the anchors -----------------------------------------------------------
    @property
    def eval_docs(self) -> Any:
        if self._anchor_docs is None:
            docs = super().eval_docs
            ids = [int(i) for i in self._spec["doc_ids"]]
            beyond = [i for i in ids if i >= len(docs)]
            if beyond:
                raise ValueError(f"{self._leaf}: anchors {beyond[:5]} are beyond the {len(docs)} documents of "
                                 f"{self._spec['base_task']}: its data changed since the predictor was trained")
            if hasattr(docs, "select"):
                self._anchor_docs = docs.select(ids).add_column(DOC_FIELD, ids)
            else:
                self._anchor_docs = [{**docs[i], DOC_FIELD: i} for i in ids]
        return self._anchor_docs

    # -- per document: the harness's metric, kept with the document's index -----------------------
    def _reported(self) -> list[str]:
        return [*ESTIMATE_KEYS, *self._spec.get("mean_keys", [])]

    def process_results(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        native = super().process_results(doc, results)
        metric = self._spec["metric"]
        if metric not in native:
            raise ValueError(f"{self._leaf}: lm-eval's {self._spec['base_task']} reports {', '.join(native)}, "
                             f"not the predictor's metric {metric!r}")
        value = float(native[metric])
        doc_id = int(doc[DOC_FIELD])
        _ANSWERS[self._spec["export"]][self._leaf]["docs"][doc_id] = value
        item = (doc_id, value)
        return {**dict.fromkeys(self._reported(), item), RAW_KEY: value}

    def aggregation(self) -> dict[str, Any]:
        from lm_eval.api.metrics import mean

        return {**{key: functools.partial(self._figure, key) for key in self._reported()}, RAW_KEY: mean}

    def higher_is_better(self) -> dict[str, bool]:
        return {**{key: key not in ("ood", "probe_next") for key in self._reported()}, RAW_KEY: True}

    # -- aggregation: the predictor's estimate -------------------------------------------------------
    def _figure(self, key: str, items: list[tuple[int, float]]) -> float:
        try:
            estimates = self._estimates(items)
        except AnchorRunError as exc:
            log.error("sparseeval: %s: no %s: %s", self._leaf, key, exc)
            return math.nan
        if key.startswith("mean_"):
            return estimates["mean"][key.removeprefix("mean_").replace("estimate", "predicted")]
        row = estimates[self._spec["benchmark"]]
        return {"estimate": row["predicted"], "estimate_lower": row["lower"], "estimate_upper": row["upper"],
                "ood": row["ood"], "stage": row["stage"], "probe_next": row["probe_next"]}[key]

    def _estimates(self, items: list[tuple[int, float]]) -> dict[str, dict[str, float]]:
        export = self._spec["export"]
        mine = _ANSWERS.get(export, {}).get(self._leaf, {}).get("docs", {})
        if dict(items) != mine or len(items) != len(mine):
            raise AnchorRunError("lm-eval gathered answers this process did not score (a run over several "
                                 "processes): run it in one process, or score its samples with `sparseeval predict`")
        shots = getattr(self.config, "num_fewshot", None)
        if shots is not None and int(shots) != int(self._spec["num_fewshot"]):
            raise AnchorRunError(f"the run used {shots}-shot, the predictor was trained on "
                                 f"{self._spec['num_fewshot']}-shot answers (drop --num_fewshot)")
        registry = _ANSWERS[export]
        fingerprint = tuple(sorted((leaf, tuple(sorted(v["docs"].items()))) for leaf, v in registry.items()))
        cached = _ESTIMATES.get(export)
        if cached is None or cached[0] != fingerprint:
            _ESTIMATES[export] = (fingerprint, _predict(registry, self._spec.get("probe_for")))
        return _ESTIMATES[export][1]


def _predict(registry: dict[str, dict[str, Any]], probe_for: str | None) -> dict[str, dict[str, float]]:
    """Every benchmark's estimate (and ``mean``) from the answers in ``registry``: the same
    :func:`sparseeval.estimate.predicting.predict` that ``sparseeval predict`` runs on the samples, the answers named
    as the model whose probe was exported (``probe_for``: its draw is the probe items the task ran)."""
    import polars as pl

    from sparseeval.estimate.methods.joint import MEAN
    from sparseeval.estimate.predicting import predict
    from sparseeval.estimate.probe import plan_of
    from sparseeval.interfaces.export import exported_items

    out: dict[str, dict[str, float]] = {}
    by_predictor: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in registry.values():
        by_predictor.setdefault((entry["predictor"], entry["hash"]), []).append(entry)
    for (folder, digest), entries in by_predictor.items():
        art = _predictor(folder, digest)
        # the anchors, and where the task was exported with --probe-for, any item of the model's probe draw
        plan = None if art.is_joint or not probe_for else plan_of(art.extra)
        items = exported_items(art) if plan is None else exported_items(art, probe_for=probe_for,
                                                                        probe_items=len(plan.items))
        where = {(a.task, a.doc_id): (a.benchmark or art.benchmark, a.item_id) for a in items}
        rows = [(*where[(e["task"], doc)], value) for e in entries for doc, value in e["docs"].items()
                if (e["task"], doc) in where]
        answers = pl.DataFrame(rows, schema={"benchmark": pl.String, "item_id": pl.String, "score": pl.Float64},
                               orient="row").with_columns(model=pl.lit(probe_for or "lm-eval run"))
        try:
            preds = predict(art, answers)
        except Exception as exc:  # too few anchors answered (--limit, a subset of the tasks), ...
            raise AnchorRunError(str(exc)) from exc
        for p in preds:
            out[p.benchmark] = {"predicted": p.predicted, "lower": p.lower, "upper": p.upper, "ood": float(p.ood),
                                "stage": 2.0 if p.stage == "probe" else 1.0, "probe_next": float(p.probe_next)}
            log.warning("sparseeval: %s predicted %.1f [%.1f, %.1f] from %d/%d anchors%s%s", p.benchmark,
                        100 * p.predicted, 100 * p.lower, 100 * p.upper, p.n_anchors, p.k,
                        f" and {p.probe_items} probe items (stage 2: by design)" if p.stage == "probe" else "",
                        "".join(f"; {w}" for w in p.warnings))
    benchmarks = [b for b in out if b != MEAN]
    if MEAN not in out and benchmarks:  # several single-benchmark predictors: the plain mean of their estimates
        out[MEAN] = {"predicted": sum(out[b]["predicted"] for b in benchmarks) / len(benchmarks),
                     "lower": math.nan, "upper": math.nan, "ood": max(out[b]["ood"] for b in benchmarks),
                     "stage": max(out[b]["stage"] for b in benchmarks),
                     "probe_next": sum(out[b]["probe_next"] for b in benchmarks)}
    return out
