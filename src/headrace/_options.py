"""``Options`` (tf.data's ``tf.data.Options``, reduced to what headrace uses) and the sentinels."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from ._memory import default_budget_bytes, parse_bytes

AUTOTUNE = -1
"""Let headrace choose a parallelism or buffer size (within the CPU count and the memory budget)."""
INFINITE_CARDINALITY = -1
"""``Dataset.cardinality()`` of an infinite dataset (``repeat()``), as ``tf.data.INFINITE_CARDINALITY``."""
UNKNOWN_CARDINALITY = -2
"""``Dataset.cardinality()`` when it cannot be known without iterating (``filter``, generators)."""


class AutoShardPolicy(enum.IntEnum):
    """tf.data's ``tf.data.experimental.AutoShardPolicy`` values (``Options.experimental_distribute``)."""

    OFF = -1
    AUTO = 0
    FILE = 1
    DATA = 2
    HINT = 3


class _SubOptions:
    """A group of tf.data option fields (``options.threading`` ...) written through to ``Options`` fields."""

    _fields: ClassVar[dict[str, str]] = {}

    def __init__(self, owner: Options) -> None:
        object.__setattr__(self, "_owner", owner)

    def __getattr__(self, name: str) -> Any:
        return self._get(name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._set(name, value)

    def _get(self, name: str) -> Any:
        raise AttributeError(f"Options.{self._group}.{name}: headrace supports {sorted(self._fields)} here")

    def _set(self, name: str, value: Any) -> None:
        raise AttributeError(f"Options.{self._group}.{name}: headrace supports {sorted(self._fields)} here")

    _group = ""


class ThreadingOptions(_SubOptions):
    """``options.threading``: ``private_threadpool_size`` is headrace's ``max_parallelism`` (0 = default);
    ``max_intra_op_parallelism`` has no equivalent (user functions run whole on one thread each)."""

    _group = "threading"
    _fields: ClassVar[dict[str, str]] = {"private_threadpool_size": "max_parallelism",
                                         "max_intra_op_parallelism": ""}

    def _get(self, name: str) -> Any:
        if name == "private_threadpool_size":
            return self._owner.max_parallelism or 0
        if name == "max_intra_op_parallelism":
            return None
        return super()._get(name)

    def _set(self, name: str, value: Any) -> None:
        if name == "private_threadpool_size":
            self._owner.max_parallelism = None if value in (None, 0) else value
        elif name == "max_intra_op_parallelism":
            if value not in (None, 1):
                raise ValueError(f"Options.threading.max_intra_op_parallelism={value!r}: headrace runs each call of "
                                 "a user function on one thread, so there is no intra-op pool to size; set "
                                 "Options.max_parallelism (threading.private_threadpool_size) to bound its "
                                 "threads")
        else:
            super()._set(name, value)


class AutotuneOptions(_SubOptions):
    """``options.autotune``: ``ram_budget`` (bytes) is headrace's ``memory_budget``, ``enabled`` its
    ``autotune_enabled`` (``False``: no tuner thread, ``AUTOTUNE`` values keep their starting rules) and
    ``cpu_budget`` its ``cpu_budget``."""

    _group = "autotune"
    _fields: ClassVar[dict[str, str]] = {"ram_budget": "memory_budget", "enabled": "autotune_enabled",
                                         "cpu_budget": "cpu_budget"}

    def _get(self, name: str) -> Any:
        if name == "ram_budget":
            return self._owner.memory_budget
        if name == "enabled":
            return self._owner.autotune_enabled is not False
        if name == "cpu_budget":
            return self._owner.cpu_budget
        return super()._get(name)

    def _set(self, name: str, value: Any) -> None:
        if name == "ram_budget":
            self._owner.memory_budget = None if value in (None, 0) else value
        elif name == "enabled":
            self._owner.autotune_enabled = value
        elif name == "cpu_budget":
            self._owner.cpu_budget = None if value == 0 else value
        else:
            super()._set(name, value)


class DistributeOptions(_SubOptions):
    """``options.experimental_distribute``: ``auto_shard_policy`` ``OFF`` is headrace's behaviour (a dataset
    is never sharded behind the user's back); the others are refused, naming headrace's equivalents."""

    _group = "experimental_distribute"
    _fields: ClassVar[dict[str, str]] = {"auto_shard_policy": ""}

    def _get(self, name: str) -> Any:
        if name == "auto_shard_policy":
            return AutoShardPolicy.OFF
        return super()._get(name)

    def _set(self, name: str, value: Any) -> None:
        if name != "auto_shard_policy":
            return super()._set(name, value)
        policy = getattr(value, "name", value)
        if policy in (AutoShardPolicy.OFF, "OFF", -1):
            return None
        raise ValueError(f"Options.experimental_distribute.auto_shard_policy={policy!r}: headrace does not shard "
                         "a pipeline behind your back; shard it explicitly with "
                         "headrace.distribute.auto_shard(files, make_dataset, policy='auto'|'file'|'data') or "
                         "Dataset.shard(num_shards, index), and leave the policy OFF")


class OptimizationOptions(_SubOptions):
    """``options.experimental_optimization``: ``apply_default_optimizations`` is headrace's
    ``static_optimizations``. tf.data's single switches (``map_fusion``, ``map_and_batch_fusion``, ...) read as
    that value; headrace turns its optimizations on and off together, so setting one to ``False`` raises,
    naming ``apply_default_optimizations`` (``True`` is what they are already)."""

    _group = "experimental_optimization"
    _fields: ClassVar[dict[str, str]] = {"apply_default_optimizations": "static_optimizations",
                                         "map_fusion": "", "map_and_batch_fusion": "", "filter_fusion": "",
                                         "noop_elimination": "", "map_parallelization": "",
                                         "parallel_batch": "", "shuffle_and_repeat_fusion": ""}
    _APPLIED = frozenset({"map_fusion", "map_and_batch_fusion"})

    def _get(self, name: str) -> Any:
        if name == "apply_default_optimizations":
            return self._owner.static_optimizations is not False
        if name in self._fields:
            return name in self._APPLIED and self._owner.static_optimizations is not False
        return super()._get(name)

    def _set(self, name: str, value: Any) -> None:
        if name == "apply_default_optimizations":
            self._owner.static_optimizations = value
        elif name in self._fields:
            if value is False and name in self._APPLIED:
                raise ValueError(f"Options.experimental_optimization.{name}=False: headrace switches its static "
                                 "optimizations together; set options.experimental_optimization."
                                 "apply_default_optimizations = False (Options(static_optimizations=False))")
            if value is True and name not in self._APPLIED:
                raise ValueError(f"Options.experimental_optimization.{name}=True: headrace does not apply "
                                 f"{name}; it applies {sorted(self._APPLIED)} (on by default)")
        else:
            super()._set(name, value)


@dataclass
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
        autotune_enabled: ``False`` keeps every ``AUTOTUNE`` value at its starting rule (no tuner thread);
            ``None`` / ``True``: a tuner thread adjusts them while the iterator runs (tf.data's
            ``options.autotune.enabled``).
        static_optimizations: ``False`` builds every op as its own stage; ``None`` / ``True`` applies tf.data's
            static optimizations that pay here: ``map_fusion`` (consecutive sequential maps as one stage) and
            ``map_and_batch_fusion`` (a sequential map runs inside the batch's loop), with the same results and
            states (``headrace._engine.tuning.static_optimizations``; ``explain()`` names them). tf.data's
            ``options.experimental_optimization.apply_default_optimizations``.

    Options set later (outer ``with_options``) override earlier ones field by field; fields left ``None``
    inherit. As ``tf.data.Options``, fields may be assigned (``options.deterministic = False``, checked as in
    the constructor), and tf.data's groups map onto these fields: ``options.threading.private_threadpool_size``
    = ``max_parallelism``, ``options.autotune.ram_budget`` = ``memory_budget``, ``options.autotune.enabled`` =
    ``autotune_enabled``, ``options.experimental_optimization.apply_default_optimizations`` =
    ``static_optimizations``; ``options.experimental_distribute.auto_shard_policy`` accepts ``OFF`` only and
    settings without an equivalent raise ``ValueError`` naming what to use instead.
    """

    memory_budget: int | str | None = None
    deterministic: bool | None = None
    max_parallelism: int | None = None
    map_executor: str | None = None
    cpu_budget: int | None = None
    autotune_enabled: bool | None = None
    static_optimizations: bool | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check(f.name, getattr(self, f.name))

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FIELDS:
            _check(name, value)
        elif not name.startswith("_"):
            raise AttributeError(f"Options has no field {name!r}; headrace's fields: {sorted(_FIELDS)} and the "
                                 "groups threading, autotune, experimental_distribute, experimental_optimization")
        object.__setattr__(self, name, value)

    @property
    def threading(self) -> ThreadingOptions:
        return ThreadingOptions(self)

    @property
    def autotune(self) -> AutotuneOptions:
        return AutotuneOptions(self)

    @property
    def experimental_distribute(self) -> DistributeOptions:
        return DistributeOptions(self)

    @property
    def experimental_optimization(self) -> OptimizationOptions:
        return OptimizationOptions(self)

    experimental_deterministic = property(lambda self: self.deterministic,
                                          lambda self, v: setattr(self, "deterministic", v))

    def merge(self, other: Options | None) -> Options:
        """Fields set in ``other`` win; fields it leaves ``None`` keep this object's value."""
        if other is None:
            return self
        changes = {f.name: getattr(other, f.name) for f in dataclasses.fields(other)
                   if getattr(other, f.name) is not None}
        merged = dataclasses.replace(self, **changes)
        origin = getattr(other if other.memory_budget is not None else self, BUDGET_ORIGIN, None)
        if origin is not None:  # why memory_budget has its value (headrace._warn.share_options)
            object.__setattr__(merged, BUDGET_ORIGIN, origin)
        return merged

    def memory_budget_bytes(self) -> int:
        """The budget in bytes (resolving the default of 50% of available memory)."""
        limit = self.memory_limit()
        return default_budget_bytes() if limit is None else limit

    def memory_limit(self) -> int | None:
        """The budget set in bytes, or None where none is set (an iterator then shares the process budget:
        ``headrace._memory.budget_for``, given this by every iterator)."""
        return None if self.memory_budget is None else parse_bytes(self.memory_budget)

    def is_deterministic(self) -> bool:
        return True if self.deterministic is None else self.deterministic


BUDGET_ORIGIN = "_budget_origin"
"""The attribute of an ``Options`` made by ``headrace._warn.share_options``: whose budget ``memory_budget``
is a share of (for the warnings); kept by ``merge`` with the ``memory_budget`` it explains."""

_FIELDS = {"memory_budget", "deterministic", "max_parallelism", "map_executor", "cpu_budget", "autotune_enabled",
           "static_optimizations"}


def _check(name: str, value: Any) -> None:
    """The checks of one ``Options`` field (constructor and assignment)."""
    if value is None:
        return
    if name == "memory_budget":
        parse_bytes(value)
    elif name == "deterministic" and not isinstance(value, bool):
        raise TypeError(f"Options(deterministic={value!r}): expected True, False or None")
    elif name == "max_parallelism" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"Options(max_parallelism={value!r}) must be an int >= 1 or None")
    elif name in ("autotune_enabled", "static_optimizations") and not isinstance(value, bool):
        raise TypeError(f"Options({name}={value!r}): expected True, False or None")
    elif name == "map_executor" and value not in ("auto", "thread", "process"):
        raise ValueError(f"Options(map_executor={value!r}): expected 'auto', 'thread', 'process' or None (auto "
                         "for num_parallel_calls=AUTOTUNE, else thread)")
    elif name == "cpu_budget" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"Options(cpu_budget={value!r}) must be an int >= 1 (cores) or None for the CPU count")
