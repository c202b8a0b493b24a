"""sparseeval-joint: leak-free joint anchors, joint beats per-benchmark when benchmarks correlate and is no
worse when they do not, predictors save/load and predict one row per benchmark plus the mean."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sparseeval.data.benchmarks import BenchmarkNameError, joint_benchmarks
from sparseeval.data.matrix import ResponseMatrix, build_matrix
from sparseeval.estimate.artifact import load_predictor
from sparseeval.estimate.evaluation import ProtocolConfig, run_joint_protocol, summarize
from sparseeval.estimate.fitting import fit_joint_predictor
from sparseeval.estimate.joint_fit import fit_joint
from sparseeval.estimate.methods.joint import MEAN, JointSparseEval, forward_order, joint_data, ridge_gcv_multi
from sparseeval.estimate.methods.proxies import ridge_gcv_from_gram
from sparseeval.estimate.predicting import predict
from sparseeval.estimate.splits import make_split
from sparseeval.interfaces.export import lm_eval_samples

BENCHES = ("alpha", "beta", "gamma", "delta")


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: small problems on a shared machine run faster without spinning workers."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def leaderboard(correlated: bool, *, n_models: int = 700, n_items: int = 60, pool: int = 400,
                seed: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """2PL answers; each benchmark's score is the expected accuracy on a larger pool (only ``n_items``
    written). ``correlated``: every benchmark measures the same ability plus a little of its own;
    else each benchmark has an independent ability."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(size=n_models)
    models = [f"org{m % 20}/m{m}" for m in range(n_models)]
    resp, scores = [], []
    for b, name in enumerate(BENCHES):
        own = rng.normal(size=n_models)
        theta = (0.95 * shared + 0.3 * own) if correlated else own
        a = rng.uniform(0.8, 2.5, size=pool)
        d = rng.normal(scale=1.2, size=pool)
        p = 1 / (1 + np.exp(-(a[None, :] * theta[:, None] - d[None, :])))
        y = (rng.random((n_models, n_items)) < p[:, :n_items]).astype(np.int8)
        resp.append(pl.DataFrame({"model": np.repeat(models, n_items), "benchmark": name,
                                  "item_id": np.tile([str(i) for i in range(n_items)], n_models),
                                  "score": y.ravel().astype(np.float32)}))
        scores.append(pl.DataFrame({"model": models, "benchmark": name, "score": p.mean(axis=1)}))
        del b
    return pl.concat(resp), pl.concat(scores)


def matrices(resp: pl.DataFrame, scores: pl.DataFrame) -> list[ResponseMatrix]:
    return [build_matrix(resp, scores, b) for b in BENCHES]


def test_multi_output_gcv_matches_single_output() -> None:
    rng = np.random.default_rng(1)
    import torch

    Y = torch.as_tensor(rng.integers(0, 2, (200, 15)), dtype=torch.float64)
    S = torch.as_tensor(rng.random((200, 3)), dtype=torch.float64)
    Yc, Sc = Y - Y.mean(0), S - S.mean(0)
    sets = torch.as_tensor([[0, 3, 5, 7], [1, 2, 9, 14]])
    w = torch.as_tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    got = ridge_gcv_multi(Yc.T @ Yc, Yc.T @ Sc, (Sc * Sc).sum(0), 200, sets, w, 1.0)
    want = sum(w[b] * ridge_gcv_from_gram(Yc.T @ Yc, Yc.T @ Sc[:, b], float(Sc[:, b] @ Sc[:, b]), 200, sets, 1.0)
               for b in range(3))
    assert torch.allclose(got, want, rtol=1e-9)


def test_joint_anchors_ignore_test_models() -> None:
    data = joint_data(matrices(*leaderboard(True, n_models=300, n_items=30)))
    split = make_split(data.models, val_frac=0.1, test_frac=0.2, seed=3)
    params = {"final": "ridge"}
    est = fit_joint(data, split, 3, seed=3, device="cpu", method_params=params)
    Y = data.Y.copy()
    rng = np.random.default_rng(0)
    Y[split.test] = rng.integers(0, 2, Y[split.test].shape)  # test models answer at random
    S = data.S.copy()
    S[split.test] = rng.random(S[split.test].shape)
    changed = type(data)(data.benchmarks, data.models, data.columns, data.groups, Y, S)
    again = fit_joint(changed, split, 3, seed=3, device="cpu", method_params=params)
    assert not np.array_equal(Y[split.test], data.Y[split.test])
    assert again.anchors_.tolist() == est.anchors_.tolist()
    X = data.Y[split.train][:, est.anchors_]
    np.testing.assert_allclose(again.predict(X), est.predict(X), atol=1e-6)
    # the anchors do move when *training* answers change (the test above is not vacuous)
    Y2 = data.Y.copy()
    Y2[split.train] = rng.integers(0, 2, Y2[split.train].shape)
    moved = fit_joint(type(data)(data.benchmarks, data.models, data.columns, data.groups, Y2, data.S), split, 3,
                      seed=3, device="cpu", method_params=params)
    assert moved.anchors_.tolist() != est.anchors_.tolist()


def _compare(correlated: bool) -> dict[str, dict[str, float]]:
    resp, scores = leaderboard(correlated)
    res = run_joint_protocol(matrices(resp, scores), ["sparseeval-joint", "sparseeval-linear"], [4], [0, 1],
                             config=ProtocolConfig(), device="cpu",
                             method_params={"sparseeval-joint": {"final": "ridge"}})
    table = summarize(res)
    out: dict[str, dict[str, float]] = {}
    for row in table.iter_rows(named=True):
        out.setdefault(row["method"], {})[row["benchmark"]] = row["mae_mean"]
    assert set(out["sparseeval-joint"]) == {*BENCHES, MEAN} == set(out["sparseeval-linear"])
    # both spent the same total budget
    joint_rows = [r for r in res if r.method == "sparseeval-joint" and r.benchmark == MEAN]
    assert all(len(r.anchors) == 4 * len(BENCHES) for r in joint_rows)
    return out


def test_joint_beats_per_benchmark_when_benchmarks_correlate() -> None:
    out = _compare(True)
    joint, per = out["sparseeval-joint"], out["sparseeval-linear"]
    ratios = [joint[b] / per[b] for b in BENCHES]
    assert max(ratios) < 0.9, ratios
    assert joint[MEAN] < 0.9 * per[MEAN]


def test_joint_no_worse_when_benchmarks_are_independent() -> None:
    out = _compare(False)
    joint, per = out["sparseeval-joint"], out["sparseeval-linear"]
    mean_ratio = np.mean([joint[b] / per[b] for b in BENCHES])
    assert mean_ratio < 1.08, (joint, per)


def test_forward_order_puts_informative_items_first() -> None:
    rng = np.random.default_rng(0)
    s = rng.random(500)
    noise = rng.integers(0, 2, (500, 6)).astype(np.float32)
    signal = (rng.random((500, 2)) < s[:, None]).astype(np.float32)
    Y = np.concatenate([noise, signal], axis=1)  # columns 6, 7 carry the score
    order = forward_order(Y, s)
    assert sorted(order.tolist()) == list(range(8))
    assert set(order[:2].tolist()) == {6, 7}


@pytest.mark.slow
def test_joint_predictor_roundtrip_predict_and_export(tmp_path: Path) -> None:
    resp, scores = leaderboard(True, n_models=320, n_items=30)
    held = [f"org{m % 20}/m{m}" for m in range(300, 320)]
    fit_resp = resp.filter(~pl.col("model").is_in(held))
    art = fit_joint_predictor(fit_resp, scores, list(BENCHES), 3, seed=0, device="cpu",
                              method_params={"max_epochs": 100})
    saved = art.save(tmp_path / "joint")
    loaded = load_predictor(tmp_path / "joint")
    assert loaded.is_joint and loaded.benchmarks == list(BENCHES) and loaded.k == 12
    assert loaded.content_hash == saved.content_hash
    assert all(a.benchmark in BENCHES for a in loaded.anchors)
    assert isinstance(loaded.estimator, JointSparseEval)
    new = resp.filter(pl.col("model").is_in(held))
    preds = predict(loaded, new)
    assert len(preds) == len(held) * (len(BENCHES) + 1)
    assert [p.benchmark for p in preds[: len(BENCHES) + 1]] == [*BENCHES, MEAN]
    truth = {(m, b): s for m, b, s in scores.iter_rows()}
    by_model: dict[str, list[float]] = {}
    errors = []
    for p in preds:
        assert p.lower <= p.predicted <= p.upper and p.n_anchors == 12
        if p.benchmark != MEAN:
            errors.append(abs(p.predicted - truth[(p.model, p.benchmark)]))
            by_model.setdefault(p.model, []).append(p.predicted)
    assert np.mean(errors) < 0.1  # 3 items per benchmark, scores spread over [0, 1]
    mean_rows = [p for p in preds if p.benchmark == MEAN]
    # each benchmark is lifted at the top of its training range by its own correction; the mean output
    # averages the lifted predictions, so it stays their mean
    outputs = loaded.calibration["outputs"]
    assert all(outputs[b]["beyond"]["prior"] for b in BENCHES) and len(outputs[MEAN]["beyond_outputs"]) == len(BENCHES)
    for p in mean_rows:
        assert p.predicted == pytest.approx(np.mean(by_model[p.model]), abs=1e-6)
    # identical to the in-memory artifact
    assert [p.predicted for p in predict(art, new)] == pytest.approx([p.predicted for p in preds])
    # export: every anchor, or the first N of the adaptive order
    samples = lm_eval_samples([loaded])
    assert sum(len(v) for v in samples.values()) == 12
    first = lm_eval_samples([loaded], first=5)
    assert sum(len(v) for v in first.values()) == 5
    meta = json.loads((tmp_path / "joint" / "predictor.json").read_text())
    assert sorted(meta["extra"]["adaptive"]["order"]) == list(range(12))


@pytest.mark.slow
def test_fit_command_publishes_a_joint_predictor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``sparseeval fit --method sparseeval-joint --benchmark a,b``: one folder, K per benchmark, and the
    usage errors a user meets (one benchmark only, a benchmark not in the data)."""
    from sparseeval.interfaces.cli import main

    resp, scores = leaderboard(True, n_models=240, n_items=25)
    (tmp_path / "data").mkdir()
    resp.write_parquet(tmp_path / "data" / "responses.parquet")
    scores.write_parquet(tmp_path / "data" / "scores.parquet")
    data = ["--data", str(tmp_path / "data"), "--method", "sparseeval-joint", "-k", "3", "--device", "cpu"]
    assert main(["fit", *data, "--benchmark", "alpha,beta,gamma", "--out", str(tmp_path / "joint")]) == 0
    out = capsys.readouterr().out
    assert "sparseeval-joint with 9 anchors" in out and "  mean: MAE" in out
    loaded = load_predictor(tmp_path / "joint")
    assert loaded.is_joint and loaded.benchmarks == ["alpha", "beta", "gamma"] and loaded.k == 9
    # --out is given so that the default (the pipeline's published folder, refused once the
    # pipeline has run in this checkout) does not decide which refusal the user sees
    elsewhere = ["--out", str(tmp_path / "other")]
    assert main(["fit", *data, *elsewhere, "--benchmark", "alpha"]) == 2
    assert "takes two benchmarks or more" in capsys.readouterr().err
    assert main(["fit", *data, *elsewhere, "--benchmark", "alpha,omega"]) == 2
    assert "no benchmark 'omega'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["sparseeval-joint", "joint", "sparseeval-joint/arc"])
def test_a_benchmark_named_like_the_joint_predictor_is_refused_while_the_joint_predictor_is_on(name: str) -> None:
    """``sparseeval-joint`` would share the joint predictor's folder and DuckDB key, ``joint`` its
    registry entry (``sparseeval-joint``): one would silently overwrite the other."""
    with pytest.raises(BenchmarkNameError, match=f"benchmark '{name}' would be published under the joint"):
        joint_benchmarks("", ["arc", name, "mmlu"])
    with pytest.raises(BenchmarkNameError, match="SPARSEEVAL_JOINT_BENCHMARKS=none"):
        joint_benchmarks("arc,mmlu", ["arc", name, "mmlu"])
    assert joint_benchmarks("none", ["arc", name, "mmlu"]) == []  # joint off: the benchmark is just a benchmark
    assert joint_benchmarks("", ["arc", "jointly", "mmlu"]) == ["arc", "jointly", "mmlu"]  # no clash, no refusal
    # "Joint" differs from "joint" only in case: the name encoding (sparseeval.data.names) gives it its own
    # folder and registry entry (sparseeval-%4Aoint), so it no longer clashes with the joint predictor
    assert joint_benchmarks("", ["arc", "Joint", "mmlu"]) == ["Joint", "arc", "mmlu"]
