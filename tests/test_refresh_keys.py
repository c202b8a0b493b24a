"""Which settings make a benchmark stale: every refresh setting, changed one at a time.

A refresh skips when its fit key (data version and every fit setting) is decided and its
comparison key has rows. A setting left out of a key is a silent no-op: change it and nothing
happens (planted as ``coverage_tolerance`` dropped from the fit key, which no test noticed, and
``alpha``, which one did). So the table below names, for **every** field of the settings
resource, the keys a change of it must change; a field it does not name fails the test, so a new
setting is classified when it is added.

The last test asks the real sensors, on a store a real (small) refresh left behind: unchanged
settings request nothing (a sensor that keys its question differently from the fit step asks
again every tick), a fit setting's change requests a refresh of every benchmark, a comparison
setting's change a comparison (its own job, after the refresh), each with the right reason, and
each irrelevant change requests nothing.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest

from pipelines.resources import SettingsResource
from sparseeval.core import settings as defaults
from sparseeval.publish.refresh import comparison_key, fit_key, joint_data_version, joint_key_settings

FIT, COMPARISON, JOINT = "fit", "comparison", "joint"
#: what the tests start from (small: the real refresh below runs on it)
BASE: dict[str, Any] = {"k": 6, "method": "sparseeval-linear", "compare_methods": "random-linear", "compare_ks": "6",
                        "compare_seeds": 1}

#: every field of SettingsResource: another value, and the keys a change to it must change (a fit
#: setting changes the joint predictor's key too; ``joint_benchmarks`` changes that key alone)
ROWS: dict[str, tuple[Any, set[str]]] = {
    "k": (8, {FIT, JOINT}),
    "method": ("sparseeval-mlp", {FIT, JOINT}),
    "seed": (1, {FIT, JOINT, COMPARISON}),
    "val_frac": (0.15, {FIT, JOINT, COMPARISON}),
    "test_frac": (0.25, {FIT, JOINT, COMPARISON}),
    "split_policy": ("family", {FIT, JOINT, COMPARISON}),
    "alpha": (0.2, {FIT, JOINT}),
    "coverage_tolerance": (0.05, {FIT, JOINT}),
    "challenger_margin": (0.1, {FIT, JOINT}),
    "challenger_min_days": (7.0, {FIT, JOINT}),
    "frontier_silent_max": (0.3, {FIT, JOINT}),
    "frontier_quantile": (0.8, {FIT, JOINT}),
    "compare_methods": ("random-linear,sparseeval-linear", {COMPARISON}),
    "compare_ks": ("6,8", {COMPARISON}),
    "compare_seeds": (2, {COMPARISON}),
    "compare_budget_s": (60.0, {COMPARISON}),
    # when a comparison runs (many new models, else the weekly schedule), not what it computes
    "compare_new_share": (0.5, set()),
    "joint_benchmarks": ("arc,gsm8k", {JOINT}),
    # a benchmark's predictor's probe (the joint predictor has none): 0 turns it off, which changes the key
    "probe_items": (0, {FIT}),
    "probe_batch": (10, {FIT}),
    "probe_max": (100, {FIT}),
    "probe_target": (3.0, {FIT}),
    "probe_from": (0.5, {FIT}),
    # the same fit on any device (the device only decides where it runs)
    "device": ("cpu", set()),
    # where the champion is published, not what is fitted or decided
    "predictor_dir": ("/elsewhere/predictors", set()),
}

#: settings of sparseeval.core.settings that are no refresh setting (the rest are SettingsResource fields)
NOT_REFRESH = {"data_dir", "db", "source", "hub_tasks", "duckdb_memory", "sensor_interval",
               # the fit's threads (not the result's: a near-tie may differ, see device.cpu_threads), the
               # served mode's binaries and ports, the crash tests' hook
               "threads", "pg_bin", "serve_dagster_port", "serve_mlflow_port", "serve_mlflow_host", "service",
               "failpoint"}
#: a settings name whose resource field is spelled otherwise
FIELD_OF = {"predictors": "predictor_dir"}


def _changed(name: str) -> SettingsResource:
    return SettingsResource(**{**BASE, name: ROWS[name][0]})


def _keys(settings: SettingsResource) -> dict[str, str]:
    versions = {"arc": "v-arc", "gsm8k": "v-gsm8k"}
    declared = settings.settings()
    return {FIT: fit_key("v-arc", declared.key_settings(FIT)),
            COMPARISON: comparison_key("v-arc", declared.key_settings(COMPARISON)),
            JOINT: fit_key(joint_data_version(versions), joint_key_settings(declared, sorted(versions)))}


def test_every_setting_is_classified() -> None:
    assert set(ROWS) == set(SettingsResource.model_fields), "classify the new setting in ROWS"
    fields = {FIELD_OF.get(name, name) for name in defaults.SETTINGS} - NOT_REFRESH
    assert fields <= set(ROWS), f"settings read elsewhere than the resource: {fields - set(ROWS)}"
    for name, (value, _) in ROWS.items():
        assert getattr(SettingsResource(**BASE), name) != value, name  # the row really changes it


@pytest.mark.parametrize("name", sorted(ROWS))
def test_a_setting_changes_exactly_the_keys_it_affects(name: str) -> None:
    base, changed = _keys(SettingsResource(**BASE)), _keys(_changed(name))
    assert {key for key in base if base[key] != changed[key]} == ROWS[name][1]


def test_how_the_probe_asks_changes_no_key_without_a_probe() -> None:
    without = {**BASE, "probe_items": 0}
    base, changed = _keys(SettingsResource(**without)), _keys(SettingsResource(**without, probe_from=0.5,
                                                                               probe_target=3.0))
    assert base == changed


# --- through the real sensor, after a real refresh ---------------------------------------------------


@pytest.fixture(scope="module")
def refreshed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A small benchmark ingested, then refreshed by the real assets (fit, checks, publication, then
    the comparison in its own run): what ``make run`` leaves behind."""
    from pipelines.assets import candidate, challenger, champion, evaluation, raw_results, response_matrix
    from pipelines.checks import publishing_checks
    from pipelines.io_managers import MatrixIOManager
    from pipelines.partitions import add_benchmarks
    from pipelines.resources import SourceResource, StoreResource, TrackingResource
    from sparseeval.data.synthetic import generate_leaderboard, write_leaderboard

    root = tmp_path_factory.mktemp("keys")
    write_leaderboard(generate_leaderboard(n_families=8, models_per_family=8, benchmarks={"arc": 40}, seed=2),
                      root / "source" / "first")
    resources = {"store": StoreResource(path=str(root / "sparseeval.duckdb")),
                 "tracking": TrackingResource(data_dir=str(root)),
                 "source": SourceResource(path=str(root / "source")),
                 "settings": SettingsResource(**BASE, predictor_dir=str(root / "predictors")),
                 "io_manager": MatrixIOManager(base_dir=str(root / "io"))}
    (root / "dagster").mkdir()
    instance = dg.DagsterInstance.local_temp(tempdir=str(root / "dagster"))
    assert dg.materialize([raw_results], resources=resources, instance=instance).success
    add_benchmarks(instance, ["arc"])
    refresh = [response_matrix, candidate, champion, challenger]
    # passed or failed checks: either way a decision is recorded for the key
    dg.materialize([*refresh, *publishing_checks], partition_key="arc", resources=resources, instance=instance,
                   selection=refresh, raise_on_error=False)
    assert dg.materialize([response_matrix, evaluation], partition_key="arc", resources=resources,
                          instance=instance, selection=[evaluation]).success
    db = resources["store"].store()
    assert list(db.latest_fit_keys()) == ["arc"] and len(db.comparison_keys()) == 1
    return {"resources": resources, "instance": instance, "root": root}


def _requests(refreshed: dict, settings: SettingsResource) -> dict[str, dict[str, str]]:
    """One tick of the refresh sensor and of the comparison sensor, as the daemon evaluates them:
    job -> partition -> why."""
    from pipelines.automation import comparison_sensor, stale_benchmarks_sensor
    from pipelines.definitions import defs

    instance = refreshed["instance"]
    out = {}
    for job, sensor in (("refresh", stale_benchmarks_sensor), ("compare", comparison_sensor)):
        tick = sensor.evaluate_tick(dg.build_sensor_context(
            instance=instance, instance_ref=instance.get_ref(), definitions=defs,
            resources={"store": refreshed["resources"]["store"], "settings": settings}))
        out[job] = {r.partition_key: r.tags["sparseeval/why"] for r in tick.run_requests or []}
    return out


@pytest.mark.slow  # a full Dagster refresh behind it (ingest, fit, checks, publication): make test, not test-fast
def test_the_sensors_request_exactly_when_a_setting_changes_a_key(refreshed: dict) -> None:
    """Every row in one test (one refresh behind them all, also under xdist): the mismatches listed together."""
    published = str(refreshed["root"] / "predictors")
    wrong = []
    for name in [None, *sorted(ROWS)]:
        settings = SettingsResource(**{**BASE, "predictor_dir": published, **({name: ROWS[name][0]} if name else {})})
        affects = set() if name is None else ROWS[name][1]
        requested = _requests(refreshed, settings)
        if FIT in affects:  # the refresh first; its comparison waits until the fit key is decided
            expected, reason = {"refresh": ["arc"], "compare": []}, "new data or changed settings"
        elif COMPARISON in affects:  # the comparison alone, in its own job
            expected, reason = {"refresh": [], "compare": ["arc"]}, "never compared under the current comparison"
        else:  # unchanged, or a change that decides nothing a refresh does (the joint list: the joint sensor)
            expected, reason = {"refresh": [], "compare": []}, ""
        got = {job: list(asked) for job, asked in requested.items()}
        whys = [why for asked in requested.values() for why in asked.values()]
        if got != expected or not all(reason in why for why in whys):
            wrong.append(f"{name or 'unchanged settings'}: requested {requested}, expected {expected} ({reason})")
    assert wrong == [], "\n".join(wrong)
