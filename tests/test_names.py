"""A benchmark name is data: one encoding (sparseeval.data.names) wherever it names a file, a registry entry
or a partition, and the whole pipeline on names that hold '/', '..', ':', quotes, spaces, upper case,
non-ASCII characters and 300 characters writes nothing outside its folders."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from mlflow.tracking import MlflowClient

from sparseeval.data.benchmarks import BenchmarkNameError, canonical_benchmark, registered_model_name
from sparseeval.data.names import MAX_NAME, MAX_SLUG, benchmark_for, is_shortened, slug, unslug

ORDINARY = ["arc", "hellaswag", "mmlu", "truthfulqa", "winogrande", "gsm8k", "bbh", "gpqa", "math_hard", "musr",
            "ifeval", "mmlu_pro", "arc@0shot", "gsm8k@8shot", "sparseeval-joint", "leaderboard_bbh_navigate",
            "my-task.v2"]
WEIRD = ["../escape", "a/b", "A/B", "..", ".", "...", ".versions", "a...b", "a..b", "b.", "task:sub 1", "it's",
         'q"uote', "back\\slash", "50%", "%41", "ñandú 試験", "MyTask", "mytask", "MYTASK", "con", "CON", "nul.txt",
         "a~b", "x" * 300, "x" * 299 + "y", "é" * 200, " lead", "trail "]


def test_ordinary_names_are_their_own_slug() -> None:
    for name in ORDINARY:  # existing folders, registry entries and partitions keep their names
        assert slug(name) == name
    assert registered_model_name("arc") == "sparseeval-arc"
    assert registered_model_name("sparseeval-joint") == "sparseeval-joint"


def test_slug_is_safe_injective_and_reversible() -> None:
    slugs = {name: slug(name) for name in ORDINARY + WEIRD}
    assert len(set(slugs.values())) == len(slugs)  # collision-free
    assert len({s.lower() for s in slugs.values()}) == len(slugs)  # ... on a case-insensitive file system too
    for name, s in slugs.items():
        assert 0 < len(s) <= MAX_SLUG
        assert not set(s) & set("/\\:'\" ") and s.isascii()
        assert s not in (".", "..") and not s.startswith(".") and not s.endswith(".") and "..." not in s
        assert s.split(".")[0].lower() not in ("con", "nul")
        assert Path(s).name == s and len(f".{s}.link-12345678-abcdef12".encode()) <= 255
        if is_shortened(s):  # reversed through the stored names
            assert benchmark_for(s, list(slugs)) == name
        else:
            assert unslug(s) == name
            assert benchmark_for(s, list(slugs)) == name
        assert "/" not in registered_model_name(name) and ":" not in registered_model_name(name)
    assert is_shortened(slug("x" * 300)) and slug("x" * 300) != slug("x" * 299 + "y")
    for not_a_slug in ("a/b", "A", "%zz", "%41%", ".hidden", "a b", "%61"):  # %61 is 'a', which slug keeps
        with pytest.raises(ValueError):
            unslug(not_a_slug)
        assert benchmark_for(not_a_slug, ["a/b", "A", "a"]) is None


def test_names_too_long_to_store_are_refused_with_the_reason() -> None:
    assert canonical_benchmark("x" * MAX_NAME) == "x" * MAX_NAME
    with pytest.raises(BenchmarkNameError, match=f"at most {MAX_NAME}"):
        canonical_benchmark("x" * (MAX_NAME + 1))


# --- the whole pipeline --------------------------------------------------------------------------------

#: one of each kind of hostile name (kept few: each is a refresh run)
PIPELINE_NAMES = ["../escape", "a/b", "A/B", "..", "task:sub 1", "it's ñandú 試験", "L" + "x" * 299]


def _files(root: Path) -> list[Path]:
    out = []
    for folder, dirs, files in os.walk(root):
        out += [Path(folder) / f for f in files]
        out += [Path(folder) / d for d in dirs if (Path(folder) / d).is_symlink()]
    return out


def test_published_folders_are_named_by_the_encoding(tmp_path: Path) -> None:
    """The fast twin of the pipeline test below: a predictor saved and published under each hostile
    name is one versions folder and one published link, each named by the name's encoding, inside
    the predictors folder, and what the link serves is what was saved."""
    from sparseeval.data.synthetic import generate_leaderboard
    from sparseeval.estimate.fitting import fit_predictor
    from sparseeval.publish.publishing import VERSIONS, published_hash, save_version, swap_published

    lb = generate_leaderboard(n_families=8, models_per_family=8, benchmarks={"arc": 20}, seed=1)
    artifact = fit_predictor(lb.responses.rename({"correct": "score"}), lb.scores, "arc", 4, "sparseeval-linear",
                             seed=0)
    root = tmp_path / "data"
    predictors = root / "predictors"
    for name in PIPELINE_NAMES:
        folder, saved = save_version(artifact, predictors, name)
        swap_published(predictors, name, folder)
        # checked name by name, before the next one: a raw name's folder fails here on an assertion, not
        # later on a crash of the next name's publication (``a/b`` under a folder that does not exist)
        assert (predictors / slug(name)).is_symlink(), f"{name!r} is not published as {slug(name)!r}"
        assert published_hash(predictors, name) == saved.content_hash, name
    assert [p.name for p in tmp_path.iterdir()] == ["data"]
    for path in _files(root):
        assert path.resolve().is_relative_to(predictors.resolve()), path
    assert sorted(p.name for p in predictors.iterdir()) == sorted([VERSIONS, *(slug(b) for b in PIPELINE_NAMES)])
    assert sorted(p.name for p in (predictors / VERSIONS).iterdir()) == sorted(slug(b) for b in PIPELINE_NAMES)


@pytest.mark.slow
def test_pipeline_on_hostile_benchmark_names(tmp_path: Path) -> None:
    from pipelines.assets import raw_results
    from sparseeval.data.synthetic import generate_leaderboard, write_leaderboard
    from sparseeval.interfaces.cli import main as cli_main
    from sparseeval.publish.publishing import audit
    from tests.test_pipeline import PARTITIONED, REFRESH, _meta, _resources

    root = tmp_path / "data"
    source = root / "source"
    # the data of test_pipeline's arc (known to pass the publishing checks) under every hostile name
    arc = generate_leaderboard(n_families=12, models_per_family=8, benchmarks={"arc": 60, "gsm8k": 50}, seed=2)
    copies = {part: pl.concat([arc_part.with_columns(benchmark=pl.lit(name)) for name in PIPELINE_NAMES])
              for part, arc_part in (("responses", arc.responses.filter(pl.col("benchmark") == "arc")),
                                     ("scores", arc.scores.filter(pl.col("benchmark") == "arc")))}
    lb = replace(arc, **copies, pool_sizes=dict.fromkeys(PIPELINE_NAMES, arc.pool_sizes["arc"]))
    write_leaderboard(lb, source / "leaderboard")
    resources = _resources(root, source)
    instance = dg.DagsterInstance.ephemeral()
    ingest = dg.materialize([raw_results], resources=resources, instance=instance)
    assert ingest.success
    names = _meta(ingest, "raw_results")["benchmarks"]
    assert sorted(names) == sorted(PIPELINE_NAMES)  # stored as they are: names are data

    from pipelines.partitions import BENCHMARK_PARTITIONS, add_benchmarks, partition_key

    add_benchmarks(instance, names)
    keys = instance.get_dynamic_partitions(BENCHMARK_PARTITIONS)
    assert sorted(keys) == sorted(slug(b) for b in names) and not any("..." in k for k in keys)
    for name in names:
        result = dg.materialize(REFRESH, partition_key=partition_key(name), resources=resources, instance=instance,
                                selection=PARTITIONED, raise_on_error=False)
        assert result.success, name
        assert "published #" in _meta(result, "champion")["decision"]
        assert audit(resources["store"].store(), resources["tracking"].config(), root / "predictors", name) == []

    # nothing outside the data folder (the test's folder holds only it), and each name one folder deep
    assert [p.name for p in tmp_path.iterdir()] == ["data"]
    for path in _files(root):
        assert path.resolve().is_relative_to(root.resolve()), path
    predictors = root / "predictors"
    assert sorted(p.name for p in predictors.iterdir()) == sorted([".versions", *(slug(b) for b in names)])
    assert sorted(p.name for p in (predictors / ".versions").iterdir()) == sorted(slug(b) for b in names)
    assert sorted(p.name for p in (root / "io" / "response_matrix").iterdir()) == sorted(f"{slug(b)}.json"
                                                                                         for b in names)
    assert sorted(p.name for p in (root / "sparseeval.matrices").iterdir()) == sorted(slug(b) for b in names)
    client = MlflowClient(resources["tracking"].config().resolved_tracking_uri)
    assert sorted(m.name for m in client.search_registered_models()) == sorted(registered_model_name(b)
                                                                             for b in names)

    # `sparseeval predict --benchmark <name>` finds each published predictor by its name
    for name in names:
        model = lb.scores.filter(pl.col("benchmark") == name).get_column("model")[0]
        answers = tmp_path / "answers.csv"
        lb.responses.filter((pl.col("benchmark") == name) & (pl.col("model") == model)).write_csv(answers)
        out = tmp_path / "pred.json"
        assert cli_main(["predict", "--no-db",
                     "--registry", str(predictors), "--benchmark", name, "--answers", str(answers),
                         "--json", str(out)]) == 0
        rows = pl.read_json(out)
        assert rows["benchmark"].to_list() == [name] and rows["model"].to_list() == [model]
        answers.unlink()
        out.unlink()
