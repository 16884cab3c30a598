"""``Dataset.with_options``: attach ``Options`` to a pipeline (no stage of its own at run time)."""

from __future__ import annotations

import copy

from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage
from .._options import Options


class OptionsNode(DatasetNode):
    label = "with_options"
    shard_passes = True
    spec_passes = True
    adds_no_stage = True  # (its input's stage is its own: ``static_optimizations`` looks through it)

    def __init__(self, input_node: DatasetNode, options: Options) -> None:
        if not isinstance(options, Options):
            raise TypeError(f"with_options({options!r}): expected headrace.Options")
        super().__init__([input_node])
        self.opts = copy.copy(options)  # as tf.data: later changes to the object do not reach the pipeline

    def own_options(self) -> Options:
        return self.opts

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return self.inputs[0].make_iterator(ctx)
