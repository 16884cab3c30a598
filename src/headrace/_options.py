"""``Options`` (tf.data's ``tf.data.Options``, reduced to what headrace uses) and the sentinels."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ._memory import default_budget_bytes, parse_bytes

AUTOTUNE = -1
"""Let headrace choose a parallelism or buffer size (within the CPU count and the memory budget)."""
INFINITE_CARDINALITY = -1
"""``Dataset.cardinality()`` of an infinite dataset (``repeat()``), as ``tf.data.INFINITE_CARDINALITY``."""
UNKNOWN_CARDINALITY = -2
"""``Dataset.cardinality()`` when it cannot be known without iterating (``filter``, generators)."""


@dataclass(frozen=True)
class Options:
    """Pipeline-wide settings, attached with ``Dataset.with_options`` and merged over the whole tree.

    Args:
        memory_budget: the byte limit for everything the pipeline buffers, as bytes (``int``) or a string
            such as ``"512MiB"`` / ``"2GB"``. ``None`` (default): 50% of the memory available when the
            iterator is created.
        deterministic: default for every ``deterministic=None`` argument (``map``, ``interleave``,
            ``batch``). ``None`` means ``True``: outputs keep their order.
        max_parallelism: the most threads an ``AUTOTUNE`` stage starts (default: the CPU count).
        map_executor: where parallel ``map`` functions run: ``"thread"``, ``"process"`` (worker processes,
            for functions that hold the GIL) or ``"auto"`` (measured on the first calls). ``None``
            (default): ``"auto"`` for ``num_parallel_calls=AUTOTUNE``, ``"thread"`` for an explicit number.
            ``map(..., executor=...)`` overrides it per stage.
        cpu_budget: the most cores the pipeline's autotuned workers may keep busy at once (threads count by
            the share of their time they compute; a worker process counts 1). Default: the CPU count.
        autotune: ``False`` keeps every ``AUTOTUNE`` value at its starting rule (no tuner thread);
            ``None`` / ``True``: a tuner thread adjusts them while the iterator runs.

    Options set later (outer ``with_options``) override earlier ones field by field; fields left
    ``None`` inherit.
    """

    memory_budget: int | str | None = None
    deterministic: bool | None = None
    max_parallelism: int | None = None
    map_executor: str | None = None
    cpu_budget: int | None = None
    autotune: bool | None = None

    def __post_init__(self) -> None:
        if self.memory_budget is not None:
            parse_bytes(self.memory_budget)
        if self.deterministic is not None and not isinstance(self.deterministic, bool):
            raise TypeError(f"Options(deterministic={self.deterministic!r}): expected True, False or None")
        if self.max_parallelism is not None and (
                isinstance(self.max_parallelism, bool) or not isinstance(self.max_parallelism, int)
                or self.max_parallelism < 1):
            raise ValueError(f"Options(max_parallelism={self.max_parallelism!r}) must be an int >= 1 or None")
        if self.autotune is not None and not isinstance(self.autotune, bool):
            raise TypeError(f"Options(autotune={self.autotune!r}): expected True, False or None")
        if self.map_executor is not None and self.map_executor not in ("auto", "thread", "process"):
            raise ValueError(f"Options(map_executor={self.map_executor!r}): expected 'auto', 'thread', 'process' "
                             "or None (auto for num_parallel_calls=AUTOTUNE, else thread)")
        if self.cpu_budget is not None and (isinstance(self.cpu_budget, bool) or not isinstance(self.cpu_budget, int)
                                            or self.cpu_budget < 1):
            raise ValueError(f"Options(cpu_budget={self.cpu_budget!r}) must be an int >= 1 (cores) or None for the "
                             "CPU count")

    def merge(self, other: Options | None) -> Options:
        """Fields set in ``other`` win; fields it leaves ``None`` keep this object's value."""
        if other is None:
            return self
        changes = {f.name: getattr(other, f.name) for f in dataclasses.fields(other)
                   if getattr(other, f.name) is not None}
        return dataclasses.replace(self, **changes)

    def memory_budget_bytes(self) -> int:
        """The budget in bytes (resolving the default of 50% of available memory)."""
        if self.memory_budget is None:
            return default_budget_bytes()
        return parse_bytes(self.memory_budget)

    def is_deterministic(self) -> bool:
        return True if self.deterministic is None else self.deterministic
