"""Planted bugs, one at a time: does a test catch each? ``python bench/mutants.py`` (``make mutants``).

Each mutant is a small realistic bug (a setting left out of a key, a check removed, a message
reworded into a wrong reason), written as exact text replacements in the product's files, and the
tests that should catch it. For every mutant the script applies it to a **scratch copy** of the tree
(the working tree is never written, so an interrupted run leaves nothing behind), runs those tests
there, and prints whether they caught it and how many seconds they took. Before the mutants, each
distinct selection of tests runs once on the unmutated copy: a test that fails there proves nothing.

The scratch copy holds the files git tracks or would track (the working tree's state, uncommitted
changes included), ``../shared`` beside it (the real data), and runs with ``PYTHONPATH`` on it and
no bytecode written, so the copy's code, not the editable install's, is what the tests import.

    python bench/mutants.py                 # every mutant
    python bench/mutants.py --only alias-not-moved --only fit-key-without-alpha
    python bench/mutants.py --list

A mutant counts as **caught** only when a test fails on an assertion: an ``assert`` (or
``pytest.fail``, a ``pytest.raises`` that saw nothing raised, NumPy's ``assert_*``) whose innermost
frame inside the repository is a test's. A test that errors because the mutated code crashed (a
``KeyError`` in the code under test, an ``assert`` inside the product) never reached the assertions
that prove the behaviour, so the mutant is reported ``CRASHED``, not caught; pytest then goes on to
the next test (it stops at the first assertion failure, as ``-x`` would). The line of the assertion
that failed is printed under each caught mutant. The verdicts come from this file loaded into the
tests' pytest as a plugin (:func:`pytest_runtest_makereport`), which writes one JSON line per failure
to the file its option ``--mutant-verdicts`` names.

Exit status 1 when a mutant is not caught (or only crashed, or its tests ran past ``--timeout``), 2
when the tests fail on the unmutated tree.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    """A planted bug: ``(file, old text, new text)`` replacements (each old text found exactly once) and
    the pytest arguments of the tests that should catch it."""

    name: str
    what: str
    edits: tuple[tuple[str, str, str], ...]
    tests: tuple[str, ...]


KEYS = "tests/test_refresh_keys.py"
PROBE_REFRESH = "tests/test_probe_refresh.py"
SERVE = "tests/test_serve_bootstrap.py"
FRONTIER = "tests/test_frontier.py"
BEYOND = "tests/test_beyond.py"
POLICY = "tests/test_refresh_policy.py"
JOINT_FRONTIER = "tests/test_joint_frontier.py"
PROBE = "tests/test_probe.py"
SETTINGS = "sparseeval/core/settings.py"

MUTANTS: tuple[Mutant, ...] = (
    Mutant("alias-not-moved", "the MLflow champion alias set once, never moved to a newer champion",
           (("sparseeval/publish/publishing.py",
             "        mlf.set_alias(self.tracking, benchmark=bench, alias=alias, version=pub[\"registry_version\"])",
             "        if mlf.alias_version(self.tracking, benchmark=bench, alias=alias) is None:\n"
             "            mlf.set_alias(self.tracking, benchmark=bench, alias=alias,\n"
             "                          version=pub[\"registry_version\"])"),),
           ("tests/test_champion_change.py",)),
    Mutant("old-champion-kept", "the previous champion not retired when a new one is published",
           (("sparseeval/data/store/results.py",
             "            set_role(con, int(other), \"retired\", "
             "f\"replaced as {role} by anchor set #{anchor_set_id}\")",
             "            pass"),),
           ("tests/test_champion_change.py",)),
    Mutant("fit-key-without-alpha", "alpha left out of the fit key",
           ((SETTINGS, '"interval miscoverage (0.1: 90 % intervals)", keys=(FIT, JOINT))',
             '"interval miscoverage (0.1: 90 % intervals)", keys=(JOINT,))'),),
           (KEYS, "-k", "keys_it_affects")),
    Mutant("fit-key-without-coverage-tolerance", "coverage_tolerance left out of the fit key",
           ((SETTINGS, '(finite-sample slack)",\n        keys=(FIT, JOINT))',
             '(finite-sample slack)",\n        keys=(JOINT,))'),),
           (KEYS, "-k", "keys_it_affects")),
    Mutant("fit-key-without-challenger-margin", "challenger_margin left out of the fit key",
           ((SETTINGS, 'held-out MAE is this fraction lower",\n        keys=(FIT, JOINT))',
             'held-out MAE is this fraction lower",\n        keys=(JOINT,))'),),
           (KEYS, "-k", "keys_it_affects")),
    Mutant("fit-key-without-challenger-days", "challenger_min_days left out of the fit key",
           ((SETTINGS, '"at most one champion change per this many days",\n' + " " * 47 + "keys=(FIT, JOINT))",
             '"at most one champion change per this many days",\n' + " " * 47 + "keys=(JOINT,))"),),
           (KEYS, "-k", "keys_it_affects")),
    Mutant("frontier-selfcheck-never-remeasured", "the stored frontier self-check reused however much the data grew",
           (("sparseeval/publish/selfcheck_reuse.py", "        if not 0 <= grown < SELFCHECK_NEW_SHARE:",
             "        if grown < 0:"),),
           ("tests/test_refresh_policy.py", "-k", "frontier_selfcheck")),
    Mutant("fit-skips-frontier-selfcheck", "sparseeval fit saves a predictor without the frontier self-check "
                                           "(nothing says it misses the stronger models silently)",
           (("sparseeval/interfaces/commands/fit.py", "frontier_quantile=cut, probe=probe)",
             "frontier_quantile=None, probe=probe)"),),
           ("tests/test_frontier.py", "-k", "warns_above_the_cut")),
    Mutant("failed-cut-warns-below", "predict warns below the score where the self-check failed instead of above it",
           (("sparseeval/estimate/predicting.py", "guarded[c.scored_by].pred[i] > c.cut]",
             "guarded[c.scored_by].pred[i] < c.cut]"),),
           ("tests/test_frontier.py", "-k", "warns_above_the_cut")),
    Mutant("missing-table-narrow-between-grid", "a missing-anchor count between two calibrated grid counts takes "
                                                "the smaller count's width (too narrow) instead of the larger's",
           (("sparseeval/estimate/calibrate.py", "    at = np.searchsorted(grid, np.arange(grid[-1] + 1))",
             "    at = np.searchsorted(grid, np.arange(grid[-1] + 1), side=\"right\") - 1"),),
           ("tests/test_artifact.py", "-k", "grid")),
    Mutant("lift-dropped-at-predict-time", "a predictor's stored lift at the top of the training range ignored "
                                           "when it scores (calibrated with it, predicting without it)",
           (("sparseeval/estimate/frontier.py",
             "    pred = cal.predict_calibrated(est, cal.conditional_impute(X, ood) if imputed is None else imputed, "
             "calibration)",
             "    pred = est.predict(cal.conditional_impute(X, ood) if imputed is None else imputed)"),),
           ("tests/test_beyond.py", "-k", "real_leaderboard")),
    Mutant("ceiling-cap-a-quarter", "the ceiling-breaking swaps capped at a quarter of K again (real winogrande "
                                    "data ran out of swaps with 9.8 % of the models at the ceiling)",
           (("sparseeval/estimate/methods/sparseeval_method.py",
             "headroom=k // 2 if headroom is None", "headroom=k // 4 if "
             "headroom is None"),),
           ("tests/test_sparseeval_method.py", "-k", "break_ceiling")),
    Mutant("ceiling-warning-silent", "fit says nothing when every-anchor-right is too common to flag",
           (("sparseeval/estimate/frontier.py",
             '    if not guard or guard.get("all_right_frac", 0.0) <= EDGE_STATE_MAX:',
             '    if not guard or guard.get("all_right_frac", 0.0) <= 1.0:'),),
           ("tests/test_frontier.py", "-k", "too_common")),
    Mutant("silent-counts-flagged-misses", "a miss outside the interval counted as silent even when the model "
                                           "was flagged (the frontier check would refuse honest predictors)",
           (("sparseeval/estimate/frontier.py", "silent_misses=float((~inside & ~flagged).mean())",
             "silent_misses=float((~inside).mean())"),),
           (FRONTIER, "-k", "silent_only")),
    Mutant("all-right-needs-every-answer", "a sheet with an anchor left unanswered and every other anchor right "
                                           "not flagged as all right",
           (("sparseeval/estimate/frontier.py", "    all_right = np.all(~answered | (X >= 1.0), axis=1) & some",
             "    all_right = np.all(X >= 1.0, axis=1) & some"),),
           (FRONTIER, "-k", "each_reason")),
    Mutant("weaker-never-flagged", "a model predicted below every training model carries no flag",
           (("sparseeval/estimate/frontier.py", '            elif pred[i] < guard["score_min"]:',
             '            elif pred[i] < guard["score_min"] - 1.0:'),),
           (FRONTIER, "-k", "each_reason")),
    Mutant("all-right-flagged-however-common", "every-anchor-right flagged even when ordinary training models "
                                               "answer so (flags on models like those it learned from)",
           (("sparseeval/estimate/frontier.py",
             '            if all_right[i] and guard["all_right_frac"] <= EDGE_STATE_MAX:',
             "            if all_right[i]:"),),
           (FRONTIER, "-k", "each_reason")),
    Mutant("frontier-cut-ties-to-test", "models scored exactly at the frontier cut put on the test side",
           (("sparseeval/estimate/splits.py", "    return cut, scores > cut", "    return cut, scores >= cut"),),
           (FRONTIER, "-k", "tied_at_the_cut")),
    Mutant("selfcheck-sees-held-out-models", "the pipeline's frontier self-check measured on every model, the "
                                             "candidate's held-out test models included",
           (("sparseeval/publish/refresh_policy.py",
             "            rows = np.concatenate([self.split.train, self.split.val])",
             "            rows = np.arange(len(self.matrix.models))"),),
           ("tests/test_refresh_policy.py", "-k", "frontier_selfcheck")),
    Mutant("joint-selfcheck-sees-held-out-models", "the joint predictor's frontier self-check measured on every "
                                                   "model, the joint split's held-out models included",
           (("sparseeval/publish/refresh_joint.py", "joint_frontier_selfcheck(data, fitting, k,",
             "joint_frontier_selfcheck(data, np.arange(len(data.models)), k,"),),
           (JOINT_FRONTIER, "-k", "gates")),
    Mutant("joint-gates-only-the-mean", "the joint predictor's frontier check sees its mean output only",
           (("sparseeval/publish/refresh_joint.py",
             "known_items=set(data.columns), frontier=selfcheck.gated())",
             "known_items=set(data.columns), frontier={MEAN: selfcheck.outputs[MEAN]})"),),
           (JOINT_FRONTIER, "-k", "gates")),
    Mutant("joint-selfcheck-cut-on-one-benchmark", "the joint self-check cut on its first benchmark's score, "
                                                   "not the mean score",
           (("sparseeval/estimate/evaluation.py", "_joint_beyond_cut(sub, sub.S.mean(axis=1), MEAN,",
             "_joint_beyond_cut(sub, sub.S[:, 0], MEAN,"),),
           (JOINT_FRONTIER, "-k", "cuts_on_the_mean")),
    Mutant("joint-own-cut-on-the-mean", "the joint self-check's own-score cut made on the mean score again "
                                        "(a newcomer stronger on one benchmark only is never above it)",
           (("sparseeval/estimate/evaluation.py", "_joint_beyond_cut(sub, sub.S[:, j], b, [b],",
             "_joint_beyond_cut(sub, sub.S.mean(axis=1), b, [b],"),),
           (JOINT_FRONTIER, "-k", "own_cut")),
    Mutant("joint-own-cut-not-gated", "the joint predictor's own-score cuts measured and stored but not gated",
           (("sparseeval/estimate/selfcheck.py",
             "return {**self.outputs, **{own_cut_label(b): f for b, f in self.own_cut.items()}}",
             "return {**self.outputs}"),),
           (JOINT_FRONTIER, "-k", "gates")),
    Mutant("joint-own-cut-sees-held-out-models", "the joint predictor's own-score cuts measured on every model, the "
                                                 "joint split's held-out models included",
           (("sparseeval/publish/refresh_joint.py", "joint_own_cut_selfcheck(data, fitting, k,",
             "joint_own_cut_selfcheck(data, np.arange(len(data.models)), k,"),),
           (JOINT_FRONTIER, "-k", "gates")),
    Mutant("joint-mean-flags-not-carried", "predict (and next, through the same first stage) flags a joint "
                                           "predictor's benchmark outputs on their own only: a model stronger than "
                                           "every training model on the mean goes unflagged on a benchmark whose own "
                                           "prediction stays in range",
           (("sparseeval/estimate/predicting.py",
             "    return carry_overall(guarded, MEAN) if artifact.is_joint else guarded",
             "    return guarded"),),
           (JOINT_FRONTIER, "-k", "gates")),
    Mutant("joint-top-keeps-closed-side", "a benchmark output at the top of its own range keeps its conformal "
                                          "upper side where the mean says stronger than every training model",
           (("sparseeval/estimate/frontier.py", "        why = [own if opens_upward(own) else own",
             "        why = [own if direction(own) > 0 else own"),),
           (JOINT_FRONTIER, "-k", "carried")),
    Mutant("joint-note-never-said", "predict counts a joint predictor's flagged predictions under the predictor's "
                                    "own name, so no output's note is printed",
           (("sparseeval/interfaces/commands/predict.py",
             "upward = Counter(p.benchmark for p in preds", "upward = Counter(art.benchmark for p in preds"),),
           (JOINT_FRONTIER, "-k", "gates")),
    Mutant("lift-error-model-inverted", "the lift's error model fitted the wrong way round (score given the "
                                        "prediction instead of the prediction given the score)",
           (("sparseeval/estimate/beyond.py", "    b, a = np.polyfit(s_cal, pred_cal, 1)",
             "    b, a = np.polyfit(pred_cal, s_cal, 1)"),),
           (BEYOND, "-k", "error_model")),
    Mutant("lift-not-frozen-above-top", "the lift keeps growing with predictions above the best training score",
           (("sparseeval/estimate/beyond.py", '    at = np.minimum(flat, beyond["top"])', "    at = flat"),),
           (BEYOND, "-k", "inside_the_range")),
    Mutant("upper-side-not-opened-at-predict", "predict gives a flagged stronger model its conformal upper side",
           (("sparseeval/estimate/frontier.py",
             "    return Guarded(pred, half, lower, open_upward(upper, why), d2, why)",
             "    return Guarded(pred, half, lower, upper, d2, why)"),),
           (FRONTIER, "-k", "opens_the_upper_side")),
    Mutant("at-top-from-the-wrong-tail", "'at the top of the training range' measured from the bottom of the "
                                         "calibration predictions",
           (("sparseeval/estimate/calibrate.py", '"top_prediction": float(np.quantile(pred_cal, 1.0 - edge_frac)),',
             '"top_prediction": float(np.quantile(pred_cal, edge_frac)),'),),
           (FRONTIER, "-k", "saturating")),
    Mutant("stronger-below-the-best", "'stronger than every training model' said of models below the best one",
           (("sparseeval/estimate/calibrate.py", '"score_min": float(s.min()), "score_max": float(s.max()),',
             '"score_min": float(s.min()), "score_max": float(np.quantile(s, 0.95)),'),),
           ("tests/test_scoring.py", "-k", "held_out_coverage_and_accuracy")),
    Mutant("frontier-bar-ignored", "the frontier check compared with a fixed bar, not the frontier_silent_max "
                                   "setting",
           (("sparseeval/publish/refresh.py", "        frontier_check(frontier, frontier_silent_max),",
             "        frontier_check(frontier, FRONTIER_SILENT_MAX),"),),
           (POLICY, "-k", "gates_publication")),
    Mutant("frontier-figures-not-in-mlflow", "the candidate's MLflow run without its frontier metrics",
           (("sparseeval/publish/refresh_policy.py",
             '                         **{f"frontier/{name}": v for name, v in figures.metrics().items()},\n',
             ""),),
           (POLICY, "-k", "gates_publication")),
    Mutant("frontier-figures-not-in-predictor", "the published predictor.json without its frontier figures",
           (("sparseeval/publish/refresh_steps.py",
             "settings=db.training_settings(matrix.benchmark), frontier=self.selfcheck)",
             "settings=db.training_settings(matrix.benchmark))"),),
           (POLICY, "-k", "gates_publication")),
    Mutant("frontier-columns-not-in-duckdb", "the anchor set's frontier_* columns (and so the analysts' view) "
                                             "left empty",
           (("sparseeval/publish/refresh_steps.py", "            **selfcheck.figures.store_columns())",
             "            )"),),
           (POLICY, "-k", "gates_publication")),
    Mutant("frontier-quantile-not-passed", "SPARSEEVAL_FRONTIER_QUANTILE read but the self-check cut at 0.9 "
                                           "whatever it says",
           (("sparseeval/publish/refresh_policy.py",
             "s.method, self.k, s.seed, quantile=s.frontier_quantile, alpha=s.alpha,",
             "s.method, self.k, s.seed, quantile=0.9, alpha=s.alpha,"),),
           (POLICY, "-k", "gates_publication")),
    Mutant("selfcheck-note-counts-nothing", "predict's note on a flagged stronger model never shown (it counts the "
                                            "models flagged weaker)",
           (("sparseeval/interfaces/commands/predict.py",
             "for p in preds if p.beyond > 0)", "for p in preds if p.beyond < 0)"),),
           (FRONTIER, "-k", "how_far_off")),
    Mutant("comparison-key-without-budget", "the comparison budget left out of the comparison key",
           (("sparseeval/core/settings.py", 'keys=(COMPARISON,), key_name="budget_s")', 'key_name="budget_s")'),),
           (KEYS, "-k", "keys_it_affects")),
    Mutant("comparison-staleness-ignored", "the due check takes any earlier comparison for one under these settings",
           (("sparseeval/publish/comparison.py",
             "                 if c.run_key == comparison_key(c.data_version, wanted)), None)",
             "                 if c.data_version), None)"),),
           (KEYS, "-k", "sensor")),
    Mutant("sensor-asks-with-joint-settings", "the stale-benchmarks sensor keys its question with the joint settings",
           (("pipelines/automation.py",
             "        stale = stale_benchmarks(db, settings.settings().key_settings(FIT))\n"
             "        benchmarks = db.benchmarks()",
             "        stale = stale_benchmarks(db, settings.settings().key_settings(\"joint\"))\n"
             "        benchmarks = db.benchmarks()"),),
           (KEYS, "-k", "sensor")),
    Mutant("mmlu-pro-by-prefix", "a task mapped to mmlu_pro by the prefix of its name",
           (("sparseeval/data/tasks.py", "    name = task.strip()\n",
             "    name = task.strip()\n    if name.startswith(\"mmlu_pro\"):\n"
             "        return \"mmlu_pro\", name.removeprefix(\"mmlu_pro\").lstrip(\"_\") or None\n"),),
           ("tests/test_tasks.py",)),
    Mutant("hub-revision-check-removed", "every Hub repo fetched again, whatever its commit",
           (("sparseeval/data/access/hub_sources.py",
             "                if f.sha != self.store.hub_sha(repo, source.revision, self.wanted_key):",
             "                if True:"),),
           ("tests/test_hub_sources.py::test_incremental_refresh_fetches_only_new_files_and_unchanged_costs_one_call",)),
    Mutant("already-ingested-check-removed", "a unit whose bytes are already stored ingested again",
           (("sparseeval/data/store/ingest.py", "                if seen.height:\n", "                if False:\n"),
            ("sparseeval/data/store/ingest.py", "                if dup:  # stored by another process since we looked",
             "                if False:")),
           ("tests/test_store.py::test_ingest_small_folder_counts_and_reingest_is_skipped",
            "tests/test_store.py::test_same_rows_in_another_file_change_nothing")),
    Mutant("published-folder-raw-name", "the published folder named by the raw benchmark name, not its encoding",
           (("sparseeval/publish/publishing.py", "    return Path(predictor_dir) / slug(benchmark)\n",
             "    return Path(predictor_dir) / benchmark\n"),),
           ("tests/test_names.py", "-m", "not slow")),
    Mutant("db-folder-wrong-reason", "the --db folder refusal reworded into a wrong reason",
           (("sparseeval/interfaces/commands/arguments.py", 'f"{text}: a folder, not a DuckDB store file"',
             'f"{text}: locked by another writer"'),),
           ("tests/test_cli_errors.py", "-k", "db and directory")),
    # the probe (fit --probe)
    Mutant("probe-asks-everyone", "every model answers the probe and is estimated by it, ordinary ones too (the "
           "anchors' better in-distribution estimate lost where they see well)",
           (("sparseeval/estimate/predicting.py",
             "    asked = routed(plan, g.pred, np.array([direction(r) > 0 for r in g.reasons], dtype=bool))",
             "    asked = np.ones(len(models), dtype=bool)"),),
           (PROBE, "-k", "keeps_the_anchors_estimate_exactly")),
    Mutant("probe-upward-flags-not-asked", "a model the guard flags as possibly above the training range is not "
           "asked the probe when its prediction is below the level",
           (("sparseeval/estimate/probe.py",
             "    return (np.asarray(predicted) >= plan.level) | np.asarray(upward, dtype=bool)",
             "    return np.asarray(predicted) >= plan.level"),),
           (PROBE, "-k", "the_level_asks")),
    Mutant("probe-level-by-share-only", "the probe's level set by share alone: a benchmark whose anchors cannot "
           "tell the strongest from a cluster below them (mmlu) leaves those stronger models to the anchors",
           (("sparseeval/estimate/probe_fit.py",
             "    return max(min(by_share, catch), float(np.quantile(pred_cal, 1 - MOST_ASKED)))",
             "    return by_share"),),
           (PROBE, "-k", "the_level_asks")),
    Mutant("probe-correction-dropped", "the probe's estimate is its control alone: the anchors' level dressed "
           "as a design-based estimate (biased exactly where the anchors are)",
           (("sparseeval/estimate/probe.py", "        mean_u += w * (p_hat[members].mean() + resid.mean())",
             "        mean_u += w * p_hat[members].mean()"),),
           (PROBE, "-k", "unbiased")),
    Mutant("probe-control-ignores-anchors", "the control stays at the training pass rates whatever the anchors "
           "said (still unbiased, but wider where the model is far from the training average)",
           (("sparseeval/estimate/probe.py",
             "    d = _shift(pool, float(plan.link.pool_mean(anchors_predicted, anchor_answers)))",
             "    d = 0.0"),),
           (PROBE, "-k", "unbiased")),
    Mutant("probe-no-finite-population-correction", "the probe's variance ignores that it sampled part of a "
           "finite pool (a model that answered every item still gets a sampling error)",
           (("sparseeval/estimate/probe.py", "        var_u += w * w * (1 - taken.size / size) * s2 / taken.size",
             "        var_u += w * w * s2 / taken.size"),),
           (PROBE, "-k", "whole_pool")),
    Mutant("probe-variance-floor-dropped", "a 0/1 probe whose first batch happens to agree gets a narrow interval "
           "and stops early (sequential stopping on a lucky variance)",
           (("sparseeval/estimate/probe.py", "        if plan.binary:\n", "        if False:\n"),),
           (PROBE, "-k", "lucky")),
    Mutant("probe-draw-shared-by-every-model", "one draw for every model (the lottery the issue measured: its bias "
           "shared by all of them)",
           (("sparseeval/estimate/probe.py", "        keys = [_key(plan.salt, model, plan.items[j]) for j in members]",
             "        keys = [_key(plan.salt, '', plan.items[j]) for j in members]"),),
           (PROBE, "-k", "own_stratified")),
    Mutant("probe-draw-unstratified", "the draw takes the strata one after the other: a first batch of the "
           "hardest items only",
           (("sparseeval/estimate/probe.py",
             "    out = [q[r] for r in range(max(map(len, queues))) for q in queues if r < len(q)]",
             "    out = [j for q in queues for j in q]"),),
           (PROBE, "-k", "own_stratified")),
    Mutant("probe-gaps-unbounded", "answers after any number of gaps in a model's draw still count: a model "
           "that left out its wrong answers looks stronger",
           (("sparseeval/estimate/probe.py",
             "    ok = done & (gaps <= np.ceil(GAP_SHARE * length))", "    ok = done"),),
           (PROBE, "-k", "out_of_the_draws_order")),
    Mutant("lm-eval-task-drops-probe", "lm-eval's estimate ignores the probe items the exported task ran",
           (("sparseeval/interfaces/lm_eval_anchor_task.py",
             "        items = exported_items(art) if plan is None else exported_items(art, probe_for=probe_for,",
             "        items = exported_items(art) if True else exported_items(art, probe_for=probe_for,"),),
           ("tests/test_lm_eval_probe.py",)),
    Mutant("export-probe-another-draw", "`export --probe-for MODEL` writes a draw that is not the one next and "
           "predict use for that model",
           (("sparseeval/interfaces/export.py",
             "draw_order(plan, model)[:count]", "draw_order(plan, model + ' ')[:count]"),),
           (PROBE, "-k", "as_next_asks")),
    Mutant("next-done-before-probe", "`next` calls a model at the top done when its anchors are (its probe never "
           "named)",
           (("sparseeval/interfaces/commands/next.py", "probes=states if probe is not None else None", "probes=None"),),
           (PROBE, "-k", "as_next_asks")),
    Mutant("refresh-drops-probe", "the refresh publishes its predictors without the probe plan its self-check "
           "was measured with",
           (("sparseeval/estimate/fitting.py",
             '        art.extra["probe"] = probe_plan(art, matrix, split, probe, seed=seed, alpha=alpha)',
             "        probe_plan(art, matrix, split, probe, seed=seed, alpha=alpha)"),),
           (PROBE_REFRESH, "-k", "publishes_mmlu")),
    Mutant("refresh-selfcheck-ignores-probe", "the refresh's frontier check is measured from the anchors alone "
           "although its predictors carry a probe",
           (("sparseeval/publish/refresh_policy.py", "device=s.device, probe=probe)))",
             "device=s.device, probe=None)))"),),
           (PROBE_REFRESH, "-k", "publishes_mmlu")),
    Mutant("probe-fallback-keeps-probe-figures", "a candidate whose probe could not be fitted is gated on the "
           "figures of a probe it does not carry",
           (("sparseeval/estimate/selfcheck.py",
             "        return replace(self, **alone.to_json(), probe_items=None, probe_target=None, "
             "anchors_alone=None,\n                       probe_note=why)",
             "        return replace(self, probe_note=why)"),),
           (PROBE_REFRESH, "-k", "falls_back")),
    Mutant("raised-bar-hides-failed-cut", "a frontier bar raised to publish a failing predictor knowingly also "
           "drops predict's 'may be too low' warning above the cut it failed",
           (("sparseeval/estimate/predicting.py",
             'min(defaults.SETTINGS["frontier_silent_max"].value(), DEFAULT_SILENT_MAX)',
             'defaults.SETTINGS["frontier_silent_max"].value()'),),
           (f"{FRONTIER}::test_fit_runs_the_frontier_selfcheck_and_predict_warns_above_the_cut_it_failed",)),
    Mutant("refusal-without-override", "a candidate refused by its frontier check does not say how to publish it "
           "knowingly",
           (("sparseeval/publish/refresh.py",
             '                                    **({"to_publish_anyway": FRONTIER_OVERRIDE} '
             'if silent else {}),\n', ""),),
           (PROBE_REFRESH,)),
    Mutant("store-newcomers-ignore-probe", "a champion with a probe scores the store's newcomers from their anchors "
           "alone, though they ran their probe's items too",
           (("sparseeval/publish/publishing.py", "[*artifact.anchor_item_ids, *(plan.items if plan else ())]",
             "artifact.anchor_item_ids"),),
           (PROBE_REFRESH, "-k", "newcomers")),
    Mutant("prediction-stage-not-stored", "DuckDB's predictions keep a probe's number but say the anchors gave it",
           (("sparseeval/data/store/results.py", 'r.get("stage") or "anchors"', '"anchors"'),),
           (PROBE_REFRESH, "-k", "newcomers")),
    Mutant("compare-probes-paired-as-anchors", "compare gives two probed models the anchors' paired interval, as "
           "if their independent draws shared an error",
           (("sparseeval/estimate/predicting.py", "    if STAGE_PROBE in (pa.stage, pb.stage):", "    if False:"),),
           (PROBE, "-k", "quadrature")),
    Mutant("probe-line-error-dropped", "a subset pool's interval leaves out its line's error (the part of the "
           "estimate that is a model, not a design)",
           (("sparseeval/estimate/probe.py",
             "    half = float(np.hypot(design, link.residual))", "    half = float(design)"),),
           (PROBE, "-k", "subset_pool")),
    Mutant("prediction-warnings-not-stored", "DuckDB's predictions keep the number but drop what predict warns "
           "under it",
           (("sparseeval/data/store/results.py", "[bool(r.get(\"ood\") or False), _reason(r), _warnings(r),",
             "[bool(r.get(\"ood\") or False), _reason(r), None,"),),
           (PROBE_REFRESH, "-k", "newcomers")),
    Mutant("short-newcomer-stops-scoring", "one newcomer that ran too few anchors stops every newcomer of its "
           "benchmark from being scored (the publish step fails after publishing)",
           (("sparseeval/publish/publishing.py", "    from sparseeval.estimate.predicting import predict_scorable\n",
             "    from sparseeval.estimate.predicting import predict\n"),
            ("sparseeval/publish/publishing.py",
             "predictions, skipped = predict_scorable(artifact, answers) if answers.height",
             "predictions, skipped = (predict(artifact, answers), {}) if answers.height")),
           ("tests/test_pipeline.py", "-k", "predictions_asset")),
    Mutant("mlp-last-bias-dropped", "the NumPy forward pass (predict, and the light install's) drops the MLP's "
                                    "last-layer bias (0 in some fits, up to 0.02 logit in published ones)",
           (("sparseeval/estimate/methods/inference.py",
             '        h = np.matmul(h, weights[f"weights.{i}"]) + weights[f"biases.{i}"]',
             '        h = np.matmul(h, weights[f"weights.{i}"]) + '
             '(weights[f"biases.{i}"] if i < n_layers - 1 else 0)'),),
           ("tests/test_torch_free.py", "-k", "numpy_mlp or version_1")),
    # the served mode
    Mutant("port-probe-without-reuseaddr", "the free-port probe binds without SO_REUSEADDR (TIME_WAIT counts as used)",
           (("sparseeval/interfaces/serve/bootstrap.py",
             "    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n", ""),),
           (SERVE,)),
    Mutant("leftovers-not-found", "the sweep finds no process left by a killed service (the orphaned uvicorn)",
           (("sparseeval/interfaces/serve/supervisor.py",
             "        if wanted & set(environ.split(b\"\\0\")) and alive(int(proc.name)):", "        if False:"),),
           (SERVE,)),
    Mutant("code-server-stopped-with-runs", "supervisord stops the code server with its process group (its runs)",
           (("sparseeval/interfaces/serve/supervisor.py", 'group = "false" if name == "code_server" else "true"',
             'group = "true"'),),
           (SERVE,)),
    Mutant("compose-port-on-all-interfaces", "docker-compose publishes the Dagster UI on every interface",
           (("docs/deploy/docker-compose.yml", '      - "127.0.0.1:3000:3000"', '      - "3000:3000"'),),
           ("tests/test_deploy_config.py", "-k", "compose")),
)


@contextmanager
def scratch_copy() -> Iterator[Path]:
    """The working tree's files (tracked, or untracked and not ignored) copied into a temporary folder,
    with ``../shared`` linked beside the copy as it is beside the repository; removed on the way out."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    top = Path(tempfile.mkdtemp(prefix="sparseeval-mutants-"))
    try:
        copy = top / "repo"
        for rel in filter(None, listed):
            src = REPO / rel
            if src.is_file():
                (copy / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, copy / rel)
        if (REPO.parent / "shared").exists():
            (top / "shared").symlink_to(REPO.parent / "shared")
        yield copy
    finally:
        shutil.rmtree(top, ignore_errors=True)


@contextmanager
def applied(copy: Path, mutant: Mutant) -> Iterator[None]:
    """``mutant``'s edits in the copy, undone on the way out (the next mutant starts from the original)."""
    originals: dict[Path, str] = {}
    try:
        for rel, old, new in mutant.edits:
            path = copy / rel
            text = path.read_text()
            originals.setdefault(path, text)
            found = text.count(old)
            if found != 1:
                raise SystemExit(f"mutant {mutant.name}: {rel} holds its text {found} times, not once: update "
                                 f"bench/mutants.py to the code")
            path.write_text(text.replace(old, new))
        yield
    finally:
        for path, text in originals.items():
            path.write_text(text)


def _env(copy: Path) -> dict[str, str]:
    """The copy's code first on the path (and ``bench/``, so pytest can load this file as its plugin),
    no bytecode written (a mutated file is never read from a cache)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), str(copy / "bench")]),
           "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


# --- the plugin half: runs inside the mutant's pytest (``-p mutants``) --------------------------------

def _failure(item: Any, call: Any) -> dict[str, Any]:
    """What failed in one test phase: ``assertion`` when the exception is an assertion failure whose
    innermost frame inside the repository is a test file's, ``crash`` otherwise; and that frame's
    line (where the test stopped)."""
    import pytest

    root = Path(str(item.config.rootpath)).resolve()
    excinfo = call.excinfo
    inside = []
    for entry in excinfo.traceback:
        path = Path(str(entry.path)).resolve()
        if path.is_relative_to(root) and ".venv" not in path.relative_to(root).parts:
            inside.append((path.relative_to(root), entry))
    where, line = "?", ""
    if inside:
        rel, entry = inside[-1]
        where = f"{rel}:{entry.lineno + 1}"
        try:
            line = str(entry.statement).strip().splitlines()[0]
        except Exception:  # the source is only printed: a frame without it still counts
            line = ""
    asserted = excinfo.errisinstance((AssertionError, pytest.fail.Exception))
    by_a_test = bool(inside) and inside[-1][0].parts[0] == "tests"
    message = str(excinfo.value).strip().splitlines()
    return {"test": item.nodeid, "phase": call.when, "kind": "assertion" if asserted and by_a_test else "crash",
            "exception": excinfo.typename, "where": where, "line": line,
            "message": message[0][:200] if message else ""}


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--mutant-verdicts", metavar="PATH", help="append one JSON line per failing test phase here")


def pytest_runtest_makereport(item: Any, call: Any) -> None:
    """Record every failing test phase in the ``--mutant-verdicts`` file, and stop the session at the
    first assertion failure (the mutant is caught; a crash lets the next test try)."""
    import pytest

    out = item.config.getoption("mutant_verdicts")
    if not out or call.excinfo is None or call.excinfo.errisinstance(pytest.skip.Exception):
        return
    if item.get_closest_marker("xfail"):
        return
    failure = _failure(item, call)
    with open(out, "a") as f:
        f.write(json.dumps(failure) + "\n")
    if failure["kind"] == "assertion":
        item.session.shouldfail = "a mutant caught by an assertion"  # what -x sets


# --- the driver -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    """One pytest run in the copy: its exit status (None on timeout), seconds, output tail and the
    failures the plugin recorded."""

    code: int | None
    seconds: float
    out: str
    failures: tuple[dict[str, Any], ...]

    @property
    def caught_by(self) -> dict[str, Any] | None:
        """The first failure on an assertion by a test, if any."""
        return next((f for f in self.failures if f["kind"] == "assertion"), None)

    @property
    def verdict(self) -> str:
        if self.code is None:
            return "TIMEOUT"
        if self.caught_by is not None:
            return "caught"
        if self.code == 0:
            return "NOT CAUGHT"
        if self.code == 1:
            return "CRASHED"  # tests failed, none on an assertion: the code crashed before any was reached
        return f"ERROR {self.code}"


def run_tests(copy: Path, args: tuple[str, ...] | list[str], timeout: float) -> Outcome:
    """pytest in the copy, with this file as its plugin; the run's :class:`Outcome`."""
    env = _env(copy)
    verdicts = copy.parent / "verdicts.jsonl"
    verdicts.unlink(missing_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "mutants", f"--mutant-verdicts={verdicts}", "-q",
                             "-p", "no:cacheprovider", *args],
                            cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    failures = tuple(json.loads(line) for line in verdicts.read_text().splitlines()) if verdicts.is_file() else ()
    return Outcome(code, time.perf_counter() - t0, out[-2000:], failures)


def _imports_the_copy(copy: Path) -> None:
    where = subprocess.run([sys.executable, "-c", "import sparseeval, pipelines; print(sparseeval.__file__); "
                            "print(pipelines.__file__)"], cwd=copy, env=_env(copy), capture_output=True, text=True,
                           check=True).stdout.split()
    if not all(Path(w).resolve().is_relative_to(copy.resolve()) for w in where):
        raise SystemExit(f"the scratch copy's tests would import {where}, not the copy's code")


def baseline(copy: Path, mutants: list[Mutant], timeout: float) -> bool:
    """Every distinct test selection of ``mutants`` on the unmutated copy: a test that fails there
    proves nothing about a mutant. Prints each selection's outcome; True when all pass."""
    ok = True
    for tests in dict.fromkeys(m.tests for m in mutants):
        run = run_tests(copy, tests, timeout)
        print(f"baseline {' '.join(tests):<56} {'pass' if run.code == 0 else 'FAIL'} {run.seconds:6.1f} s", flush=True)
        if run.code != 0:
            print(run.out)
            ok = False
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="run this mutant (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the mutants and their tests, run nothing")
    ap.add_argument("--timeout", type=float, default=300, help="seconds a mutant's tests may take")
    ap.add_argument("--no-baseline", action="store_true", help="skip the run on the unmutated copy")
    args = ap.parse_args(argv)
    unknown = set(args.only) - {m.name for m in MUTANTS}
    if unknown:
        ap.error(f"unknown mutant(s): {', '.join(sorted(unknown))}")
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    if args.list:
        for m in chosen:
            print(f"{m.name:<36} {m.what}\n{'':<36} tests: {' '.join(m.tests)}")
        return 0
    # SIGTERM and SIGHUP unwind like Ctrl-C: the scratch copy is removed, the working tree never touched
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.default_int_handler)
    with scratch_copy() as copy:
        _imports_the_copy(copy)
        if not args.no_baseline and not baseline(copy, chosen, args.timeout):
            return 2
        print(f"\n{'mutant':<36} {'result':<12} {'seconds':>7}  the test that failed (or the tests run)")
        missed = 0
        for m in chosen:
            with applied(copy, m):
                run = run_tests(copy, m.tests, args.timeout)
            result = run.verdict
            missed += result != "caught"
            first = run.caught_by or (run.failures[0] if run.failures else None)
            print(f"{m.name:<36} {result:<12} {run.seconds:7.1f}  {first['test'] if first else ' '.join(m.tests)}",
                  flush=True)
            if first is not None:  # the line the test stopped at: an assertion, or where the code crashed
                print(f"{'':<36} {first['exception']} at {first['where']}: {first['line']}", flush=True)
            if result.startswith("ERROR"):
                print(run.out)
    print(f"\n{len(chosen) - missed} of {len(chosen)} mutants caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
