"""``sparseeval fit``: fit, calibrate and publish a predictor for one benchmark (or, with
``--method sparseeval-joint --benchmark b1,b2,...``, one predictor for several, K anchors per benchmark).

Models of ``--data`` are split once with ``--seed``: ``--calibration-frac`` held out for the
conformal intervals and the OOD threshold, the rest fits the method. The predictor folder
(``predictor.json`` + ``state.safetensors``) goes to ``--out`` (default ``<registry>/<benchmark>``, where
``predict --benchmark`` finds it).
"""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path
from typing import Any

import polars as pl

from sparseeval.core import setting_kinds, settings
from sparseeval.core.errors import UsageError
from sparseeval.data.access.sources import open_data
from sparseeval.data.benchmarks import DEFAULT_SETTINGS, canonical_benchmark, default_n_shot, same_metric
from sparseeval.data.readers.base import InputError
from sparseeval.estimate.fitting import ProbeSettings, fit_joint_predictor, fit_predictor
from sparseeval.estimate.frontier import ceiling_note
from sparseeval.estimate.methods.joint import JOINT_METHOD
from sparseeval.estimate.probe import ProbePlan, plan_of
from sparseeval.estimate.selfcheck import SelfCheck
from sparseeval.interfaces.commands.arguments import (
    add_benchmark_argument,
    add_setting_arguments,
    check_k_below_items,
    existing_path,
    open_fraction,
    setting_flags,
    settings_epilog,
    settings_from,
)
from sparseeval.interfaces.commands.export import RUN_DIR
from sparseeval.interfaces.progress import progress_bar
from sparseeval.publish.publishing import is_managed, published_path

DESCRIPTION = f"""\
Fit, calibrate and save a predictor: K anchor items of a benchmark, chosen on item-level results of
many models, and the model that predicts the full score from a new model's answers to them.

--data holds the results (a long table, lm-eval output folders, lighteval or leaderboard details).
Its models are split once with --seed: --calibration-frac of them are held out for the 90% intervals
and the out-of-distribution threshold, the rest fit the method. With --method {JOINT_METHOD} and
several benchmarks, one predictor covers them all (K anchors per benchmark). The predictor folder
goes to --out (default <registry>/<benchmark>, where `predict --benchmark` finds it); fit prints the
command that exports it for lm-eval. Needs the [fit] extra: pip install 'sparseeval[fit]'.

example:
  sparseeval fit --data results/ --benchmark arc -k 20 --out predictors/arc"""


def training_settings(benchmark: str, recorded: dict[str, Any]) -> dict[str, Any]:
    """The settings a predictor records for its training data: what the data recorded, else what the
    benchmark's plain name stands for (``arc``: the leaderboard's 25-shot acc_norm), marked as such, so
    ``export`` runs the anchors the way the data was run and ``predict`` can check answers against it."""
    if recorded.get("n_shot") is not None or recorded.get("metric") or benchmark not in DEFAULT_SETTINGS:
        return recorded
    from sparseeval.data.readers.lm_eval import PREFERRED_METRICS

    return {**recorded, "n_shot": default_n_shot(benchmark), "metric": PREFERRED_METRICS[benchmark][0],
            "from": "the benchmark's name (the data records no settings)"}


def frontier_quantile(text: str) -> float | str:
    """``--frontier-quantile``: a cut in [0.5, 1), or ``off`` (no self-check)."""
    if text.strip().lower() == "off":
        return "off"
    try:
        return setting_kinds.cut_quantile(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a quantile in [0.5, 1) or 'off', got {text!r}") from None


def check_one_metric(benchmark: str, metrics: dict[str | None, int], data: Path) -> None:
    """A predictor learns one score: training runs scored by different metrics (the metric is settings
    data, not part of the benchmark's name) are refused, naming them, rather than pooled."""
    distinct: list[str] = []
    for m in (m for m in metrics if m is not None):
        if not any(same_metric(benchmark, m, d) for d in distinct):
            distinct.append(m)
    if len(distinct) > 1:
        counts = ", ".join(f"{m} ({metrics[m]} runs)" for m in distinct)
        raise InputError(data, f"benchmark {benchmark!r}: the runs were scored by different metrics ({counts}); "
                               "a predictor learns one score: keep the runs of one metric")


#: the declared settings (:class:`sparseeval.core.settings.RefreshSettings`) fit takes as options
SETTING_OPTIONS = ("k", "method", "alpha", "seed", "device", "frontier_quantile", "probe_items", "probe_from",
                   "probe_batch", "probe_max", "probe_target")
PROBE_OPTIONS = tuple(name for name in SETTING_OPTIONS if name.startswith("probe_"))


def fit_settings(args: argparse.Namespace) -> tuple[settings.RefreshSettings, ProbeSettings | None]:
    """The settings as the options set them, each unset one from its ``$SPARSEEVAL_*`` variable (as the refresh
    reads them), and the probe they ask for: None for ``--probe 0`` and for a joint predictor (which has no
    probe); a probe option without a probe is refused rather than ignored."""
    chosen = settings_from(args, *(n for n in SETTING_OPTIONS if n != "frontier_quantile" or args.frontier_quantile
                                   != "off"))
    joint = chosen.method == JOINT_METHOD
    given = [setting_flags(name)[0] for name in PROBE_OPTIONS if getattr(args, name) is not None]
    if joint and given:
        raise UsageError(f"{given[0]} is for single-benchmark predictors; --method {JOINT_METHOD} has no probe")
    probe = None if joint else ProbeSettings.of(chosen)
    how = [flag for flag in given if flag != setting_flags("probe_items")[0]]
    if probe is None and how:
        raise UsageError(f"{how[-1]} sets how the probe asks: it needs --probe N (N >= 1)")
    return chosen, probe


def frontier_cut(args: argparse.Namespace, chosen: settings.RefreshSettings) -> float | None:
    """Where fit's frontier self-check cuts (None: ``--frontier-quantile off``)."""
    return None if args.frontier_quantile == "off" else chosen.frontier_quantile


def probe_line(plan: ProbePlan) -> str:
    """What ``fit`` says of the probe it fitted."""
    link = ("its items are the whole benchmark" if plan.link.whole else
            f"its items are a subset: a line maps their mean to the score (+-{100 * plan.link.residual:.1f} points "
            "at the top of the calibration models)")
    return (f"probe: asked of predictions >= {100 * plan.level:.1f} (the calibration models' top "
            f"{100 * (1 - plan.level_quantile):g} %), {plan.first_items} items of each model's own draw from "
            f"{len(plan.items)}, then {plan.batch} at a time while the sampling half-width is above "
            f"{100 * plan.target:g} points, up to {plan.cap}; {link}")


def run(args: argparse.Namespace) -> int:
    benches = list(dict.fromkeys(canonical_benchmark(b) for b in args.benchmark))
    chosen, probe = fit_settings(args)
    joint = chosen.method == JOINT_METHOD
    if (len(benches) < 2) if joint else (len(benches) != 1):
        raise UsageError(f"--method {JOINT_METHOD} takes two benchmarks or more (--benchmark arc,mmlu); "
                         "every other method one")
    k, seed, device, alpha, cut = chosen.k, chosen.seed, chosen.device, chosen.alpha, frontier_cut(args, chosen)
    bench = JOINT_METHOD if joint else benches[0]
    out = args.out or published_path(args.registry or settings.predictor_dir(), bench)
    if is_managed(out):  # before the fit: refusing after minutes of work would waste them
        raise UsageError(f"--out {out}: this folder is published by the pipeline (the champion that "
                         f"'predict --benchmark {bench}' and its registry versions serve); writing over it "
                         f"would bypass the publishing checks. Give another folder with --out (e.g. "
                         f"--out {out.parent / (out.name + '-manual')}), or let the pipeline publish")
    with progress_bar("fit", total=3, unit="phase") as tick, open_data(args.data) as data:
        tick(f"read {args.data}")
        t0 = time.perf_counter()
        missing = [b for b in benches if b not in data.benchmarks()]
        if missing:
            raise InputError(args.data, f"no benchmark {', '.join(map(repr, missing))} "
                                        f"(found: {', '.join(data.benchmarks())})")
        for b in benches:
            check_one_metric(b, data.metrics(b), args.data)
        if joint:  # one anchor set for every listed benchmark, K per benchmark
            responses, scores = data.long(None)
            artifact = fit_joint_predictor(
                responses, scores, benches, k, calibration_frac=args.calibration_frac, seed=seed,
                device=device, alpha=alpha, models=data.models(),
                row_mean_is_score=args.row_mean_is_score,
                settings={b: training_settings(b, data.settings(b)) for b in benches},
                frontier_quantile=cut)
        else:
            responses, scores = data.long(bench)
            n_items = responses.lazy().select(pl.col("item_id").n_unique()).collect().item()
            check_k_below_items(k, n_items, bench, args.data)
            artifact = fit_predictor(responses, scores, bench, k, chosen.method,
                                     calibration_frac=args.calibration_frac, seed=seed, device=device,
                                     alpha=alpha, models=data.models(),
                                     row_mean_is_score=args.row_mean_is_score,
                                     settings=training_settings(bench, data.settings(bench)),
                                     frontier_quantile=cut, probe=probe)
        tick(f"selected and calibrated {artifact.k} anchors")
        if args.data_licence:
            artifact.extra["data_licence"] = args.data_licence
        if args.data_source:
            artifact.extra["data_source"] = args.data_source
        saved = artifact.save(out)
        tick(f"saved {out}")
    c = saved.calibration
    print(f"{bench}: {saved.method} with {saved.k} anchors fitted on {saved.train_models['count']} models "
          f"in {time.perf_counter() - t0:.1f}s; calibrated on {c['n_calibration']} held-out models:")
    for name, cal in (c["outputs"] if saved.is_joint else {bench: c}).items():
        print(f"  {name}: MAE {cal['calibration_mae_points']:.2f} points, {100 * (1 - c['alpha']):g}% interval "
              f"mean half-width {cal['mean_halfwidth_points']:.2f} points ({cal['mode']} scale)")
    plan = plan_of(saved.extra)
    if plan is not None:
        print(f"  {probe_line(plan)}")
    elif probe is not None:
        print(f"  warning: {saved.extra.get('probe_note', 'fitted without a probe')}")
    note = ceiling_note(c.get("frontier"))
    if note:
        print(f"  warning: {note}")
    selfcheck = SelfCheck.of_predictor(saved.extra, bench)
    for line in [] if selfcheck is None else selfcheck.lines(settings.SETTINGS["frontier_silent_max"].value()):
        print(f"  {line}")
    print(f"saved {out} ({saved.content_hash})")
    print("next: export its anchors as an lm-eval task (lm-eval then prints the estimate for a new model):")
    print(f"  sparseeval export --predictor {shlex.quote(str(out))} --format lm-eval-task --out sparseeval_tasks")
    if plan is not None:
        print("a model its anchors place at the top then runs its own probe (`sparseeval next` names the items; "
              "`--probe-for MODEL` exports them):")
        print(f"  sparseeval next --predictor {shlex.quote(str(out))} --answers {RUN_DIR} --samples next.json")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("fit", help="fit, calibrate and save a predictor for one benchmark (or a joint one)",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=settings_epilog("method", "k", "seed", "device", "alpha",
                                                         "frontier_quantile", "frontier_silent_max", "probe_items",
                                                         "probe_batch", "probe_max", "probe_target", "probe_from",
                                                         "predictors",
                                                         "data_dir"))
    p.add_argument("--data", type=existing_path, required=True, metavar="PATH",
                   help="results in any supported format (every model is used for fitting or calibration)")
    add_benchmark_argument(p, f"the benchmark (several only with --method {JOINT_METHOD})", required=True)
    add_setting_arguments(p, *SETTING_OPTIONS, types={"frontier_quantile": frontier_quantile}, helps={
        "k": f"number of anchors ({JOINT_METHOD}: per benchmark)",
        "method": "anchor method (see `sparseeval evaluate` to compare them)",
        "seed": "seed of the model split and the fit",
        "frontier_quantile": "the frontier self-check: the method refitted on the fitting models at or below this "
                             "quantile of the score and scored on the stronger rest, as the pipeline's publishing "
                             "check does; its figures print, go into the predictor (model card, predict's notes), "
                             "and a warning says when it misses more than SPARSEEVAL_FRONTIER_SILENT_MAX silently; "
                             "'off' skips it",
        "probe_items": "the second stage: a model the anchors place at the top answers N random items of its own "
                       "probe first (then batches of --probe-batch while its sampling half-width is above "
                       "--probe-target, up to --probe-max), and its estimate and interval come from them by design; "
                       "0: no probe"})
    p.add_argument("--calibration-frac", type=open_fraction, default=settings.DEFAULT_CALIBRATION_FRAC, metavar="F",
                   help="share of the models held out for the intervals and the OOD threshold "
                        f"(default {settings.DEFAULT_CALIBRATION_FRAC})")
    p.add_argument("--row-mean-is-score", action="store_true",
                   help="the items are the whole benchmark: a model without a reported score takes its (complete) "
                        "row mean as its score (never assumed: stored items are often a subset)")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="predictor folder to write (default <registry>/<benchmark>)")
    p.add_argument("--registry", type=Path, default=None, metavar="DIR",
                   help="published predictors folder (" + settings.overrides("predictors")
                        + ", else <data dir>/predictors)")
    p.add_argument("--data-licence", metavar="LICENCE",
                   help="the licence of --data (e.g. CC-BY-NC-SA-4.0), recorded in the predictor and its model card")
    p.add_argument("--data-source", metavar="TEXT",
                   help="where --data comes from (a sentence for the model card)")
    p.set_defaults(func=run)
