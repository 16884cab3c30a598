"""``Dataset.bucket_by_sequence_length`` (tf.data's): ``group_by_window`` by length bucket, then
``padded_batch`` per bucket, as tf.data builds it.

An element of length ``L = element_length_func(element)`` goes to bucket ``i`` with
``bucket_boundaries[i-1] <= L < bucket_boundaries[i]`` (bucket 0 below the first boundary, the last one at
or above the last boundary); each bucket is batched by ``bucket_batch_sizes[i]`` (one more size than
boundaries) with ``padded_batch(padded_shapes, padding_values, drop_remainder)``. With
``pad_to_bucket_boundary=True`` the unknown dimension 0 of each component is padded to the bucket's
boundary minus 1 (an element of length >= the last boundary then raises ``ValueError``, as tf.data's
``InvalidArgumentError``).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._args import as_int
from .._engine.calls import call_with_element
from .._engine.recipe import DatasetNode, as_node
from .._spec import TensorSpec, batch_spec
from .._structure import flatten, pack_as
from .group_by_window import GroupByWindowNode
from .padded_batch import PaddedBatchNode


def bucket_node(input_node: DatasetNode, element_length_func: Callable[..., Any], bucket_boundaries: Sequence[Any],
                bucket_batch_sizes: Sequence[Any], padded_shapes: Any, padding_values: Any,
                pad_to_bucket_boundary: bool, no_padding: bool, drop_remainder: bool) -> DatasetNode:
    what = "bucket_by_sequence_length"
    if not callable(element_length_func):
        raise TypeError(f"{what}(element_length_func={element_length_func!r}): must be callable")
    bounds = [as_int(b, f"{what}(bucket_boundaries[{i}])") for i, b in enumerate(bucket_boundaries)]
    if any(b >= c for b, c in itertools.pairwise(bounds)):
        raise ValueError(f"{what}: bucket_boundaries {bounds} must be strictly increasing")
    sizes = [as_int(b, f"{what}(bucket_batch_sizes[{i}])", minimum=1) for i, b in enumerate(bucket_batch_sizes)]
    if len(sizes) != len(bounds) + 1:
        raise ValueError(f"{what}: len(bucket_batch_sizes) must equal len(bucket_boundaries) + 1, got {len(sizes)} "
                         f"sizes for {len(bounds)} boundaries")
    if pad_to_bucket_boundary and padded_shapes is not None:
        raise ValueError(f"{what}: pad_to_bucket_boundary=True pads dimension 0 to the boundary; leave "
                         "padded_shapes=None")

    def key_func(*x: Any) -> np.int64:
        length = as_int(call_with_element(element_length_func, x if len(x) > 1 else x[0]),
                        f"{what}: element_length_func result")
        return np.int64(bisect.bisect_right(bounds, length))

    def window_size_func(key: Any) -> np.int64:
        return np.int64(sizes[int(key)])

    def reduce_func(key: Any, window: Any) -> Any:
        k = int(key)
        shapes = padded_shapes
        if pad_to_bucket_boundary:
            shapes = _boundary_shapes(as_node(window, what).static_spec(), bounds, k, what)
        if no_padding:
            from .batch import BatchNode

            return BatchNode(as_node(window, what), sizes[k], drop_remainder, None, None)
        return PaddedBatchNode(as_node(window, what), sizes[k], shapes, padding_values, drop_remainder)

    node = GroupByWindowNode(input_node, key_func, reduce_func, None, window_size_func, what)
    node.output_spec = _bucket_spec
    return node


def _bucket_spec(spec: Any) -> Any:
    """tf.data's spec of the result: batch and padded sizes vary by bucket, so every dimension is unknown
    (its padded shapes are tensors looked up by bucket when the pipeline runs)."""
    def one(s: Any) -> Any:
        if isinstance(s, TensorSpec) and s.shape.rank is not None:
            return TensorSpec([None] * (s.shape.rank + 1), s.dtype)
        return batch_spec(s, None, "bucket_by_sequence_length")

    return pack_as(spec, [one(s) for s in flatten(spec)]) if isinstance(spec, dict | tuple | list) else one(spec)


def _boundary_shapes(spec: Any, bounds: list[int], k: int, what: str) -> Any:
    if k >= len(bounds):
        raise ValueError(f"{what}: pad_to_bucket_boundary=True and an element's length is >= the last bucket "
                         f"boundary {bounds[-1]}; every length must be below it")
    leaves = []
    for s in flatten(spec):
        if not isinstance(s, TensorSpec) or s.shape.dims is None or s.shape.rank in (None, 0):
            raise ValueError(f"{what}: pad_to_bucket_boundary needs components of known rank >= 1, got {s!r}")
        leaves.append([bounds[k] - 1, *s.shape.dims[1:]])
    return pack_as(spec, leaves) if isinstance(spec, dict | tuple | list) else leaves[0]
