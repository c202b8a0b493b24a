"""The joint predictor's refresh (``sparseeval-joint``: one anchor set for several benchmarks) on the same
skeleton as a benchmark's (:mod:`sparseeval.publish.refresh_steps`): re-selected whenever its data change,
compared on the same held-out models with the per-benchmark method at the same total number of items, and
checked output by output (each benchmark and the mean), its frontier self-check cut on the mean score and on
each benchmark's own score.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from sparseeval.core.settings import RefreshSettings
from sparseeval.data.access.sources import model_dates
from sparseeval.data.benchmarks import joint_benchmarks
from sparseeval.data.matrix import ResponseMatrix
from sparseeval.data.store import Store
from sparseeval.estimate.evaluation import (
    ProtocolConfig,
    evaluate_joint,
    evaluate_per_benchmark,
    joint_frontier_selfcheck,
    joint_own_cut_selfcheck,
    results_frame,
)
from sparseeval.estimate.fitting import joint_artifact_from_fit
from sparseeval.estimate.methods.device import cpu_threads
from sparseeval.estimate.methods.joint import JOINT_METHOD, JOINT_SEP, MEAN, common_models, joint_data, restrict_models
from sparseeval.estimate.selfcheck import METRICS, OWN_CUT, SelfCheck
from sparseeval.estimate.splits import make_split
from sparseeval.publish.champion import joint_baseline_maes, joint_crossfit_coverage, mean_guess_mae
from sparseeval.publish.publishing import save_version
from sparseeval.publish.refresh import Check, joint_data_version, joint_fit_key
from sparseeval.publish.refresh_outcome import Candidate, JointReport, Log, Proposal, RefreshResult
from sparseeval.publish.refresh_steps import Context, context, record_proposal, resume_gate, run_refresh
from sparseeval.publish.selfcheck_reuse import measured_or_stored, selfcheck_setup
from sparseeval.publish.tracking import TrackingConfig
from sparseeval.publish.tracking_runs import TrackedRun, log_comparison

#: fewer models with every benchmark than this: no joint fit (its held-out half-splits would be empty)
MIN_JOINT_MODELS = 50


def joint_plan(available: Sequence[str], settings: RefreshSettings) -> tuple[list[str], str | None]:
    """The joint predictor's benchmarks among the ``available`` ones, and why it cannot be fitted (None when it
    can; :func:`too_few_common` says the rest once the models with every one are counted): the rule the refresh
    and the joint sensor both apply."""
    chosen = joint_benchmarks(settings.joint_benchmarks, sorted(available))
    if len(chosen) < 2:
        return chosen, (f"skipped: a joint predictor needs two benchmarks or more, have "
                        f"{', '.join(chosen) or 'none'} (SPARSEEVAL_JOINT_BENCHMARKS)")
    return chosen, None


def too_few_common(chosen: list[str], common: int) -> str | None:
    """Why the joint predictor cannot be fitted on ``common`` models with every one of ``chosen`` (None: it can)."""
    if common < MIN_JOINT_MODELS:
        return (f"skipped: only {common} models have every one of {', '.join(chosen)} "
                f"(at least {MIN_JOINT_MODELS} needed)")
    return None


def refresh_joint(matrices: Mapping[str, ResponseMatrix], store: Store, tracking: TrackingConfig,
                  predictor_dir: str | Path, settings: RefreshSettings, *, log: Log | None = None,
                  run_tags: Mapping[str, str] | None = None, publish: bool = False) -> RefreshResult:
    """The joint predictor's refresh on the same skeleton as a benchmark's: one anchor set for several
    benchmarks, re-selected whenever its data change, compared on the same held-out models with the
    per-benchmark method at the same total, checked output by output. ``matrices``: every benchmark's
    current matrix (the joint benchmarks are chosen among them; :func:`joint_plan` says when none can be
    fitted, and then the result is ``skipped``)."""
    ctx = context(store, tracking, predictor_dir, settings, log, run_tags)
    chosen, why_not = joint_plan(list(matrices), settings)
    if why_not is None:
        why_not = too_few_common(chosen, len(common_models([matrices[b] for b in chosen])))
    if why_not is not None:
        ctx.log.info("%s: %s", JOINT_METHOD, why_not)
        return RefreshResult(JOINT_METHOD, "skipped", "", "", why_not)
    subject = _Joint([matrices[b] for b in chosen], store, settings)
    for line in subject.behind:
        ctx.log.warning("%s: %s: its refresh has not completed; the joint predictor uses its previous matrix",
                        JOINT_METHOD, line)
    return run_refresh(subject, ctx, publish=publish)


class _Joint:
    """The joint predictor's refresh: a fresh joint selection, the per-benchmark reference, the bars."""

    name = JOINT_METHOD
    step = "candidate"

    def __init__(self, matrices: list[ResponseMatrix], store: Store, settings: RefreshSettings) -> None:
        self.matrices, self.settings = matrices, settings
        self.k = min([settings.k, *(len(m.items) for m in matrices)])
        # what the fit sees, exactly: the data versions its matrices were built from (they travel with them)
        versions = {m.benchmark: m.data_version or m.digest() for m in matrices}
        self.version = joint_data_version(versions)
        self.key = joint_fit_key(versions, settings)
        store_versions = store.data_versions()
        self.behind = [f"{m.benchmark} (matrix at data version {m.data_version or '?'}, store at "
                       f"{store_versions.get(m.benchmark, '?')})" for m in matrices
                       if m.data_version and store_versions.get(m.benchmark) not in (None, m.data_version)]

    def gate(self, ctx: Context) -> RefreshResult | None:
        return resume_gate(ctx, self.name, self.key, self.version)

    def record(self, ctx: Context, proposal: Proposal, checks: list[Check]) -> str:
        return record_proposal(ctx, self.name, self.key, self.version, proposal, checks)

    def run_params(self) -> dict[str, Any]:
        s = self.settings
        return {"k_per_benchmark": self.k, "benchmarks": ",".join(m.benchmark for m in self.matrices),
                "method": JOINT_METHOD, "reference_method": s.method, "seed": s.seed, "split": s.split_policy,
                "alpha": s.alpha, "data_version": self.version, "threads": cpu_threads()}

    def fit(self, ctx: Context, run: TrackedRun) -> Proposal:
        s, db, k = self.settings, ctx.store, self.k
        models = common_models(self.matrices)
        self.parts = parts = [restrict_models(m, models) for m in self.matrices]
        self.data = data = joint_data(parts)
        config = ProtocolConfig.of(s)
        metadata = db.model_metadata()  # one read: the date split and the artifact's model list
        dates = model_dates(metadata, data.models) if s.split_policy == "date" else None
        self.split = split = make_split(data.models, policy=config.split_policy, val_frac=config.val_frac,
                                        test_frac=config.test_frac, seed=s.seed, dates=dates)
        fitting = np.concatenate([split.train, split.val])
        cut = {"quantile": s.frontier_quantile, "alpha": s.alpha, "device": s.device}
        self.selfcheck = selfcheck = measured_or_stored(
            db, JOINT_METHOD, selfcheck_setup(s, JOINT_METHOD, k * len(data.benchmarks), benchmarks=data.benchmarks,
                                              cuts=[MEAN, OWN_CUT]),
            len(data.models), self.version,
            lambda: SelfCheck(joint_frontier_selfcheck(data, fitting, k, s.seed, **cut), joint=True,
                              own_cut=joint_own_cut_selfcheck(data, fitting, k, s.seed, **cut)))
        t0 = time.perf_counter()
        joint_results, est = evaluate_joint(data, split, k, s.seed, config=config, device=s.device)
        self.seconds = seconds = time.perf_counter() - t0
        reference = evaluate_per_benchmark(parts, split, s.method, k, s.seed, config=config, device=s.device)
        self.baselines = baselines = joint_baseline_maes(parts, split, k, s.seed, device=s.device)
        artifact = joint_artifact_from_fit(data, split, est, alpha=s.alpha, seed=s.seed, models=metadata,
                                           settings={b: db.training_settings(b) for b in data.benchmarks},
                                           frontier=selfcheck)
        folder, saved = save_version(artifact, ctx.predictor_dir, JOINT_METHOD)
        modes = {name: c.get("mode", "binomial") for name, c in saved.calibration["outputs"].items()}
        self.coverage = coverage = joint_crossfit_coverage(data, split, est, alpha=s.alpha, seed=s.seed, modes=modes)
        self.mae = mae = {r.benchmark: r.mae for r in joint_results}
        self.ref_mae = ref_mae = {r.benchmark: r.mae for r in reference}
        assert est.anchors_ is not None
        keys = [data.columns[c] for c in est.anchors_]
        owners, items = zip(*(key.split(JOINT_SEP, 1) for key in keys), strict=True)
        self.allocation = est.allocation()
        anchor_set_id = db.save_anchor_set(
            benchmark=JOINT_METHOD, method=JOINT_METHOD, k=est.k, items=list(items), item_benchmarks=list(owners),
            seed=s.seed, n_train_models=len(split.train),
            params={"benchmarks": data.benchmarks, "k_per_benchmark": k, "allocation": self.allocation,
                    "split": s.split_policy, "val_frac": s.val_frac, "test_frac": s.test_frac, "origin": "selected",
                    "fit_seconds": round(seconds, 3), "test_mae": mae, "baseline_mae": baselines,
                    "coverage": coverage, "reference_method": s.method, "reference_mae": ref_mae,
                    "frontier": selfcheck.to_json()},
            artifact_uri=str(folder.resolve()), predictor_hash=saved.content_hash,
            origin="selected", data_version=self.version, test_mae=mae[MEAN],
            baseline_mae=baselines[MEAN], coverage=coverage[MEAN],
            **selfcheck.outputs[MEAN].store_columns())  # the columns hold the mean's, as test_mae does
        # the joint comparison, under its own names: its test models are the joint split's, not a benchmark's
        frame = results_frame([*joint_results, *reference]).with_columns(
            (pl.lit(f"{JOINT_METHOD}/") + pl.col("benchmark")).alias("benchmark"))
        comparison_id = log_comparison(ctx.tracking, benchmark=JOINT_METHOD, rows=frame.to_dicts(),
                                       tags=ctx.run_tags, run_id=run.run_id)
        db.save_evaluations(frame.with_columns(pl.lit(comparison_id).alias("mlflow_run_id"),
                                               pl.lit(self.version).alias("data_version")))
        self.outputs = outputs = [*data.benchmarks, MEAN]
        scores = np.concatenate([data.S, data.S.mean(axis=1, keepdims=True)], axis=1)
        candidate = Candidate(anchor_set_id, str(folder), saved.content_hash, "selected", keys, mae[MEAN],
                              coverage[MEAN], est, seconds, selfcheck=selfcheck)
        reason = f"joint anchor set #{anchor_set_id}: {k} items per benchmark over {', '.join(data.benchmarks)}" + (
            f" (behind the store: {'; '.join(self.behind)})" if self.behind else "")
        return Proposal(proposed=candidate, challenger=None, reason=reason, mae={o: mae[o] for o in outputs},
                        baseline={o: baselines[o] for o in outputs},
                        mean_guess={o: mean_guess_mae(scores[:, i], split) for i, o in enumerate(outputs)},
                        coverage={o: coverage[o] for o in outputs}, items=keys, expected_k=k * len(data.benchmarks),
                        known_items=set(data.columns), frontier=selfcheck.gated())

    def report(self, ctx: Context, run: TrackedRun, proposal: Proposal) -> JointReport:
        s, outputs, selfcheck = self.settings, self.outputs, self.selfcheck
        own = selfcheck.own_cut
        run.log_metrics({**{f"test_mae/{o}": self.mae[o] for o in outputs},
                         **{f"{s.method}_mae/{o}": self.ref_mae[o] for o in outputs},
                         **{f"random_linear_mae/{o}": self.baselines[o] for o in outputs},
                         **{f"coverage/{o}": c for o, c in self.coverage.items() if c is not None},
                         **{f"frontier/{o}/{name}": v for o in outputs
                            for name, v in selfcheck.outputs[o].metrics().items()},
                         **{f"frontier_{OWN_CUT}/{b}/{name}": v for b, f in own.items()
                            for name, v in f.metrics().items()},
                         "selection_seconds": self.seconds})
        table = pl.DataFrame({"output": outputs, "joint_mae": [round(self.mae[o], 3) for o in outputs],
                              f"{s.method}_mae": [round(self.ref_mae[o], 3) for o in outputs],
                              "random_linear_mae": [round(self.baselines[o], 3) for o in outputs],
                              "anchors": [self.allocation.get(o, proposal.proposed.estimator.k) for o in outputs],
                              "coverage": [self.coverage[o] for o in outputs],
                              **{f"frontier_{name}": [selfcheck.outputs[o].metrics().get(name) for o in outputs]
                                 for name in METRICS},
                              **{f"frontier_{OWN_CUT}_{name}": [own[o].metrics().get(name) if o in own else None
                                                               for o in outputs] for name in METRICS}})
        return JointReport(benchmarks=tuple(self.data.benchmarks), inputs_behind=tuple(self.behind),
                           k_per_benchmark=self.k, items=proposal.proposed.estimator.k, models=len(self.data.models),
                           train_models=len(self.split.train), test_models=len(self.split.test),
                           selection_seconds=self.seconds, test_mae_points=self.mae[MEAN], outputs=table,
                           selfcheck=selfcheck)
