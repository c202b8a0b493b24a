"""Where task folders exported before the library was drawn in parts find their task class: their YAML
names ``sparseeval.lm_eval_anchor_task.AnchorTask`` (new exports name :mod:`sparseeval.interfaces`')."""

from sparseeval.interfaces.lm_eval_anchor_task import AnchorTask

__all__ = ["AnchorTask"]
