"""The blocking publishing checks, as standalone asset checks on ``candidate``, ``challenger`` and
``joint_anchors``.

The fit step decides the checks with the library's predicates (:func:`sparseeval.publish.refresh.publishing_checks`)
and stores their outcomes with the anchor set, in the same transaction as its new role; each check
here reports the stored outcome of the set that step evaluated in this run. Standalone checks are
what makes a skip honest: when the fit key is already decided the fit step materializes nothing,
so these checks do not run and the UI shows them as *skipped*, not as passed.
"""


import dagster as dg

from pipelines.assets import candidate, challenger
from pipelines.joint import joint_anchors
from pipelines.resources import StoreResource
from sparseeval.publish.refresh import PUBLISH_CHECKS, stored_checks


def _evaluated_set(context: dg.AssetCheckExecutionContext, asset_key: dg.AssetKey) -> int:
    """The anchor set the fit step of this run evaluated (from its materialization in this run)."""
    op = context.op_execution_context
    partition = op.partition_key if op.has_partition_key else None
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition] if partition else None), limit=1)
    record = records.records[0] if records.records else None
    if record is None or record.run_id != op.run_id:
        raise dg.Failure(f"{asset_key.to_user_string()} has no materialization in this run to check")
    materialization = record.asset_materialization
    assert materialization is not None
    return int(materialization.metadata["evaluated"].value)


def _report(context: dg.AssetCheckExecutionContext, store: StoreResource, asset_key: dg.AssetKey,
            name: str) -> dg.AssetCheckResult:
    anchor_set_id = _evaluated_set(context, asset_key)
    row = store.store().anchor_set(anchor_set_id)
    outcome = {c.name: c for c in stored_checks(row)}.get(name)
    if outcome is None:
        return dg.AssetCheckResult(passed=False, metadata={"anchor_set": anchor_set_id,
                                                           "error": "the fit step stored no outcome for this check"})
    return dg.AssetCheckResult(passed=outcome.passed, metadata={"anchor_set": anchor_set_id, **{
        k: v if isinstance(v, int | float | str | bool) or v is None else dg.MetadataValue.json(v)
        for k, v in outcome.metadata.items()}})


def _check(asset: dg.AssetsDefinition, name: str, description: str) -> dg.AssetChecksDefinition:
    # a challenger is checked and published inside its own step (the library publishes only what passed):
    # its checks report that outcome; the fit steps' checks gate the publish step after them
    @dg.asset_check(asset=asset, name=name, blocking=asset is not challenger, description=description)
    def check(context: dg.AssetCheckExecutionContext, store: StoreResource) -> dg.AssetCheckResult:
        return _report(context, store, asset.key, name)

    return check


publishing_checks = [_check(asset, name, description) for asset in (candidate, challenger, joint_anchors)
                     for name, description in PUBLISH_CHECKS.items()]
