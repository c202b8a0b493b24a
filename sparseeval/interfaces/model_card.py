"""The model card (a Hub ``README.md``) of a predictor: what ``sparseeval export --format model-card`` writes.

Everything in it comes from ``predictor.json``: the benchmarks and their anchors (lm-eval task and doc
id), the settings the training data was run with, the training population, the held-out accuracy
(calibration MAE, interval width), the frontier figures when the predictor records them, and the data's
licence. The YAML header is the Hub's model-card metadata (licence, tags, library), so the repo page
shows them; the body says how to use the predictor from the Hub, start to finish.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from sparseeval.estimate.artifact import PredictorArtifact
from sparseeval.estimate.methods.joint import MEAN
from sparseeval.estimate.probe import ProbePlan, plan_of
from sparseeval.estimate.selfcheck import CutFigures, SelfCheck

#: a data licence as the Hub's model-card ``license`` field names it
HUB_LICENCES = {"cc-by-nc-sa-4.0": "cc-by-nc-sa-4.0", "cc by-nc-sa 4.0": "cc-by-nc-sa-4.0",
                "apache-2.0": "apache-2.0", "mit": "mit", "cc-by-4.0": "cc-by-4.0"}


def _settings_line(art: PredictorArtifact, bench: str) -> str:
    from sparseeval.interfaces.lm_eval_tasks import leaf_settings

    s = leaf_settings(art, bench)
    recorded = art.training_settings(bench)
    parts = [f"{s['num_fewshot']}-shot", f"metric `{s['metric']}`" if s["metric"] else "the task's own metric"]
    if s.get("filter"):
        parts.append(f"filter `{s['filter']}`")
    if recorded.get("harness"):
        parts.append(f"{recorded['harness']} {recorded.get('harness_version') or ''}".strip())
    return ", ".join(parts)


def _accuracy_rows(art: PredictorArtifact) -> list[tuple[str, dict[str, Any]]]:
    c = art.calibration
    if art.is_joint:
        return [(name, c["outputs"][name]) for name in [*art.benchmarks, MEAN] if name in c.get("outputs", {})]
    return [(art.benchmark, c)]


def model_card(art: PredictorArtifact, repo: str = "ORG/REPO") -> str:
    """The card's markdown for ``art`` (``repo``: the Hub repo it is published as, for the usage lines)."""
    licence = str(art.extra.get("data_licence") or "").strip()
    hub_licence = HUB_LICENCES.get(licence.lower(), "other")
    level = 100 * (1 - float(art.calibration.get("alpha", 0.1)))
    lines = ["---", f"license: {hub_licence}", "library_name: sparseeval",
             "tags:", "- sparseeval", "- evaluation", "- lm-evaluation-harness",
             *[f"- {b}" for b in art.benchmarks], "---", "",
             f"# sparseeval predictor: {', '.join(art.benchmarks)}", "",
             f"Estimates a language model's full {', '.join(art.benchmarks)} score"
             + (" (each, and their mean)" if art.is_joint else "")
             + f" from its answers to **{art.k} anchor items**, with a {level:g}% conformal interval "
             f"(method `{art.method}`, sparseeval {art.library_version}, content hash `{art.content_hash}`).", "",
             "## Use it", "", "```sh", "pip install sparseeval lm-eval",
             f"sparseeval export --predictor hf://{repo} --format lm-eval-task --out sparseeval_tasks",
             "lm_eval run --model hf --model_args pretrained=YOUR_MODEL --include_path sparseeval_tasks \\",
             f"    --tasks {_task(art)} --log_samples --output_path sparseeval_run   # prints the estimate",
             f"sparseeval predict --predictor hf://{repo} --answers sparseeval_run",
             "```", "",
             f"Pin a version with `hf://{repo}@<commit>`; the download is checked against the content hash above.", "",
             "## Benchmarks, anchors and settings", "",
             "| benchmark | anchors | lm-eval tasks | settings of the training data |", "|---|---|---|---|"]
    for bench in art.benchmarks:
        mine = [a for a in art.anchors if (a.benchmark or art.benchmark) == bench]
        tasks = Counter(a.task for a in mine)
        listed = ", ".join(f"`{t}` ({n})" for t, n in sorted(tasks.items(), key=lambda x: str(x[0])))
        lines.append(f"| {bench} | {len(mine)} | {listed} | {_settings_line(art, bench)} |")
    lines += ["", "<details><summary>The anchors (task and document index, in the predictor's input order)"
                  "</summary>", "", "| # | benchmark | task | doc_id | item |", "|---|---|---|---|---|"]
    lines += [f"| {a.position} | {a.benchmark or art.benchmark} | {a.task} | {a.doc_id} | {a.item_id} |"
              for a in art.anchors]
    lines += ["", "</details>", "", "## Training population", ""]
    t = art.train_models
    lines.append(f"Fitted on **{t.get('count', '?')} models**; their full scores ranged "
                 f"{100 * t.get('score_min', float('nan')):.1f} to {100 * t.get('score_max', float('nan')):.1f} points "
                 f"(mean {100 * t.get('score_mean', float('nan')):.1f})"
                 + (f", submitted {t['date_min']} to {t['date_max']}" if t.get("date_min") else "") + ". "
                 "Models unlike them (the out-of-distribution flag) get intervals that may not hold.")
    if art.extra.get("data_source"):
        lines += ["", f"Data: {art.extra['data_source']}"]
    lines += ["", "## Accuracy on held-out models", "",
              f"Calibrated on {art.calibration.get('n_calibration', '?')} models the fit never saw.", "",
              "| output | MAE (points) | mean interval half-width (points) |", "|---|---|---|"]
    lines += [f"| {name} | {c.get('calibration_mae_points', float('nan')):.2f} | "
              f"{c.get('mean_halfwidth_points', float('nan')):.2f} |" for name, c in _accuracy_rows(art)]
    selfcheck = SelfCheck.of_predictor(art.extra, art.benchmark)
    if selfcheck is not None:
        lines += ["", "## Frontier", "", *_frontier_rows(selfcheck)]
    if (plan := None if art.is_joint else plan_of(art.extra)) is not None:
        lines += ["", "## Probe (the second stage)", "", _probe_paragraph(plan, repo)]
    lines += ["", "## Licence", "",
              f"Data licence: **{licence}**; this predictor is derived from that data and carries its terms "
              "(see LICENSE)." if licence else "Data licence: not recorded (`sparseeval fit --data-licence`).", ""]
    return "\n".join(lines)


def _probe_paragraph(plan: ProbePlan, repo: str) -> str:
    """What the second stage is for and how a model runs it."""
    link = ("Its items are the whole benchmark, so the estimate is unbiased by design." if plan.link.whole else
            "Its items are a subset of the benchmark: a line fitted on the training models maps their mean to the "
            f"score, and its error at the top of the calibration models (+-{100 * plan.link.residual:.1f} points) "
            "is part of the interval.")
    return (f"A model predicted at {100 * plan.level:.1f} or above (the top {100 * (1 - plan.level_quantile):g} % of "
            "the calibration models' predictions), or flagged as possibly above the training range, answers a "
            "random probe of its own (drawn from its name): the first "
            f"{plan.first_items} items, then {plan.batch} at a time while the interval's sampling half-width is above "
            f"{100 * plan.target:g} points, up to {plan.cap}. Its estimate and interval then come from the probe by "
            "design (the anchors' estimate as the control, the probe's residuals as the correction), not from the "
            "calibration models, so they hold for a model stronger than every training model. " + link
            + f" `sparseeval next --predictor hf://{repo} --answers RUN` names the items; "
            f"`sparseeval export --predictor hf://{repo} --format lm-eval-task --probe-for MODEL` runs them in "
            "lm-eval.")


def _frontier_rows(selfcheck: SelfCheck) -> list[str]:
    """The frontier self-check as a table: figure by value, or (a joint predictor's) output by figure,
    one table per cut (the mean score's, then each benchmark output's own score's)."""
    if not selfcheck.joint:
        figures = selfcheck.figures
        rows = ["| figure | value |", "|---|---|",
                *(f"| {k} | {v} |" for k, v in selfcheck.to_json().items() if not isinstance(v, dict))]
        if (alone := figures.anchors_alone) is not None:
            rows = ["Measured with the two stages: each stronger model the anchors place at the top answers its probe "
                    "as `sparseeval next` asks; from the anchors alone: "
                    + ", ".join(f"{k} {v:.4g}" for k, v in alone.to_json().items() if isinstance(v, float)) + ".", "",
                    *rows]
        return rows
    cut = next(iter(selfcheck.outputs.values())).quantile
    rows = [f"Refitted on its fitting models at or below the {cut} quantile of their mean score, scored on the "
            "stronger rest:", "", *_figure_table(selfcheck.outputs)]
    if selfcheck.own_cut:
        rows += ["", f"Each benchmark output refitted on the fitting models at or below the {cut} quantile of that "
                     "benchmark's own score, scored on the stronger rest:", "", *_figure_table(selfcheck.own_cut)]
    return rows


def _figure_table(figures: Mapping[str, CutFigures]) -> list[str]:
    names = ["mae", "bias", "coverage", "flagged", "silent_misses", "n"]
    rows = [f"| {o} | " + " | ".join([_cell(getattr(f, n)) for n in names] if f.measured else
                                     [f.note or "not measured", *[""] * (len(names) - 1)]) + " |"
            for o, f in figures.items()]
    return ["| output | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|", *rows]


def _cell(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _task(art: PredictorArtifact) -> str:
    from sparseeval.interfaces.lm_eval_tasks import PREFIX, task_name

    if art.is_joint:
        return task_name(PREFIX, "joint")
    return task_name(PREFIX, art.benchmark)
