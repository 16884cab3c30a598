"""``Dataset.ragged_batch(batch_size, drop_remainder, row_splits_dtype)``: ``batch`` for elements whose
shapes differ (tf.data's ``ragged_batch``).

As tf.data decides from the input's element spec: a component whose shape is fully known is batched as
``batch`` does (a dense array); a component with an unknown dimension becomes *ragged*: a numpy object
array of the rows, each its own array (what ``tf.RaggedTensor.numpy()`` / ``as_numpy_iterator`` give: a
batch whose rows happen to have one shape is a dense array there too),
with spec ``RaggedTensorSpec(shape=(None, *dims), ragged_rank=1)``. Where the input's spec is not known
when the pipeline is built, the first element decides (its components of rank >= 1 are ragged). A spec
traced from a ``map`` function on two examples may call a dimension known that the real elements vary in
(a size that depends on the value in a way the examples did not show): such a batch raises ``ValueError``
naming the component, the spec and the fix (``map(..., output_signature=...)`` with ``None`` there).

Memory, state, parallelism: ``batch``'s (the same assembly and stage; only the combining differs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._args import count_arg
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, SpecOf
from .._engine.runs import RowRuns
from .._engine.stacking import _columns, _is_structure, stack
from .._engine.stage import Stage
from .._spec import RaggedTensorSpec, TensorSpec, as_dtype, batch_spec
from .._structure import flatten, pack_as
from .batch import batched_cardinality, make_batch_iterator, make_batcher


def _ragged_components(spec: Any) -> list[bool]:
    """Per component: whether it is ragged (a tensor spec with an unknown dimension or rank)."""
    return [isinstance(s, TensorSpec) and (s.shape.dims is None or None in s.shape.dims) for s in flatten(spec)]


def rows_array(col: list[Any]) -> np.ndarray:
    """The rows as a 1-D object array (each row kept as its own array), or stacked when every row has the
    same shape (what ``tf.RaggedTensor.numpy()`` returns for a uniform ragged tensor)."""
    arrays = [np.asarray(v) for v in col]
    if all(a.shape == arrays[0].shape for a in arrays):
        return np.stack(arrays)
    out = np.empty(len(col), dtype=object)
    for i, v in enumerate(col):
        out[i] = np.asarray(v)
    return out


class RaggedBatchNode(DatasetNode):
    label = "ragged_batch"

    def __init__(self, input_node: DatasetNode, batch_size: Any, drop_remainder: bool, row_splits_dtype: Any) -> None:
        super().__init__([input_node])
        self.batch_size = count_arg(batch_size, "ragged_batch(batch_size)", minimum=1,
                                    fix="use batch_size=1 for one-element batches")
        self.drop_remainder = bool(drop_remainder)
        self.row_splits_dtype = as_dtype(row_splits_dtype)
        if self.row_splits_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise TypeError(f"ragged_batch(row_splits_dtype={row_splits_dtype!r}): use int32 or int64")

    def cardinality(self) -> int:
        return batched_cardinality(self.inputs[0].cardinality(), self.batch_size, self.drop_remainder)

    def compute_spec(self, spec_of: SpecOf) -> Any:
        spec = spec_of(self.inputs[0])
        if spec is None:
            return None
        dim = self.batch_size if self.drop_remainder else None
        leaves = [RaggedTensorSpec((dim, *(s.shape.dims or ())), s.dtype, 1, self.row_splits_dtype) if ragged
                  else batch_spec(s, dim, self.label)
                  for s, ragged in zip(flatten(spec), _ragged_components(spec))]
        return pack_as(spec, leaves) if _is_structure(spec) else leaves[0]

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return make_batch_iterator(self, ctx)

    def batch_over(self, ctx: IteratorContext, source: Stage, rows: RowRuns | None) -> Stage:
        """This batch's stage over ``source`` (``static_optimizations.Batching``)."""
        stage = ctx.stage_name(self, f"ragged_batch({self.batch_size})")
        static = self.inputs[0].static_spec()
        ragged: list[bool] | None = None if static is None else _ragged_components(static)

        def combine(items: list[Any], where: str) -> Any:
            nonlocal ragged
            first = items[0]
            if ragged is None:
                ragged = [isinstance(v, np.ndarray) and v.ndim > 0 for v in flatten(first)]
            columns = _columns(items, where) if _is_structure(first) else [list(items)]
            if static is not None:
                _check_dense(columns, ragged)
            if not any(ragged):
                return stack(items, where)
            out = [rows_array(col) if r else stack(col, where) for col, r in zip(columns, ragged)]
            return pack_as(first, out) if _is_structure(first) else out[0]

        def _check_dense(columns: list[list[Any]], ragged: list[bool]) -> None:
            for k, (col, r) in enumerate(zip(columns, ragged)):
                shapes = set() if r else {np.shape(v) for v in col}
                if len(shapes) > 1:
                    raise ValueError(
                        f"{stage}: component {k} has the fully known spec {flatten(static)[k]!r}, so it is "
                        f"batched dense, but this batch's elements have shapes {sorted(shapes)}: the spec was "
                        "traced from a function on example inputs and its size depends on values the examples "
                        "did not show; declare the varying dimension None (map(..., output_signature=...) "
                        "with hr.TensorSpec((None, ...), dtype)) to batch it ragged")

        return make_batcher(ctx, self, source, stage, combine, None, None, rows=rows)
