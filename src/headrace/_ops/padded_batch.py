"""``Dataset.padded_batch``: ``batch`` that pads every component to ``padded_shapes``.

``padded_shapes`` mirrors the element structure with one shape per component; ``None`` (or ``-1``) in a
shape pads that dimension to the largest size in the batch. Without ``padded_shapes`` each component is
padded to its static shape (the input's ``element_spec``: unknown dimensions to the batch's largest), and
a component of unknown rank raises ``ValueError`` when the pipeline is built, as in tf.data.
``padding_values`` is one scalar for every component or a matching structure; the default is 0 (``b""``
for strings; a ``str`` value becomes ``bytes``). Checked when the pipeline is built wherever the input's
spec is known: padded shapes that cannot hold the input's shapes, padding values of the wrong kind
(``stacking.padding_scalar``), ``None`` or dataset components (tf.data pads tensors only).
"""

from __future__ import annotations

from typing import Any

from .._args import count_arg
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, SpecOf
from .._engine.runs import RowRuns
from .._engine.stacking import _flatten_shapes, pad_and_stack, padding_scalar
from .._engine.stage import Stage
from .._spec import NoneTensorSpec, TensorShape, TensorSpec, batch_spec
from .._structure import flatten, pack_as
from .batch import batched_cardinality, make_batch_iterator, make_batcher


class PaddedBatchNode(DatasetNode):
    label = "padded_batch"
    shard_passes = True

    def __init__(self, input_node: DatasetNode, batch_size: int, padded_shapes: Any, padding_values: Any,
                 drop_remainder: bool) -> None:
        super().__init__([input_node])
        self.batch_size = count_arg(batch_size, "padded_batch(batch_size)", minimum=1,
                                    fix="use batch_size=1 for one-element batches")
        self.padded_shapes = padded_shapes
        self.padding_values = padding_values
        self.drop_remainder = bool(drop_remainder)
        self._shapes = self._check(input_node.static_spec())

    def _check(self, spec: Any) -> list[Any] | None:
        """Validate the arguments against the input's static spec; the padded shape of every component."""
        if spec is None:
            return None
        leaves = flatten(spec)
        for i, s in enumerate(leaves):
            if not isinstance(s, TensorSpec):
                what = "None" if isinstance(s, NoneTensorSpec) else repr(s)
                raise TypeError(f"padded_batch: component {i} is {what}; padded_batch pads tensor components only "
                                f"(element_spec {spec!r}); use batch() or map the component away first")
        if self.padded_shapes is None:
            for i, s in enumerate(leaves):
                if s.shape.rank is None:
                    raise ValueError(f"padded_batch: you must provide the padded_shapes argument because "
                                     f"component {i} has unknown rank (element_spec {spec!r})")
            shapes = [s.shape.dims for s in leaves]
        else:
            given = self.padded_shapes
            shapes = _flatten_shapes(given)
            if len(shapes) != len(leaves):
                raise ValueError(f"padded_batch: padded_shapes {given!r} has {len(shapes)} components but the "
                                 f"elements have {len(leaves)} ({spec!r}); give one shape per component")
            for i, (shape, s) in enumerate(zip(shapes, leaves)):
                if not _can_pad(TensorShape(shape), s.shape):
                    raise ValueError(f"padded_batch: the padded shape {TensorShape(shape)} of component {i} is "
                                     f"not compatible with its shape {s.shape}; give a shape of the same rank "
                                     "and at least its sizes (None pads to the batch's largest)")
        values = self.padding_values
        per = [values] * len(leaves) if not isinstance(values, dict | tuple | list) else flatten(values)
        if len(per) != len(leaves):
            raise ValueError(f"padded_batch: padding_values {values!r} has {len(per)} components but the "
                             f"elements have {len(leaves)} ({spec!r})")
        for i, (v, s) in enumerate(zip(per, leaves)):
            padding_scalar(v, s.dtype, f"padded_batch: padding_values for component {i}")
        return shapes

    def cardinality(self) -> int:
        return batched_cardinality(self.inputs[0].cardinality(), self.batch_size, self.drop_remainder)

    def compute_spec(self, spec_of: SpecOf) -> Any:
        spec = spec_of(self.inputs[0])
        if spec is None:
            return None
        shapes = self._shapes if self._shapes is not None else self._check(spec)
        if shapes is None:
            return None
        leaves = [TensorSpec(shape, s.dtype) for shape, s in zip(shapes, flatten(spec))]
        padded = pack_as(spec, leaves) if isinstance(spec, dict | tuple | list) else leaves[0]
        return batch_spec(padded, self.batch_size if self.drop_remainder else None, self.label)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return make_batch_iterator(self, ctx)

    def batch_over(self, ctx: IteratorContext, source: Stage, rows: RowRuns | None) -> Stage:
        """This batch's stage over ``source`` (``static_optimizations.Batching``)."""
        stage = ctx.stage_name(self, f"padded_batch({self.batch_size})")

        def combine(items: list[Any], where: str) -> Any:
            return pad_and_stack(items, self.padded_shapes, self.padding_values, where)

        return make_batcher(ctx, self, source, stage, combine, None, None, rows=rows)


def _can_pad(padded: TensorShape, shape: TensorShape) -> bool:
    """tf.data's rule: same rank, and no known padded size smaller than a known input size."""
    if padded.dims is None or shape.dims is None:
        return True
    if len(padded.dims) != len(shape.dims):
        return False
    return all(p is None or s is None or p >= s for p, s in zip(padded.dims, shape.dims))
