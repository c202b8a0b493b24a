"""The light install (issue 31): its size and ``predict``'s time, side by side with the full install.

    python bench/light_install.py [--predictor predictors/openllm_v1/arc] [--runs 5]

1. Builds the wheel and installs it **without extras** into a fresh venv (what ``pip install sparseeval``
   gives); reports the venv's size on disk, and the size of the installed distributions of the light and
   the full (``[fit,pipeline,serve]``) dependency closures as found in this checkout's ``.venv``.
2. Serves the predictor from a stand-in Hub (bench/support/hub_server.py) and times
   ``sparseeval predict --predictor hf://ORG/REPO --answers <an lm-eval output folder>`` as a new process
   (what a user waits for), in the light venv and in the full ``.venv``: the first run (download into an
   empty client cache) and the median of the next runs (cached).

The answers are an lm-eval 0.4.13-layout output folder (results + samples of the predictor's anchors,
25-shot, answers drawn at random) written here, since the real task data cannot be downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.support.hub_server import HubServer, Repo, files_from  # noqa: E402
from sparseeval.estimate.artifact import load_predictor  # noqa: E402

LIGHT_EXTRAS: tuple[str, ...] = ()
FULL_EXTRAS = ("fit", "pipeline", "serve")


def du_mb(path: Path) -> float:
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) / 1024


def closure(extras: tuple[str, ...]) -> set[str]:
    """Distributions ``sparseeval[extras]`` pulls in, as installed in this interpreter's environment."""
    seen: set[str] = set()
    todo = [("sparseeval", set(extras))]
    while todo:
        name, wanted = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if key in seen and not wanted:
            continue
        seen.add(key)
        for req in dist.requires or []:
            spec, _, marker = req.partition(";")
            m = re.match(r"\s*([A-Za-z0-9_.\-]+)(\[([^\]]+)\])?", spec)
            if not m:
                continue
            extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
            if extra and extra.group(1) not in wanted:
                continue
            sub = set((m.group(3) or "").replace(" ", "").split(",")) - {""}
            todo.append((m.group(1), sub))
    return seen


def installed_mb(dists: set[str]) -> float:
    total = 0
    for d in metadata.distributions():
        if re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() in dists:
            for f in d.files or []:
                p = Path(d.locate_file(f))
                if p.is_file():
                    total += p.stat().st_size
    return total / 2**20


def lm_eval_folder(folder: Path, art, seed: int = 0) -> Path:
    """An lm-eval 0.4.13 output folder answering the predictor's anchors (one task per harness task)."""
    rng = random.Random(seed)
    run = folder / "bench__model"
    run.mkdir(parents=True)
    date = "2026-01-01T00-00-00.000000"
    tasks: dict[str, list[int]] = {}
    for a in art.anchors:
        tasks.setdefault(a.task, []).append(int(a.doc_id))
    settings = art.training_settings()
    shots, metric = settings.get("n_shot", 0), settings.get("metric") or "acc"
    for task, docs in tasks.items():
        lines = [json.dumps({"doc_id": d, "doc": {}, "target": 0, "arguments": {}, "resps": [], "filtered_resps": [],
                             "filter": "none", "metrics": [metric], metric: float(rng.random() < 0.6)})
                 for d in sorted(docs)]
        (run / f"samples_{task}_{date}.jsonl").write_text("\n".join(lines) + "\n")
    results = {"results": {},  # no aggregates: the anchors alone are no benchmark score
               "configs": {t: {"task": t, "num_fewshot": shots, "output_type": "multiple_choice",
                               "metric_list": [{"metric": metric, "aggregation": "mean", "higher_is_better": True}]}
                           for t in tasks},
               "n-shot": dict.fromkeys(tasks, shots), "versions": dict.fromkeys(tasks, 1.0),
               "config": {"model": "hf", "model_args": "pretrained=bench/model", "limit": None},
               "model_name": "bench/model", "lm_eval_version": "0.4.13", "date": 1767225600.0}
    (run / f"results_{date}.json").write_text(json.dumps(results, indent=2))
    return folder


def timed(cli: Path, args: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([str(cli), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{cli} {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--predictor", type=Path, default=REPO / "predictors" / "openllm_v1" / "arc",
                    help="predictor folder to serve (default: make predictors' arc; built if missing)")
    ap.add_argument("--runs", type=int, default=5, help="cached predict runs to take the median of (default 5)")
    args = ap.parse_args(argv)
    if not (args.predictor / "predictor.json").is_file():
        sys.exit(f"{args.predictor}: no predictor (run `make predictors`, or pass --predictor DIR)")
    art = load_predictor(args.predictor)
    with tempfile.TemporaryDirectory(prefix="sparseeval-light-") as tmp_name:
        tmp = Path(tmp_name)
        dist = tmp / "dist"
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(REPO),
                        "-w", str(dist)], check=True, capture_output=True, timeout=600)
        wheel = next(dist.glob("sparseeval-*.whl"))
        venv = tmp / "light"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        t0 = time.perf_counter()
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True, capture_output=True,
                       timeout=900)
        install_s = time.perf_counter() - t0
        site = next((venv / "lib").glob("python3*/site-packages"))
        tooling = sum(du_mb(p) for p in site.iterdir() if re.match(r"(pip|setuptools|_distutils_hack|pkg_resources)",
                                                                    p.name))
        answers = lm_eval_folder(tmp / "run", art)
        server = HubServer()
        try:
            repo = Repo()
            repo.push(files_from(args.predictor))
            server.models["bench/predictor"] = repo
            rows = []
            for label, cli in (("light (no extras)", venv / "bin" / "sparseeval"),
                               ("full (.venv: [test] = fit, pipeline, serve + test tools)", REPO / ".venv" / "bin" /
                                "sparseeval")):
                cache = tmp / f"cache-{len(rows)}"
                env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARSEEVAL_DB")}
                env |= {"HF_ENDPOINT": server.url, "HF_HUB_CACHE": str(cache), "SPARSEEVAL_DATA_DIR": str(tmp)}
                command = ["predict", "--no-db", "--predictor", "hf://bench/predictor", "--answers", str(answers)]
                first = timed(cli, command, env, tmp)
                cached = [timed(cli, command, env, tmp) for _ in range(args.runs)]
                env["HF_HUB_OFFLINE"] = "1"
                offline = statistics.median(timed(cli, command, env, tmp) for _ in range(args.runs))
                rows.append((label, first, statistics.median(cached), offline))
                shutil.rmtree(cache, ignore_errors=True)
        finally:
            server.close()
        light_venv = du_mb(venv)
    full_venv = du_mb(REPO / ".venv")
    print(f"predictor: {args.predictor} ({art.method}, k={art.k}, {art.benchmark}); answers: an lm-eval output folder")
    print()
    print("| install | size on disk (MB) |")
    print("|---|---:|")
    print(f"| light: fresh venv, `pip install <wheel>` (no extras), {install_s:.0f} s to install | {light_venv:.0f} |")
    print(f"| light, without pip/setuptools of the venv itself | {light_venv - tooling:.0f} |")
    light_closure = installed_mb(closure(LIGHT_EXTRAS))
    print(f"| light closure (distributions of `sparseeval`, measured in .venv) | {light_closure:.0f} |")
    print(f"| full closure (`sparseeval[fit,pipeline,serve]`, measured in .venv) | "
          f"{installed_mb(closure(FULL_EXTRAS)):.0f} |")
    print(f"| this checkout's .venv (full + test tools: lm-eval, kubernetes, ...) | {full_venv:.0f} |")
    print()
    print("| `sparseeval predict --predictor hf://... --answers RUN` | first run (download) s | cached s (median) | "
          "HF_HUB_OFFLINE=1 s (median) |")
    print("|---|---:|---:|---:|")
    for label, first, cached, offline in rows:
        print(f"| {label} | {first:.2f} | {cached:.2f} | {offline:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
