"""``Dataset.enumerate``: ``(index, element)`` pairs, index an int64 counting from ``start``.

As in tf.data, it is ``Dataset.zip((Dataset.range(start, 2**63 - 1), dataset))``.
"""

from __future__ import annotations

from .._args import as_int
from .._engine.recipe import DatasetNode
from .in_memory import RangeNode
from .zip import ZipNode


def enumerate_node(input_node: DatasetNode, start: int) -> DatasetNode:
    return ZipNode((RangeNode(as_int(start, "enumerate(start)"), 2**63 - 1), input_node))
