"""AUTOTUNE's starting values: parallelism from the CPU count, buffer sizes capped by the memory budget's
fair shares (see ``headrace._memory``). The tuner (``headrace._engine.tuning.tuner``) adjusts them from there.

=====================================  ==========================================================
argument = AUTOTUNE                    chosen value
=====================================  ==========================================================
``map(num_parallel_calls)``            CPU count (``os.sched_getaffinity``), at most
                                       ``Options.max_parallelism`` and ``cpu_budget``; with the tuner
                                       on, what the stages made before it left of ``cpu_budget``
``batch(num_parallel_calls)``          same
``interleave(cycle_length)``           CPU count (tf.data's rule)
``interleave(num_parallel_calls)``     ``cycle_length``
``prefetch(buffer_size)``              ``PREFETCH_AUTOTUNE_BUFFER`` elements, shrunk silently to the
                                       stage's share of the memory budget
(any parallel ``map``)                 results in flight: ``MAP_WINDOW_PER_WORKER`` x workers,
                                       shrunk silently to the stage's share of the memory budget
=====================================  ==========================================================

Why 8 results per map worker: a consumer takes elements in bursts - ``batch(64)`` takes 64, then stacks
them (milliseconds for large images) - and while it stacks, the workers should keep working rather than
wait for room. In the image-pipeline benchmark (``bench/image_pipeline.py``, 2 workers) the map workers
spent 12% of their time waiting for room (or for the input lock a waiting worker held) with 2 results per
worker, 4% with 8; about 8% more images/s. The bytes in flight are charged to the memory budget, so
a tight budget still shrinks the window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._machine import cpu_count
from ..._options import AUTOTUNE

if TYPE_CHECKING:
    from ..context import IteratorContext

PREFETCH_AUTOTUNE_BUFFER = 4
MAP_WINDOW_PER_WORKER = 8


def parallelism(value: int | None, ctx: IteratorContext) -> int:
    """Threads for a stage: ``None`` -> 1, ``AUTOTUNE`` -> CPU count (capped by the options)."""
    if value is None:
        return 1
    if value == AUTOTUNE:
        n = min(cpu_count(), ctx.cpu_budget)
        cap = ctx.options.max_parallelism
        return min(n, cap) if cap else n
    return int(value)
