"""The planted bugs ``bench/mutants.py`` runs, one at a time: each a small realistic bug written as exact text
replacements in the product's files, with the tests that should catch it.

Kept apart from the runner so the list reads as what it is, a catalogue of the behaviours the tests must
guard; ``tests/test_mutants_current.py`` checks that every entry still plants its bug (its text found once)
and names tests that exist.
"""

from __future__ import annotations

from dataclasses import dataclass


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
           (POLICY, "-k", "how_to_publish_knowingly")),
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
    Mutant("stop-returns-before-supervisord-exits", "serve stop returns while supervisord is still shutting down",
           (("sparseeval/interfaces/serve/cli.py", "            if boot.wait_ended([pid], STOP_WAIT_S):\n"
             "                still_running.append(\"supervisord\")", "            if False:\n"
             "                still_running.append(\"supervisord\")"),),
           (SERVE,)),
    Mutant("compose-port-on-all-interfaces", "docker-compose publishes the Dagster UI on every interface",
           (("docs/deploy/docker-compose.yml", '      - "127.0.0.1:3000:3000"', '      - "3000:3000"'),),
           ("tests/test_deploy_config.py", "-k", "compose")),
)
