"""The probe (``fit --probe N``): random items that check the anchors of a model at the top of their range.

On real mmlu (the shared Open LLM Leaderboard data), fitted on the weakest 90 % of the models, the
anchors alone put the strongest 10 % about 8.6 points low and miss three in four of them silently; with
their answers to the probe most of those models are flagged and predicted closer, while the models the predictor
was fitted on are left as they were. The rest are small cases with known answers: the noise correction
of the probe's line, the draw, and what ``predict`` does with partial or missing probe answers.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from sparseeval.cli import main
from sparseeval.errors import UsageError
from sparseeval.frontier import STRONGER, Guarded, opens_upward
from sparseeval.probe import PROBE_FROM_QUANTILE, apply_probe, draw_probe_items, fit_probe, probe_line
from sparseeval.scoring import compare
from sparseeval.splits import frontier_cut
from tests.support import OPENLLM_DIR, needs_real_data

PROBE_N = 40


@pytest.fixture(scope="module")
def mmlu_frontier(tmp_path_factory):
    """``sparseeval fit --probe 40`` on a data folder holding mmlu's weakest 90 % (by full score), and the
    answers of the strongest 10 % it never saw (anchors and every other item)."""
    root = tmp_path_factory.mktemp("probe")
    scores = pl.read_parquet(OPENLLM_DIR / "scores.parquet").filter(pl.col("benchmark") == "mmlu")
    responses = pl.read_parquet(OPENLLM_DIR / "responses.parquet").filter(pl.col("benchmark") == "mmlu")
    _, beyond = frontier_cut(scores["score"].to_numpy(), 0.9)
    stronger = scores.filter(pl.Series(beyond))
    data = root / "weakest90"
    data.mkdir()
    keep = ~pl.col("model").is_in(stronger["model"].implode())
    responses.filter(keep).write_parquet(data / "responses.parquet")
    scores.filter(keep).write_parquet(data / "scores.parquet")
    out = root / "mmlu-probe"
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert main(["fit", "--data", str(data), "--benchmark", "mmlu", "--probe", str(PROBE_N), "--seed", "0",
                     "--out", str(out)]) == 0
    meta = json.loads((out / "predictor.json").read_text())
    answers = responses.filter(pl.col("model").is_in(stronger["model"].implode())).rename({"correct": "score"})
    return out, meta, answers, dict(zip(stronger["model"], stronger["score"], strict=True)), responses, \
        printed.getvalue()


def _predict_json(folder: Path, answers: pl.DataFrame, sheet: Path, capsys) -> dict[str, dict]:
    answers.write_csv(sheet)
    capsys.readouterr()
    assert main(["predict", "--predictor", str(folder), "--answers", str(sheet), "--no-db", "--json", "-"]) == 0
    return {r["model"]: r for r in json.loads(capsys.readouterr().out)}


def _probe_flagged(record: dict) -> bool:
    return any(r.startswith("the probe's") for r in record["ood_reasons"])


@needs_real_data
def test_the_probe_catches_the_mmlu_frontier_the_anchors_miss(mmlu_frontier, tmp_path: Path, capsys) -> None:
    folder, meta, answers, truth, _, _ = mmlu_frontier
    probe = meta["extra"]["probe"]
    anchors = {a["item_id"] for a in meta["anchors"]}
    assert len(probe["item_ids"]) == PROBE_N and not anchors & set(probe["item_ids"])
    only_anchors = _predict_json(folder, answers.filter(pl.col("item_id").is_in(list(anchors))),
                                 tmp_path / "anchors.csv", capsys)
    with_probe = _predict_json(folder, answers, tmp_path / "all.csv", capsys)

    def figures(records: dict[str, dict]) -> tuple[float, float, float]:
        err = np.array([r["predicted"] - truth[m] for m, r in records.items()])
        silent = np.mean([not r["ood"] and not r["lower"] <= truth[m] <= r["upper"] for m, r in records.items()])
        return float(np.abs(err).mean()), float(err.mean()), float(silent)

    mae0, bias0, silent0 = figures(only_anchors)
    mae1, bias1, silent1 = figures(with_probe)
    assert bias0 < -0.06 and silent0 > 0.6, (mae0, bias0, silent0)  # the failure the probe is for
    assert mae1 < mae0 - 0.025 and bias1 > bias0 + 0.025 and silent1 < 0.35, (mae1, bias1, silent1)
    assert np.mean([_probe_flagged(r) for r in with_probe.values()]) > 0.5
    # without the probe's answers nobody is flagged by it, and every model at the probe level whose anchors do
    # not already leave its interval open upward is asked for them
    for r in only_anchors.values():
        assert not _probe_flagged(r)
        asked = any("answer the probe's 40 items too" in w for w in r["warnings"])
        assert asked == (r["predicted"] >= probe["level"] and not opens_upward(tuple(r["ood_reasons"]))), r
    # a flagged model: halfway between, its interval from the anchors' lower side to the probe's upper one
    for m, r in with_probe.items():
        if _probe_flagged(r):
            before = only_anchors[m]
            est = 2 * r["predicted"] - before["predicted"]  # the probe's own estimate
            reason = next(x for x in r["ood_reasons"] if x.startswith("the probe's"))
            assert f"put it at {100 * est:.1f}, {100 * (est - before['predicted']):.1f} points above" in reason
            assert est - before["predicted"] > probe["threshold"] and r["lower"] == before["lower"]
            assert r["upper"] == pytest.approx(min(1.0, est + probe["halfwidth"])) or r["upper"] == 1.0
    # compare takes the probe's answers the same way: the flagged model's estimate and reason come along
    a = next(m for m, r in with_probe.items() if _probe_flagged(r))
    b = next(m for m, r in with_probe.items() if not r["ood"])
    c = compare(str(folder), answers.with_columns(pl.col("score").cast(pl.Float64)), a, b)
    assert (c.predicted_a, c.predicted_b) == pytest.approx((with_probe[a]["predicted"], with_probe[b]["predicted"]))
    assert any("the probe's 40 random items" in w for w in c.warnings)


@needs_real_data
def test_the_probe_leaves_the_models_it_was_fitted_on_alone(mmlu_frontier, tmp_path: Path, capsys) -> None:
    """Ordinary models (the fitting side, answering every item): at most 5 % flagged by the probe, and
    every one it does not flag predicted exactly as from its anchors alone."""
    folder, meta, _, truth, responses, _ = mmlu_frontier
    ordinary = responses.filter(~pl.col("model").is_in(list(truth))).rename({"correct": "score"})
    anchors = [a["item_id"] for a in meta["anchors"]]
    alone = _predict_json(folder, ordinary.filter(pl.col("item_id").is_in(anchors)), tmp_path / "a.csv", capsys)
    checked = _predict_json(folder, ordinary, tmp_path / "b.csv", capsys)
    flagged = [m for m, r in checked.items() if _probe_flagged(r)]
    assert 0 < len(flagged) <= 0.05 * len(checked)
    for m, r in checked.items():
        if m not in flagged:
            assert (r["predicted"], r["lower"], r["upper"]) == (alone[m]["predicted"], alone[m]["lower"],
                                                                 alone[m]["upper"])


@needs_real_data
def test_fit_measures_the_probe_on_its_own_stronger_models_and_says_so(mmlu_frontier) -> None:
    """``fit`` runs the frontier self-check twice: the anchors alone (as the pipeline gates) and with the
    probe's answers, on the same stronger fitting models, and prints both side by side."""
    _, meta, _, _, _, printed = mmlu_frontier
    gated, probe = meta["extra"]["frontier"], meta["extra"]["probe"]
    check = probe["selfcheck"]
    alone = check["anchors_alone"]
    assert check["measured"] and gated["measured"]
    assert (check["n"], check["cut_score"], check["quantile"]) == (gated["n"], gated["cut_score"], gated["quantile"])
    assert 0 < check["probe_flagged"] <= check["flagged"] and alone["flagged"] <= check["flagged"]
    # the probe only flags, moves up and widens: it never un-flags a model or lowers a prediction
    assert check["bias"] >= alone["bias"] and check["silent_misses"] <= alone["silent_misses"]
    assert (f"probe: {PROBE_N} random items, asked of predictions >= {100 * probe['level']:.1f}") in printed
    assert (f"frontier self-check with the probe's answers: on the {check['n']} stronger fitting models MAE "
            f"{check['mae']:.2f} points, bias {check['bias']:+.2f}") in printed
    assert (f"(from the anchors alone: MAE {alone['mae']:.2f}, bias {alone['bias']:+.2f}, coverage "
            f"{alone['coverage']:.3f}, missed silently {100 * alone['silent_misses']:.1f} %)") in printed
    assert "sparseeval export --predictor" in printed and "--format lm-eval --probe --out probe.json" in printed


@needs_real_data
def test_export_gives_the_probe_items_where_lm_eval_runs_them(mmlu_frontier, tmp_path: Path, capsys) -> None:
    folder, meta, _, _, _, _ = mmlu_frontier
    probe = meta["extra"]["probe"]
    assert main(["export", "--predictor", str(folder), "--format", "csv", "--probe", "--out",
                 str(tmp_path / "items.csv")]) == 0
    table = pl.read_csv(tmp_path / "items.csv")
    assert table.height == len(meta["anchors"]) + PROBE_N
    rows = table.filter(pl.col("position").is_null())
    assert rows["item_id"].to_list() == probe["item_ids"] and rows["task"].null_count() == 0
    assert main(["export", "--predictor", str(folder), "--format", "lm-eval", "--probe", "--out",
                 str(tmp_path / "samples.json")]) == 0
    samples = json.loads((tmp_path / "samples.json").read_text())
    assert sum(map(len, samples.values())) == len(meta["anchors"]) + PROBE_N
    card_file = tmp_path / "card.md"
    assert main(["export", "--predictor", str(folder), "--format", "model-card", "--out", str(card_file)]) == 0
    card = card_file.read_text()
    assert "## Probe" in card and f"answer the probe's {PROBE_N} random items" in card


@needs_real_data
def test_the_lm_eval_task_folder_runs_the_probe_and_its_estimate_is_predicts(mmlu_frontier, tmp_path: Path,
                                                                               capsys) -> None:
    """``export --format lm-eval-task --probe``: the leaves run the anchors and the probe's items (new
    leaves for subjects only the probe has), and the estimate lm-eval prints, computed from a run's
    answers as the task class keeps them, is ``predict``'s, probe flag included."""
    folder, meta, answers, _, _, _ = mmlu_frontier
    probe = meta["extra"]["probe"]
    tasks = tmp_path / "tasks"
    assert main(["export", "--predictor", str(folder), "--format", "lm-eval-task", "--probe", "--out",
                 str(tasks)]) == 0
    assert f"({len(meta['anchors'])} anchors and {PROBE_N} probe items of mmlu)" in capsys.readouterr().out
    leaves = [yaml.safe_load(f.read_text().replace("!function", "")) for f in sorted(tasks.glob("*.yaml"))]
    specs = [leaf["metadata"]["sparseeval"] for leaf in leaves if "class" in leaf]
    run = sorted((s["base_task"], d) for s in specs for d in s["doc_ids"])
    located = [(a["task"], a["doc_id"]) for a in meta["anchors"]] + [tuple(x) for x in probe["locations"]]
    assert run == sorted(located)
    assert sorted((s["base_task"], d) for s in specs for d in s["probe_doc_ids"]) == sorted(map(tuple,
                                                                                               probe["locations"]))
    pytest.importorskip("lm_eval")
    from sparseeval.lm_eval_anchor_task import _predict

    with_probe = _predict_json(folder, answers, tmp_path / "all.csv", capsys)
    flagged = next(m for m, r in with_probe.items() if _probe_flagged(r))
    where = {(a["task"], a["doc_id"]): a["item_id"] for a in meta["anchors"]} | {
        tuple(loc): item for item, loc in zip(probe["item_ids"], probe["locations"], strict=True)}
    mine = dict(answers.filter(pl.col("model") == flagged).select("item_id", "score").iter_rows())
    registry = {s["base_task"]: {"task": s["base_task"], "predictor": str(tasks / s["predictor"]),
                                 "hash": s["predictor_hash"],
                                 "docs": {d: mine[where[(s["base_task"], d)]] for d in s["doc_ids"]}}
                for s in specs}
    # `predict` on that one run, as its user would: in a batch of many models a float32 product can round
    # differently (1e-7 relative, with some BLAS kernels) from the same model's alone
    row = _predict_json(folder, answers.filter(pl.col("model") == flagged), tmp_path / "one.csv", capsys)[flagged]
    estimate = _predict(registry)["mmlu"]
    assert (estimate["predicted"], estimate["lower"], estimate["upper"], estimate["ood"]) == pytest.approx(
        (row["predicted"], row["lower"], row["upper"], 1.0), abs=1e-12)


@needs_real_data
def test_next_asks_for_the_probe_once_the_anchors_are_done_then_checks_it(mmlu_frontier, tmp_path: Path,
                                                                            capsys) -> None:
    """``next`` follows ``predict``: a model whose anchors put it at the probe level is not done when its
    anchors are; the probe's items (all of them, with their lm-eval locations) come next. With their
    answers it is done, flagged or not as ``predict`` says; a model below the level is done at once."""
    folder, meta, answers, _, _, _ = mmlu_frontier
    probe = meta["extra"]["probe"]
    anchors = [a["item_id"] for a in meta["anchors"]]
    with_probe = _predict_json(folder, answers, tmp_path / "all.csv", capsys)
    sheet, plan, samples = tmp_path / "anchors.csv", tmp_path / "plan.json", tmp_path / "next.json"
    answers.filter(pl.col("item_id").is_in(anchors)).write_csv(sheet)
    assert main(["next", "--predictor", str(folder), "--answers", str(sheet), "--json", str(plan),
                 "--samples", str(samples)]) == 0
    steps = {s["model"]: s for s in json.loads(plan.read_text())}
    asked = [m for m, s in steps.items() if not s["done"]]
    assert asked and all(steps[m]["predicted"] >= probe["level"] for m in asked)
    for m in asked:
        assert [n["item_id"] for n in steps[m]["next"]] == probe["item_ids"]
        assert all(n["probe"] and n["position"] is None for n in steps[m]["next"])
        assert steps[m]["reason"].startswith("all anchors answered")
        assert "; but predicted at the top of its calibration models" in steps[m]["reason"]
    written = json.loads(samples.read_text())
    assert sorted((t, d) for t, docs in written.items() for d in docs) == sorted(map(tuple, probe["locations"]))
    below = [m for m, s in steps.items() if s["predicted"] < probe["level"]]
    assert below and all(steps[m]["done"] and steps[m]["next"] == [] for m in below)
    # with the probe's answers too: done, and flagged by the probe exactly where predict flags
    answers.write_csv(sheet)
    assert main(["next", "--predictor", str(folder), "--answers", str(sheet), "--json", str(plan)]) == 0
    steps = {s["model"]: s for s in json.loads(plan.read_text())}
    assert all(s["done"] for s in steps.values())
    assert {m for m, s in steps.items() if "flagged: the probe's" in s["reason"]} == \
        {m for m, r in with_probe.items() if _probe_flagged(r) and len(r["ood_reasons"]) == 1}
    assert all(s["predicted"] == pytest.approx(with_probe[m]["predicted"]) for m, s in steps.items())


def test_export_probe_refuses_a_predictor_without_one(tmp_path: Path, capsys) -> None:
    toy = Path(__file__).parent / "fixtures" / "predictor_v1" / "toy-mlp"
    out = tmp_path / "x.csv"
    assert main(["export", "--predictor", str(toy), "--format", "csv", "--probe", "--out", str(out)]) == 2
    assert "has no probe (fit it with `sparseeval fit --probe N`)" in capsys.readouterr().err
    assert not out.exists()


def test_the_probe_line_is_corrected_for_the_noise_of_a_few_items() -> None:
    """Known truth: a model's score is its expected item mean; 40 drawn items add binomial noise. Least
    squares flattens the line by the reliability (here about .6); the corrected slope is the true one."""
    rng = np.random.default_rng(0)
    score = rng.uniform(0.35, 0.65, 4000)
    means = rng.binomial(PROBE_N, score) / PROBE_N
    plain = np.polyfit(means, score, 1)[0]
    intercept, slope = probe_line(means, score, PROBE_N)
    assert plain < 0.75 and slope == pytest.approx(1.0, abs=0.06) and intercept == pytest.approx(0.0, abs=0.035)


def test_the_probe_starts_at_the_chosen_quantile_of_the_calibration_predictions() -> None:
    """``fit --probe-from Q``: the level is the Q quantile of the calibration models' predictions (stored
    with Q), the threshold is taken among the models at or above it, and a level with too few models
    above it is refused, naming the option."""
    rng = np.random.default_rng(1)
    score = rng.uniform(0.3, 0.8, 600)
    means = rng.binomial(PROBE_N, score) / PROBE_N
    pred = score + rng.normal(0, 0.02, 600)
    fit_rows, cal = slice(0, 400), slice(400, 600)

    def fitted(q: float) -> dict:
        return fit_probe([f"i{j}" for j in range(PROBE_N)], means[fit_rows], score[fit_rows], means[cal], score[cal],
                         pred[cal], alpha=0.1, locations=[(None, None)] * PROBE_N, level_quantile=q)

    default, half = fitted(PROBE_FROM_QUANTILE), fitted(0.5)
    assert default["level"] == pytest.approx(np.quantile(pred[cal], PROBE_FROM_QUANTILE))
    assert half["level"] == pytest.approx(np.quantile(pred[cal], 0.5)) and half["level"] < default["level"]
    assert (default["level_quantile"], half["level_quantile"]) == (PROBE_FROM_QUANTILE, 0.5)
    assert half["n_calibration_probed"] == 100 and default["n_calibration_probed"] == 40
    with pytest.raises(UsageError, match="a lower --probe-from"):
        fitted(0.9)


def test_the_draw_is_seeded_never_an_anchor_and_refuses_too_many() -> None:
    anchors = np.array([0, 3, 5, 7])
    a, b, c = (draw_probe_items(30, anchors, 10, seed) for seed in (1, 1, 2))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert not set(a) & set(anchors) and len(set(a)) == 10
    with pytest.raises(UsageError, match="more than the 26 items"):
        draw_probe_items(30, anchors, 27, 0)


def _guarded(pred: list[float], reasons: list[tuple[str, ...]]) -> Guarded:
    p = np.array(pred)
    return Guarded(p, np.full(p.size, 0.02), p - 0.02, np.where([bool(r) for r in reasons], 1.0, p + 0.02),
                   np.zeros(p.size), reasons)


def test_predict_uses_the_probe_only_at_its_level_and_with_half_its_items_answered() -> None:
    probe = {"item_ids": ["a", "b", "c", "d"], "line": [0.0, 1.0], "level": 0.6, "threshold": 0.05,
             "halfwidth": 0.04, "threshold_quantile": 0.95}
    g = _guarded([0.50, 0.65, 0.65, 0.65, 0.70], [(), (), (), (), (f"{STRONGER} x",)])
    nan = np.nan
    answers = np.array([[1, 1, 1, 1],       # below the level: left alone though the probe says 1.0
                        [1, 1, 1, 1],       # at the level, the probe 35 points higher: flagged, predicted 1.0
                        [1, 1, nan, nan],   # half answered: counts (mean 1.0)
                        [1, nan, nan, nan],  # a quarter: not enough, asked for the probe instead
                        [1, 1, 1, 1]])      # the anchors' interval already open upward: left alone
    out, warns = apply_probe(probe, g, answers)
    assert out.pred.tolist() == pytest.approx([0.50, 0.825, 0.825, 0.65, 0.70])
    assert [len(r) for r in out.reasons] == [0, 1, 1, 0, 1] and out.reasons[4] == g.reasons[4]
    assert out.lower[1] == pytest.approx(0.63) and out.upper[1] == 1.0 and out.lower[0] == pytest.approx(0.48)
    assert [bool(w) for w in warns] == [False, False, False, True, False]
    # the anchors already open upward (stronger than every training model): not asked, not changed
    opened = apply_probe(probe, _guarded([0.65], [(f"{STRONGER} x",)]), np.array([[1.0, 1, 1, 0]]))[0]
    assert opened.pred[0] == 0.65 and opened.upper[0] == 1.0 and len(opened.reasons[0]) == 1
    narrow = apply_probe(probe, _guarded([0.65], [()]), np.array([[1.0, 1, 1, 0]]))[0]
    assert narrow.upper[0] == pytest.approx(0.79) and narrow.halfwidth[0] == pytest.approx((0.79 - 0.63) / 2)
    assert apply_probe(probe, g, None)[1] == [[], warns[3], warns[3], warns[3], []]


def test_a_model_that_answered_fewer_anchors_needs_a_wider_disagreement_to_be_flagged() -> None:
    """A prediction from a prefix of the anchors (``next``'s adaptive stop) disagrees with the probe more
    than one from all of them; its threshold is its prefix length's, so ordinary models stopping early
    are not flagged by noise (arc, random split: 7-13 % were with the full anchors' threshold)."""
    probe = {"item_ids": ["a", "b", "c", "d"], "line": [0.0, 1.0], "level": 0.6, "threshold": 0.05,
             "threshold_by_prefix": [0.30, 0.20, 0.10, 0.05], "halfwidth": 0.04, "threshold_quantile": 0.95}
    g = _guarded([0.65, 0.65, 0.65], [(), (), ()])
    answers = np.array([[1, 1, 0, 1]] * 3, dtype=float)  # the probe says 0.75: 10 points above
    out, _ = apply_probe(probe, g, answers, np.array([4, 2, 1]))
    assert [bool(r) for r in out.reasons] == [True, False, False]
    assert "stay within 5.0" in out.reasons[0][0]
    assert [bool(r) for r in apply_probe(probe, g, answers)[0].reasons] == [True, True, True]  # counts unknown


@needs_real_data
def test_the_probe_stores_a_threshold_per_prefix_never_below_the_full_one(mmlu_frontier) -> None:
    _, meta, _, _, _, _ = mmlu_frontier
    probe = meta["extra"]["probe"]
    by_prefix = probe["threshold_by_prefix"]
    assert len(by_prefix) == len(meta["anchors"]) and by_prefix[-1] == probe["threshold"]
    assert min(by_prefix) >= probe["threshold"] and max(by_prefix) > probe["threshold"]


def test_fit_refuses_a_probe_it_cannot_draw_before_fitting(tmp_path: Path, capsys,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A joint predictor has no probe, and a probe cannot take more items than the anchors leave: both
    refused with the reason, nothing written; the same for the probe ``$SPARSEEVAL_PROBE_ITEMS`` asks."""
    out = tmp_path / "p"
    assert main(["fit", "--data", str(OPENLLM_DIR), "--method", "sparseeval-joint", "--benchmark", "arc,mmlu",
                 "--probe", "10", "--out", str(out)]) == 2
    assert "--probe is for single-benchmark predictors" in capsys.readouterr().err
    assert main(["fit", "--data", str(OPENLLM_DIR), "--benchmark", "arc", "--probe-from", "0.5", "--out",
                 str(out)]) == 2
    assert "--probe-from sets where the probe starts: it needs --probe N" in capsys.readouterr().err
    data = tmp_path / "toy"
    data.mkdir()
    models, items = [f"org/m{i}" for i in range(40)], [f"q{j}" for j in range(12)]
    rng = np.random.default_rng(0)
    pl.DataFrame({"model": np.repeat(models, len(items)), "benchmark": "toy", "item_id": items * len(models),
                  "score": rng.integers(0, 2, len(models) * len(items)).astype(float)}).write_parquet(
                      data / "responses.parquet")
    assert main(["fit", "--data", str(data), "--benchmark", "toy", "-k", "8", "--probe", "5", "--out", str(out)]) == 2
    assert "--probe 5: benchmark 'toy' has 12 items, 8 of them anchors; a probe can draw at most 4" in \
        capsys.readouterr().err
    assert not out.exists()
    # $SPARSEEVAL_PROBE_ITEMS is fit's default --probe (as the refresh's), never a joint predictor's
    monkeypatch.setenv("SPARSEEVAL_PROBE_ITEMS", "5")
    assert main(["fit", "--data", str(data), "--benchmark", "toy", "-k", "8", "--out", str(out)]) == 2
    assert "--probe 5: benchmark 'toy' has 12 items" in capsys.readouterr().err
    assert main(["fit", "--data", str(OPENLLM_DIR), "--method", "sparseeval-joint", "--benchmark", "arc,nosuch",
                 "--out", str(out)]) == 2
    assert "no benchmark 'nosuch'" in capsys.readouterr().err and not out.exists()
