"""``Dataset.counter``: ``start, start + step, ...`` forever (tf.data's ``Dataset.counter``).

As tf.data: ``Dataset.range(start, sys.maxsize, step)`` with an infinite cardinality (tf.data reports
``INFINITE_CARDINALITY`` although the range ends at ``2**63 - 1``; so does headrace). ``dtype`` defaults
to int64. State: the next value (``range``'s).
"""

from __future__ import annotations

import sys
from typing import Any

from .._args import as_int
from .._options import INFINITE_CARDINALITY
from .in_memory import RangeNode


class CounterNode(RangeNode):
    label = "counter"

    def __init__(self, start: Any, step: Any, dtype: Any) -> None:
        start = as_int(start, "counter(start)")
        step = as_int(step, "counter(step)")
        if step == 0:
            raise ValueError("counter(step=0): step must not be 0 (a positive step counts up, a negative one "
                             "down)")
        super().__init__(start, sys.maxsize if step > 0 else -sys.maxsize - 1, step, dtype=dtype)

    def cardinality(self) -> int:
        return INFINITE_CARDINALITY
