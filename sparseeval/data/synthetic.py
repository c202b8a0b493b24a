"""A seeded, realistic synthetic leaderboard: the product's default data.

Why synthetic data at all: the pipeline must run end to end on a fresh checkout with nothing
downloaded, and the tests need a leaderboard whose structure is known. Why *realistic*: SparseEval
and its baselines only differ on data that looks like a real leaderboard, so the generator copies
the features that matter for anchor selection:

* **families of fine-tunes** - a base model per organisation with a multidimensional ability, and
  fine-tunes that are small perturbations of it (near-duplicates, which is what makes a family
  split harder than a random one);
* **time** - newer families are on average stronger, so a split by date (train on older, test on
  newer) is a real extrapolation, as on the live leaderboard;
* **items** - a multidimensional 3PL item response model: per-item loadings on the ability
  dimensions (each benchmark has its own profile, items of one topic or MMLU subject share a
  direction), a difficulty, and a guessing floor (0.25 for 4-way multiple choice, 0.5 for
  two-way, 0 for free generation like GSM8K);
* **partial pools** - the score is the accuracy over the benchmark's *full* item pool, but only a
  subset of items is written to ``responses``, exactly like ``data/openllm_v1``; a row mean is
  therefore a correlated but biased estimate of the score, and methods must be fitted to ``score``;
* **missing cells** - a few cells dropped at random (never a whole row).

Everything is vectorised numpy over (models x items) arrays and driven by one seed, so the same
seed gives identical frames and the generator stays fast at thousands of models.
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl

from sparseeval.core.atomic import atomic_write

#: default benchmarks and their full item-pool sizes (about 600 models x 1,500 items in all: the
#: whole pipeline runs on it in a few minutes on two CPU cores)
DEFAULT_BENCHMARKS: dict[str, int] = {
    "arc": 300,
    "hellaswag": 250,
    "mmlu": 400,
    "gsm8k": 200,
    "truthfulqa": 150,
    "winogrande": 200,
}

#: per known benchmark: (loading profile on the first ability dims, mean accuracy to calibrate to,
#: guessing floor, number of latent topics). Means follow the Open LLM Leaderboard v1 population.
_PROFILES: dict[str, tuple[tuple[float, ...], float, float, int]] = {
    "arc": ((1.0, 0.35, 0.35), 0.58, 0.25, 8),
    "hellaswag": ((1.0, 0.0, 0.25), 0.80, 0.25, 6),
    "mmlu": ((1.0, 0.25, 0.7), 0.56, 0.25, 57),
    "gsm8k": ((0.9, 1.1, 0.0), 0.36, 0.0, 5),
    "truthfulqa": ((0.35, 0.0, 1.0), 0.39, 0.2, 6),
    "winogrande": ((1.0, 0.3, 0.0), 0.72, 0.5, 4),
}

#: the 57 MMLU subjects, for realistic ``subject.index`` item ids
MMLU_SUBJECTS: tuple[str, ...] = (
    "abstract_algebra", "anatomy", "astronomy", "business_ethics", "clinical_knowledge",
    "college_biology", "college_chemistry", "college_computer_science", "college_mathematics",
    "college_medicine", "college_physics", "computer_security", "conceptual_physics", "econometrics",
    "electrical_engineering", "elementary_mathematics", "formal_logic", "global_facts",
    "high_school_biology", "high_school_chemistry", "high_school_computer_science",
    "high_school_european_history", "high_school_geography", "high_school_government_and_politics",
    "high_school_macroeconomics", "high_school_mathematics", "high_school_microeconomics",
    "high_school_physics", "high_school_psychology", "high_school_statistics", "high_school_us_history",
    "high_school_world_history", "human_aging", "human_sexuality", "international_law", "jurisprudence",
    "logical_fallacies", "machine_learning", "management", "marketing", "medical_genetics",
    "miscellaneous", "moral_disputes", "moral_scenarios", "nutrition", "philosophy", "prehistory",
    "professional_accounting", "professional_law", "professional_medicine", "professional_psychology",
    "public_relations", "security_studies", "sociology", "us_foreign_policy", "virology",
    "world_religions",
)

_ARCHS = ("llama-like", "mistral-like", "qwen-like", "falcon-like", "neox-like", "phi-like", "gemma-like")
_SIZES_B = np.array([1.1, 3.0, 7.0, 7.0, 8.0, 13.0, 34.0, 70.0])  # billions; 7B is the most common
_TUNES = ("sft", "dpo", "instruct", "chat", "merge", "orpo")
_START = datetime(2023, 1, 1)
_SPAN_DAYS = 730  # two years of submissions

RESPONSES_SCHEMA = {"model": pl.String, "benchmark": pl.String, "item_id": pl.String, "correct": pl.Int8}
SCORES_SCHEMA = {"model": pl.String, "benchmark": pl.String, "score": pl.Float64}
MODELS_SCHEMA = {"model": pl.String, "submitted_at": pl.Datetime("us"), "n_params": pl.Float64,
                 "base_model": pl.String}


@dataclass(frozen=True)
class SyntheticLeaderboard:
    """A generated leaderboard in the long layout of ``data/openllm_v1`` plus model metadata.

    ``responses``: (model, benchmark, item_id, correct int8), only the written subset of each pool
    and without the dropped cells. ``scores``: (model, benchmark, score float64), accuracy over the
    full pool. ``models``: (model, submitted_at, n_params in billions, base_model; null for bases).
    ``pool_sizes``: full pool size per benchmark (the written subset is smaller).
    """

    responses: pl.DataFrame
    scores: pl.DataFrame
    models: pl.DataFrame
    pool_sizes: dict[str, int]
    seed: int


def _stable_seed(seed: int, name: str) -> int:
    """Per-benchmark sub-seed that does not depend on dict order or Python's salted ``hash``."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63)


def _models(rng: np.random.Generator, n_families: int, per_family: int,
            dims: int) -> tuple[pl.DataFrame, np.ndarray]:
    """Model metadata and the ability matrix (n_models x dims).

    The ability of a base grows with its size and its date; fine-tunes add a small perturbation
    (and a small mean gain) to their base's ability, so a family shares its profile across
    benchmarks.
    """
    n = n_families * per_family
    fam = np.repeat(np.arange(n_families), per_family)
    member = np.tile(np.arange(per_family), n_families)
    # families appear over the first ~80% of the window; fine-tunes follow their base
    fam_day = rng.uniform(0, 0.8 * _SPAN_DAYS, n_families)
    delay = np.where(member == 0, 0.0, rng.exponential(90.0, n))
    day = np.minimum(fam_day[fam] + delay, _SPAN_DAYS - 1)
    t = day / _SPAN_DAYS  # 0 .. 1

    fam_size = rng.choice(_SIZES_B, n_families)
    fam_arch = rng.integers(0, len(_ARCHS), n_families)
    size_effect = 0.3 * np.log2(fam_size / 7.0)
    base_ability = rng.normal(0.0, 0.6, (n_families, dims))
    base_ability[:, 0] += size_effect + 2.2 * (fam_day / _SPAN_DAYS) - 0.9
    if dims > 1:  # larger and newer models are also better at maths/reasoning, less strongly
        base_ability[:, 1] += 0.5 * size_effect + 0.8 * (fam_day / _SPAN_DAYS)
    tune_shift = rng.normal(0.0, 0.18, (n, dims)) + 0.08
    tune_shift[member == 0] = 0.0
    ability = base_ability[fam] + tune_shift
    # later fine-tunes of an old base benefit a little from better recipes
    ability[:, 0] += 0.4 * (t - fam_day[fam] / _SPAN_DAYS)

    orgs = np.array([f"org-{i:02d}" for i in range(n_families)], dtype=object)
    size_txt = np.array([f"{s:g}b" for s in _SIZES_B], dtype=object)
    base_name = (orgs + "/" + np.array(_ARCHS, dtype=object)[fam_arch] + "-"
                 + size_txt[np.searchsorted(_SIZES_B, fam_size)])
    tune = np.array(_TUNES, dtype=object)[rng.integers(0, len(_TUNES), n)]
    names = np.where(member == 0, base_name[fam],
                     base_name[fam] + "-" + tune + "-" + member.astype(str).astype(object))
    micros = np.round(day * 86_400).astype(np.int64) * 1_000_000  # whole seconds
    models = pl.DataFrame({
        "model": names.astype(str),
        "submitted_at": pl.Series(micros).cast(pl.Duration("us")) + _START,
        "n_params": fam_size[fam].astype(np.float64),
        "base_model": pl.Series(base_name[fam].astype(str)).set(pl.Series(member == 0), None),
    }, schema=MODELS_SCHEMA)
    return models, ability


def _item_ids(rng: np.random.Generator, name: str, n_items: int,
              n_topics: int) -> tuple[np.ndarray, np.ndarray]:
    """Item ids and topic per item. MMLU ids are ``subject.index``; others are pool indices."""
    topic = rng.integers(0, n_topics, n_items)
    if name == "mmlu":
        subj = np.array(MMLU_SUBJECTS, dtype=object)[topic % len(MMLU_SUBJECTS)]
        idx = (pl.DataFrame({"s": subj.astype(str)})
               .select(pl.int_range(pl.len()).over("s")).to_series().to_numpy())
        return (subj + "." + idx.astype(str).astype(object)).astype(str), topic
    return np.arange(n_items).astype(str), topic


def _calibrate(logit: np.ndarray, guess: float, target: float) -> float:
    """Difficulty offset so that the mean expected accuracy equals ``target`` (bisection: the mean
    is monotone in the offset), which keeps score levels realistic whatever the model mix."""
    lo, hi = -15.0, 15.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        p = guess + (1 - guess) / (1 + np.exp(-(logit - mid)))
        lo, hi = (mid, hi) if p.mean() > target else (lo, mid)
    return 0.5 * (lo + hi)


def _benchmark(rng: np.random.Generator, name: str, n_items: int, ability: np.ndarray,
               models: np.ndarray, written_frac: float,
               missing_frac: float) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Sample one benchmark: full-pool answers, the score on the full pool, the written subset."""
    dims = ability.shape[1]
    profile, target, guess, n_topics = _PROFILES.get(name, (None, float(rng.uniform(0.4, 0.7)), 0.25, 6))
    prof = np.zeros(dims)
    if profile is None:
        prof[0] = 1.0
        prof[1:] = rng.uniform(0.0, 0.8, dims - 1)
    else:
        m = min(dims, len(profile))
        prof[:m] = profile[:m]
        prof[m:] = rng.uniform(0.0, 0.3, dims - m)
    n_topics = max(1, min(n_topics, n_items))
    item_ids, topic = _item_ids(rng, name, n_items, n_topics)
    topic_dir = rng.normal(0.0, 0.35, (n_topics, dims))
    scale = rng.lognormal(0.0, 0.3, n_items)[:, None]  # discrimination magnitude
    loadings = np.abs(prof[None, :] + topic_dir[topic] + rng.normal(0.0, 0.15, (n_items, dims))) * scale
    difficulty = rng.normal(0.0, 1.2, n_items) + rng.normal(0.0, 0.5, n_topics)[topic]
    logit = ability @ loadings.T * 1.6 - difficulty[None, :]
    logit -= _calibrate(logit, guess, target)
    p = guess + (1 - guess) / (1 + np.exp(-logit))
    correct = (rng.random(p.shape) < p).astype(np.int8)
    score = correct.mean(axis=1, dtype=np.float64)  # accuracy over the FULL pool

    # the written subset favours informative items (high variance across models), like the IRT-chosen
    # subset of data/openllm_v1: its row mean is then biased, not just a noisier score
    n_written = max(1, round(written_frac * n_items))
    var = p.mean(axis=0) * (1 - p.mean(axis=0))
    weight = 0.05 + var / max(float(var.max()), 1e-12)
    cols = np.sort(rng.choice(n_items, n_written, replace=False, p=weight / weight.sum()))
    sub = correct[:, cols]
    drop = rng.random(sub.shape) < missing_frac
    full_rows = drop.all(axis=1)  # never drop a whole row: restore one random cell
    drop[np.flatnonzero(full_rows), rng.integers(0, n_written, int(full_rows.sum()))] = False
    r, c = np.nonzero(~drop)
    responses = pl.DataFrame({
        "model": models[r], "benchmark": np.full(len(r), name), "item_id": item_ids[cols][c],
        "correct": sub[r, c],
    }, schema=RESPONSES_SCHEMA)
    scores = pl.DataFrame({"model": models, "benchmark": np.full(len(models), name), "score": score},
                          schema=SCORES_SCHEMA)
    return responses, scores


def generate_leaderboard(*, n_families: int = 60, models_per_family: int = 10,
                         benchmarks: dict[str, int] | None = None, ability_dims: int = 3,
                         missing_frac: float = 0.02, written_frac: float = 0.6,
                         seed: int = 0) -> SyntheticLeaderboard:
    """Generate a leaderboard of ``n_families * models_per_family`` models.

    ``benchmarks`` maps a name to its full pool size (default :data:`DEFAULT_BENCHMARKS`); known
    leaderboard names get realistic profiles, other names a seeded random one. ``written_frac`` of
    each pool is written to ``responses``; ``missing_frac`` of the written cells are dropped.
    """
    benchmarks = dict(DEFAULT_BENCHMARKS if benchmarks is None else benchmarks)
    if n_families < 1 or models_per_family < 1:
        raise ValueError("n_families and models_per_family must be at least 1")
    if ability_dims < 1:
        raise ValueError(f"ability_dims must be at least 1, got {ability_dims}")
    if not 0.0 <= missing_frac < 1.0:
        raise ValueError(f"missing_frac must be in [0, 1), got {missing_frac}")
    if not 0.0 < written_frac <= 1.0:
        raise ValueError(f"written_frac must be in (0, 1], got {written_frac}")
    if not benchmarks or any(int(n) < 1 for n in benchmarks.values()):
        raise ValueError(f"benchmarks need at least one item each, got {benchmarks}")

    rng = np.random.default_rng(seed)
    models, ability = _models(rng, n_families, models_per_family, ability_dims)
    names = models.get_column("model").to_numpy()
    parts = [
        _benchmark(np.random.default_rng(_stable_seed(seed, b)), b, int(n), ability, names,
                   written_frac, missing_frac)
        for b, n in benchmarks.items()
    ]
    return SyntheticLeaderboard(
        responses=pl.concat([p[0] for p in parts]),
        scores=pl.concat([p[1] for p in parts]),
        models=models,
        pool_sizes={b: int(n) for b, n in benchmarks.items()},
        seed=seed,
    )


def scrambled(lb: SyntheticLeaderboard, *, seed: int) -> SyntheticLeaderboard:
    """The same models and items with answers and scores that are pure noise (each answer a fair coin,
    each score uniform in [0.2, 0.8], independent of the answers): what a broken harness run looks like.
    No anchor set can predict these scores, so a predictor fitted on them must fail the publishing
    checks; the lifecycle simulation and the blocking-check test use it."""
    rng = np.random.default_rng(seed)
    responses = lb.responses.with_columns(
        correct=pl.Series(rng.integers(0, 2, lb.responses.height), dtype=pl.Int8))
    scores = lb.scores.with_columns(score=pl.Series(rng.uniform(0.2, 0.8, lb.scores.height)))
    return dataclasses.replace(lb, responses=responses, scores=scores)


def write_leaderboard(lb: SyntheticLeaderboard, folder: str | Path) -> dict[str, Path]:
    """Write ``responses``, ``scores`` and ``models`` as zstd parquet into ``folder``.

    Each file is written to a temporary name and renamed, so a reader never sees half a file and
    rewriting the same leaderboard is idempotent.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for name, frame in (("responses", lb.responses), ("scores", lb.scores), ("models", lb.models)):
        path = folder / f"{name}.parquet"
        atomic_write(path, lambda tmp, frame=frame: frame.write_parquet(tmp, compression="zstd"))
        out[name] = path
    return out
