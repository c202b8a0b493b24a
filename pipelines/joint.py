"""The joint predictor: one anchor set for several benchmarks (``sparseeval-joint``).

``joint_anchors`` reads every benchmark's matrix (all partitions of ``response_matrix``) and calls
the library's joint refresh (:func:`sparseeval.publish.refresh_joint.refresh_joint`, the same skeleton as a
benchmark's): it fits ``sparseeval-joint`` on the models that have every chosen benchmark, calibrates
it on that split's held-out models, compares it there with the per-benchmark method at the same total
number of items, and runs the same **blocking** publishing checks as a benchmark's candidate, output
by output.
``joint_champion`` publishes what passed, through the same code as a benchmark's champion: registry
entry ``sparseeval-joint`` with alias ``champion``, folder ``<predictors>/sparseeval-joint/`` (which
``sparseeval predict --benchmark sparseeval-joint`` reads), DuckDB role. Unchanged matrices and
settings: nothing is refit.

The joint set is re-selected whenever its data changes (unlike a benchmark's champion, whose anchors
are kept and refit); earlier versions stay in ``versions/`` and in the registry.
"""


import dagster as dg

from pipelines.assets import GROUP, OWNERS, publish_open, refresh_metadata
from pipelines.resources import SettingsResource, StoreResource, TrackingResource
from sparseeval.data.matrix import ResponseMatrix
from sparseeval.estimate.methods.joint import JOINT_METHOD
from sparseeval.publish.refresh_joint import refresh_joint


@dg.asset(group_name=GROUP, kinds={"pytorch", "duckdb", "mlflow"}, owners=OWNERS, tags={"layer": "fit"},
          pool="sparseeval_fit", ins={"response_matrix": dg.AssetIn(partition_mapping=dg.AllPartitionMapping())},
          output_required=False,
          description="sparseeval-joint (sparseeval.publish.refresh_joint.refresh_joint): one anchor set for several "
                      "benchmarks under one item budget (K per benchmark in all), fitted on the models that have "
                      "every benchmark, compared on the same held-out models with the per-benchmark method at the "
                      "same total, checked output by output (every benchmark and the mean) before it may be "
                      "published.")
def joint_anchors(context: dg.AssetExecutionContext, response_matrix: dict[str, ResponseMatrix],
                  store: StoreResource, settings: SettingsResource, tracking: TrackingResource):
    result = refresh_joint(response_matrix, store.store(), tracking.config(), settings.predictor_dir,
                           settings.settings(), log=context.log, run_tags={"dagster.run_id": context.run_id})
    if result.status != "skipped":  # skipped: no materialization, so the checks and the publish step skip
        yield dg.MaterializeResult(metadata=refresh_metadata(result))


@dg.asset(group_name=GROUP, kinds={"mlflow", "duckdb"}, owners=OWNERS, tags={"layer": "publish"},
          deps=[joint_anchors], pool="duckdb_writer",
          description="Publish the proposed joint predictor (only reached when joint_anchors' blocking checks "
                      "pass): registry entry sparseeval-joint with alias champion, folder "
                      "<predictors>/sparseeval-joint/, champion role in DuckDB.")
def joint_champion(context: dg.AssetExecutionContext, store: StoreResource, tracking: TrackingResource,
                   settings: SettingsResource) -> dg.MaterializeResult:
    return publish_open(context, JOINT_METHOD, store, tracking, settings)
