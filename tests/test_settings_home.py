"""Every setting in one home: ``sparseeval/core/settings.py``.

* no module of ``sparseeval/``, ``pipelines/`` or ``bench/`` touches an environment variable that is
  neither a declared setting (:data:`sparseeval.core.settings.SETTINGS`) nor on the allow-list of other
  tools' variables (:data:`sparseeval.core.settings.FOREIGN`), however it spells the access (an AST scan);
* no module spells a literal default of a shared setting (seed, split fractions and policy, device,
  interval alpha, calibration share, OOD percentile) outside the few left on record below;
* docs/settings.md's tables are the ones :func:`sparseeval.core.settings.markdown_tables` generates;
* the defaults the library, the CLI and the Dagster resources take are the declared ones, and a bad
  value is refused naming the variable.

Static and in-process only (no subprocess): well under a second.
"""

from __future__ import annotations

import ast
import inspect
import math
import os
from pathlib import Path

import pytest

from sparseeval.core import settings, settings_table

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("sparseeval", "pipelines", "bench")
DECLARED = {s.env for s in settings.SETTINGS.values()} | set(settings.FOREIGN)


# ------------------------------------------------------------------------------- environment reads

def _is_environ(node: ast.AST, aliases: set[str]) -> bool:
    """``os.environ``, ``environ`` (from os) or a name bound to either."""
    if isinstance(node, ast.Attribute) and node.attr == "environ":
        return isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and (node.id == "environ" or node.id in aliases)


def _is_getter(node: ast.AST, env_aliases: set[str], getters: set[str]) -> bool:
    """``os.getenv``, ``getenv``, ``os.environ.get`` or a name bound to one of them."""
    if isinstance(node, ast.Attribute) and node.attr == "getenv":
        return isinstance(node.value, ast.Name) and node.value.id == "os"
    if isinstance(node, ast.Attribute) and node.attr == "get":
        return _is_environ(node.value, env_aliases)
    return isinstance(node, ast.Name) and (node.id == "getenv" or node.id in getters)


def environment_accesses(source: str) -> list[tuple[int, str | None]]:
    """(line, variable name) of every access to the environment by name in ``source``: reads
    (``os.environ.get/[]/in``, ``os.getenv``, through aliases such as ``env = os.environ``, per function)
    and writes (``[] =``, ``setdefault``, ``pop``). The name is None when it is not a literal or a
    module constant."""
    tree = ast.parse(source)
    constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}

    def name(key: ast.AST) -> str | None:
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
        if isinstance(key, ast.Name):
            return constants.get(key.id)
        return None

    def own_nodes(scope: ast.AST) -> list[ast.AST]:
        """The nodes of ``scope`` outside the functions defined in it (each function is its own scope)."""
        out, todo = [], list(ast.iter_child_nodes(scope))
        while todo:
            node = todo.pop()
            out.append(node)
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                todo.extend(ast.iter_child_nodes(node))
        return out

    def aliases(nodes: list[ast.AST]) -> tuple[set[str], set[str]]:
        """Names bound in ``nodes`` to the environment (``env = os.environ``) or to a getter
        (``get = os.environ.get``); a copy (``dict(os.environ)``) is neither."""
        env_aliases, getters = set(), set()
        for node in nodes:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                if _is_environ(node.value, set()):
                    env_aliases.add(node.targets[0].id)
                elif _is_getter(node.value, set(), set()):
                    getters.add(node.targets[0].id)
        return env_aliases, getters

    module_nodes = own_nodes(tree)
    module_env, module_get = aliases(module_nodes)
    scopes = [module_nodes] + [own_nodes(f) for f in ast.walk(tree)
                               if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    found: list[tuple[int, str | None]] = []
    for nodes in scopes:
        local_env, local_get = aliases(nodes)
        env_aliases, getters = module_env | local_env, module_get | local_get
        for node in nodes:
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                if _is_getter(func, env_aliases, getters) or (
                        isinstance(func, ast.Attribute) and func.attr in ("pop", "setdefault", "__getitem__")
                        and _is_environ(func.value, env_aliases)):
                    found.append((node.lineno, name(node.args[0])))
            elif isinstance(node, ast.Subscript) and _is_environ(node.value, env_aliases):
                found.append((node.lineno, name(node.slice)))
            elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                    and any(_is_environ(c, env_aliases) for c in node.comparators):
                found.append((node.lineno, name(node.left)))
    return found


def undeclared_accesses() -> list[str]:
    out = []
    for folder in SCANNED:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == REPO / "sparseeval" / "core" / "settings.py":
                continue
            for line, var in environment_accesses(path.read_text()):
                if var is None:
                    out.append(f"{path.relative_to(REPO)}:{line}: an environment variable named by an expression "
                               "(read a declared setting through sparseeval.core.settings instead)")
                elif var not in DECLARED:
                    out.append(f"{path.relative_to(REPO)}:{line}: {var} is neither in settings.SETTINGS nor on "
                               "the allow-list settings.FOREIGN")
    return out


def test_the_scan_sees_every_spelling_of_an_environment_access() -> None:
    """The scanner itself can fail: each way of reading the environment is found, with its name."""
    source = '''
import os
from os import environ, getenv
THREADS = "SPARSEEVAL_X1"
a = os.environ.get("SPARSEEVAL_X2", "3")
b = os.getenv("SPARSEEVAL_X3")
c = os.environ["SPARSEEVAL_X4"]
d = "SPARSEEVAL_X5" in os.environ
e = os.environ.get(THREADS)
env = os.environ
f = env.get("SPARSEEVAL_X6") or 5
g = environ["SPARSEEVAL_X7"]
h = getenv("SPARSEEVAL_X8")
get = os.environ.get
i = get("SPARSEEVAL_X9")
os.environ.setdefault("SPARSEEVAL_X10", "1")
os.environ["SPARSEEVAL_X11"] = "1"
j = os.environ.get(setting.env)
copy = dict(os.environ)
k = copy.get("NOT_AN_ENVIRONMENT_READ")
'''
    names = [n for _, n in environment_accesses(source)]
    assert sorted(n for n in names if n) == sorted(f"SPARSEEVAL_X{i}" for i in range(1, 12))
    assert names.count(None) == 1  # `setting.env`: not resolvable, so refused by the repository scan
    assert "NOT_AN_ENVIRONMENT_READ" not in names


def test_no_module_reads_an_undeclared_environment_variable() -> None:
    problems = undeclared_accesses()
    assert not problems, "environment variables read outside sparseeval/core/settings.py:\n" + "\n".join(problems)


def test_the_allow_list_and_the_settings_do_not_overlap_and_say_why() -> None:
    assert not set(settings.FOREIGN) & {s.env for s in settings.SETTINGS.values()}
    assert all(f.owner and f.why for f in settings.FOREIGN.values())
    assert all(s.env.startswith("SPARSEEVAL_") and s.help and s.scope in settings.SCOPES
               for s in settings.SETTINGS.values())


# ------------------------------------------------------------------------------- literal defaults

#: the parameters and fields whose default is a shared setting (``alpha``: the interval's miscoverage)
SHARED = {"seed": "seed", "val_frac": "val_frac", "test_frac": "test_frac", "split_policy": "split_policy",
          "policy": "split_policy", "device": "device", "alpha": "alpha", "calibration_frac": "calibration_frac",
          "ood_percentile": "ood_percentile", "frontier_quantile": "frontier_quantile"}
#: literal defaults still spelled outside settings.py, each with why; a new one fails the test, and so
#: does an entry here that is gone (remove it)
LEFT = {
    # the estimators' own constructor arguments (``alpha`` there is a ridge penalty, not the interval's)
    **{(p, None): "estimator arguments" for p in ("sparseeval/estimate/methods/",)},
    ("sparseeval/estimate/methods/device.py", "resolve_device"):
        "'auto' is the input the function maps, not a setting's default",
    ("sparseeval/data/synthetic.py", "generate_leaderboard"): "the synthetic leaderboard's own seed",
    ("sparseeval/estimate/evaluation.py", "ProtocolConfig"):
        "calibration_frac=0.0 means no calibration (not fit's share)",
    ("bench/light_install.py", "lm_eval_folder"): "a bench's synthetic data seed",
    ("bench/scale.py", "generate"): "a bench's synthetic data seed",
    ("bench/support/simulation.py", "__init__"): "the simulated deployment's own seed",
}


def literal_defaults() -> set[tuple[str, str]]:
    """(module, function or class) of every literal default of a :data:`SHARED` name outside settings.py."""
    found = set()
    for folder in SCANNED:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if rel == "sparseeval/core/settings.py":
                continue
            for owner in ast.walk(ast.parse(path.read_text())):
                if isinstance(owner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    a = owner.args
                    pos = a.posonlyargs + a.args
                    pairs = [*zip(pos[len(pos) - len(a.defaults):], a.defaults, strict=True),
                             *((x, d) for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None)]
                    names = [(arg.arg, d) for arg, d in pairs]
                elif isinstance(owner, ast.ClassDef):
                    names = [(n.target.id, n.value) for n in owner.body if isinstance(n, ast.AnnAssign)
                             and isinstance(n.target, ast.Name) and n.value is not None]
                else:
                    continue
                if any(n in SHARED and isinstance(d, ast.Constant) and d.value is not None for n, d in names):
                    found.add((rel, owner.name))
    return found


def test_no_module_spells_a_shared_default_again() -> None:
    found = literal_defaults()
    left_prefixes = [p for p, fn in LEFT if fn is None]
    new = sorted(f for f in found if f not in LEFT and not any(f[0].startswith(p) for p in left_prefixes))
    assert not new, ("defaults spelled outside sparseeval/core/settings.py (reference its constants instead): "
                     + ", ".join(f"{m}:{fn}" for m, fn in new))
    gone = sorted(k for k in LEFT if k[1] is not None and k not in found)
    assert not gone, f"no longer spelled, remove from LEFT: {gone}"


# ------------------------------------------------------------------------------- the settings table (docs/settings.md)

def test_the_settings_tables_are_generated_from_the_declarations(tmp_path: Path) -> None:
    readme = (REPO / "docs" / "settings.md").read_text()
    assert settings_table.table_block(readme) == settings_table.markdown_tables(), (
        "docs/settings.md's tables differ from sparseeval/core/settings.py: run `make settings-table`")
    for s in settings.SETTINGS.values():
        assert f"| `{s.env}` |" in readme
    # and the regeneration rewrites only the block: a stale table comes back, the rest stays
    stale = tmp_path / "settings.md"
    stale.write_text(readme.replace(f"| `{settings.SETTINGS['k'].env}` | `20` |", "| `SPARSEEVAL_K` | `25` |"))
    assert settings_table.write_tables(stale) and stale.read_text() == readme
    assert not settings_table.write_tables(stale)


# ------------------------------------------------------------------------------- the values

def _signature_default(func: object, name: str) -> object:
    return inspect.signature(func).parameters[name].default  # type: ignore[arg-type]


def test_library_cli_and_resources_take_the_declared_defaults() -> None:
    from pipelines.resources import SettingsResource
    from sparseeval.estimate import budget, calibrate, fitting, splits
    from sparseeval.estimate.evaluation import DEFAULT_METHODS, ProtocolConfig
    from sparseeval.interfaces.commands import evaluate

    s = settings.SETTINGS
    declared, proto = settings.RefreshSettings(), ProtocolConfig()
    assert (declared.k, declared.method, declared.seed, declared.alpha, declared.device) \
        == (20, "sparseeval-headroom", 0, 0.1, "auto")
    assert (declared.val_frac, declared.test_frac, declared.split_policy) \
        == (proto.val_frac, proto.test_frac, proto.split_policy) == (0.1, 0.2, "random")
    assert ProtocolConfig.of(declared) == proto
    assert (declared.coverage_tolerance, declared.challenger_margin, declared.challenger_min_days,
            declared.frontier_silent_max) == (0.1, 0.05, 30.0, 0.15)
    assert declared.compare_methods == s["compare_methods"].default_value and declared.compare_ks == (10, 20)
    assert declared.compare_seeds == 3 and declared.compare_new_share == 0.1
    assert declared.compare_budget_s == budget.DEFAULT_BUDGET_S == 300.0
    assert fitting.ProbeSettings.of(declared) == fitting.ProbeSettings()
    assert DEFAULT_METHODS == settings.PROTOCOL_METHODS and len(DEFAULT_METHODS) == 9
    assert _signature_default(splits.make_split, "val_frac") == 0.1
    assert _signature_default(splits.make_split, "test_frac") == 0.2
    assert _signature_default(fitting.fit_predictor, "calibration_frac") == 0.2 == fitting.VAL_FRAC * 2
    assert _signature_default(calibrate.calibrate, "ood_percentile") == 99.0
    assert _signature_default(budget.comparison_plan, "ks") == (10, 20)
    assert _signature_default(budget.comparison_plan, "seeds") == (0, 1, 2)
    # the resource's fields are the declaration's, and its defaults give the declared settings back
    assert set(SettingsResource.model_fields) == {*settings.RefreshSettings.model_fields, "predictor_dir"}
    assert SettingsResource().settings() == declared
    parser = evaluate.add_arguments(__import__("argparse").ArgumentParser())
    args = parser.parse_args(["--data", str(REPO)])
    assert (args.seeds, args.seed_offset, args.test_frac, args.val_frac, args.split) == (3, 0, 0.2, 0.1, "random")


def test_every_declared_default_parses() -> None:
    for s in settings.SETTINGS.values():
        s.default_value  # noqa: B018 (raises when a default is not of its declared type)


def test_a_bad_value_is_refused_naming_the_variable_and_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparseeval.estimate import fitting
    from sparseeval.estimate.budget import budget_from_env
    from sparseeval.estimate.methods.device import cpu_threads
    from_environment = settings.RefreshSettings.from_environment
    for env, call in (("SPARSEEVAL_K", from_environment),
                      ("SPARSEEVAL_COMPARE_KS", from_environment),
                      ("SPARSEEVAL_COMPARE_BUDGET_S", budget_from_env),
                      ("SPARSEEVAL_THREADS", cpu_threads)):
        monkeypatch.setenv(env, "lots")
        with pytest.raises(settings.SettingError, match=rf"\${env} must be .*, got 'lots'"):
            call()
        monkeypatch.delenv(env)
    for quantile in ("0.3", "1", "1.2"):  # a frontier cut outside [0.5, 1) leaves no side to train or test on
        monkeypatch.setenv("SPARSEEVAL_FRONTIER_QUANTILE", quantile)
        with pytest.raises(settings.SettingError, match=rf"\$SPARSEEVAL_FRONTIER_QUANTILE must be a number in "
                                                        rf"\[0.5, 1\), got '{quantile}'"):
            from_environment()
    monkeypatch.setenv("SPARSEEVAL_FRONTIER_QUANTILE", "0.8")
    assert from_environment().frontier_quantile == 0.8
    # a negative probe, a level with no model on one side, a target in percent of percent, a bar of "15"
    # meant as 15 %: refused here, not a note on every benchmark (or a check that never refuses)
    for env, value, kind in (("SPARSEEVAL_PROBE_ITEMS", "-3", "an integer >= 0"),
                             ("SPARSEEVAL_PROBE_FROM", "1.5", "a number strictly between 0 and 1"),
                             ("SPARSEEVAL_PROBE_FROM", "0", "a number strictly between 0 and 1"),
                             ("SPARSEEVAL_PROBE_TARGET", "0", r"points in \(0, 50\]"),
                             ("SPARSEEVAL_PROBE_BATCH", "0", "a positive integer"),
                             ("SPARSEEVAL_FRONTIER_SILENT_MAX", "15", r"a share in \[0, 1\]")):
        monkeypatch.setenv(env, value)
        with pytest.raises(settings.SettingError, match=rf"\${env} must be {kind}, got '{value}'"):
            from_environment()
        monkeypatch.delenv(env)
    monkeypatch.setenv("SPARSEEVAL_PROBE_ITEMS", "0")  # 0: no probe
    monkeypatch.setenv("SPARSEEVAL_PROBE_FROM", "0.5")
    assert (from_environment().probe_items, from_environment().probe_from) == (0, 0.5)
    assert fitting.ProbeSettings.of(from_environment()) is None
    monkeypatch.setenv("SPARSEEVAL_COMPARE_BUDGET_S", "0")
    assert budget_from_env() == math.inf
    monkeypatch.setenv("SPARSEEVAL_K", " 7 ")
    monkeypatch.setenv("SPARSEEVAL_COMPARE_METHODS", "random, sparseeval-linear,")
    assert from_environment().k == 7
    assert from_environment().compare_methods == ("random", "sparseeval-linear")
    monkeypatch.setenv("SPARSEEVAL_K", "   ")  # blank: unset, the default
    assert from_environment().k == settings.DEFAULT_K


def test_the_cli_refuses_a_bad_value_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from sparseeval.interfaces import cli
    from sparseeval.interfaces.serve import cli as serve_cli

    monkeypatch.setenv("SPARSEEVAL_K", "x")
    assert cli.main(["fit", "--data", str(REPO), "--benchmark", "arc"]) == 2
    assert capsys.readouterr().err.strip() == "error: $SPARSEEVAL_K must be a positive integer, got 'x'"
    monkeypatch.setenv("SPARSEEVAL_SERVE_MLFLOW_PORT", "5k")
    with pytest.raises(SystemExit, match=r"serve: \$SPARSEEVAL_SERVE_MLFLOW_PORT must be a positive integer, got '5k'"):
        serve_cli.main(["status"])


# ------------------------------------------------------------------------------- one declaration

#: a refresh setting added the way a developer adds one: one line in RefreshSettings
NEW_FIELD = ('    demo_shrink: Share = setting(0.3, "a setting the test adds: how far a demo shrinks", '
             'keys=(FIT,))\n')
PROBE_NEW_SETTING = """
import argparse, json, os
from sparseeval.core import settings, settings_table
from sparseeval.interfaces.commands import refresh
from sparseeval.interfaces.commands.arguments import add_setting_arguments, settings_from
from pipelines.resources import SettingsResource, default_resources
from sparseeval.publish.refresh import fit_key
out = {"home": settings.__file__, "variable": settings.SETTINGS["demo_shrink"].env,
       "table": "| `SPARSEEVAL_DEMO_SHRINK` | `0.3` |" in settings_table.markdown_tables(),
       "refresh_help": "demo_shrink" in refresh.SETTINGS,
       "resource_default": SettingsResource.model_fields["demo_shrink"].default}
default = settings.RefreshSettings()
os.environ["SPARSEEVAL_DEMO_SHRINK"] = "0.4"
chosen = settings.RefreshSettings.from_environment()
resource = default_resources()["settings"]
parser = argparse.ArgumentParser()
add_setting_arguments(parser, "demo_shrink")
out |= {"environment": chosen.demo_shrink, "resource": [resource.demo_shrink, resource.settings().demo_shrink],
        "cli": settings_from(parser.parse_args(["--demo-shrink", "0.5"]), "demo_shrink").demo_shrink,
        "fit_key": [chosen.key_settings(settings.FIT).get("demo_shrink"),
                    fit_key("v", chosen.key_settings(settings.FIT))
                    != fit_key("v", default.key_settings(settings.FIT))],
        "other_keys": [k for k in (settings.JOINT, settings.COMPARISON) if "demo_shrink" in chosen.key_settings(k)]}
os.environ["SPARSEEVAL_DEMO_SHRINK"] = "30"
try:
    settings.RefreshSettings.from_environment()
except settings.SettingError as exc:
    out["refused"] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.slow  # a copy of the code in a subprocess: make test runs it, make test-fast leaves it out
def test_a_setting_declared_once_reaches_the_environment_resource_cli_keys_and_table(tmp_path: Path) -> None:
    """Adding a refresh setting is one edit: a field added to ``RefreshSettings`` (in a copy of the code) is read
    from its variable, refused naming it, a field of the Dagster resource, an option of the CLI, an entry of
    the keys it declares (and of no other), a row of the settings table and of ``sparseeval refresh --help``."""
    import json
    import shutil
    import subprocess
    import sys

    for part in ("sparseeval", "pipelines"):
        shutil.copytree(REPO / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    declared = tmp_path / "sparseeval" / "core" / "settings.py"
    source = declared.read_text()
    anchor = "    KINDS: ClassVar[tuple[str, ...]] = (FIT, JOINT, COMPARISON)\n"
    assert source.count(anchor) == 1
    declared.write_text(source.replace(anchor, NEW_FIELD + "\n" + anchor))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "SPARSEEVAL_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-c", PROBE_NEW_SETTING], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["home"] == str(declared)  # the copy, not the installed package
    assert got["variable"] == "SPARSEEVAL_DEMO_SHRINK" and got["table"] and got["refresh_help"]
    assert got["resource_default"] == 0.3 and got["resource"] == [0.4, 0.4]
    assert got["environment"] == 0.4 and got["cli"] == 0.5
    assert got["fit_key"] == [0.4, True] and got["other_keys"] == []
    assert got["refused"] == "$SPARSEEVAL_DEMO_SHRINK must be a share in [0, 1], got '30'"
