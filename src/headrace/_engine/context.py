"""What the stages of one iterator tree are built with: :class:`IteratorContext`.

A context is five fields: the ``options``, the memory ``budget``, the *iteration path* (which ``iter()`` and
which ``repeat`` epochs: it seeds per-iteration randomness), the ``tree``'s shared services
(:class:`TreeServices`: the close flag, unique stage names, the per-iteration resources, AUTOTUNE's settings,
the warnings; the owner of the tree's budget accounts) and the ``replay`` mode
(:class:`~headrace._engine.replay.ReplayMode`: restoring, in order, a restore's scan copy). A subtree gets a copy
(``for_iteration``, ``in_order``, ``replaying``) that shares the tree's services and differs in the iteration
path or the replay mode only.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .._machine import cpu_count
from .._memory import MemoryBudget, StageAccount
from .._options import Options
from .._sync import Flag
from .._sync import Lock as TimedLock
from .replay import ReplayMode

if TYPE_CHECKING:
    from .._warn import PipelineWarnings
    from .recipe import DatasetNode
    from .tuning.knobs import StageTuning


class TreeServices:
    """What every stage of one iterator tree shares, copies of its context included; the owner of the tree's
    budget accounts (``MemoryBudget.accounts_of(ctx.tree)``).

    ``stop``: the tree's close flag. ``resources``: objects kept per iteration, shared by every ``repeat``
    epoch (worker processes; :meth:`resource`). ``tunings``: AUTOTUNE's settings per stage
    (``headrace._engine.tuning.knobs.stage_tuning``, under ``lock``). ``warnings``: the stages' warnings, issued at the
    user's line (``headrace._warn.PipelineWarnings``). Stage names: :meth:`stage_name`."""

    def __init__(self) -> None:
        self.stop = Flag()
        self.lock = TimedLock("stage names")
        self.resources: dict[str, Any] = {}
        self.tunings: dict[str, StageTuning] = {}
        self.warnings: PipelineWarnings | None = None
        self._counts: dict[str, int] = {}
        self._names: dict[tuple[int, str], str] = {}
        self._building = threading.local()  # .nested: building a dataset made while the pipeline runs

    # ---- stage names ------------------------------------------------------------------------------------
    def stage_name(self, node: object, base: str) -> str:
        """A stable, unique name for ``node``'s stage: ``"map(parse)"``, then ``"map(parse)#2"`` for a
        second node with the same name. The same node keeps its name across re-created iterators
        (``repeat`` epochs). A node the user named (``name=``: ``node.given_name``) is ``kind(name)``."""
        given = getattr(node, "given_name", None)
        if given is not None:
            base = f"{base.partition('(')[0]}({given})"
        with self.lock:
            name = self._names.get((id(node), base))
            if name is None:
                n = self._counts.get(base, 0) + 1
                self._counts[base] = n
                name = base if n == 1 else f"{base}#{n}"
                self._names[(id(node), base)] = name
        return name

    def stages_below(self, node: DatasetNode) -> tuple[str, ...]:
        """The stage names of the nodes ``node`` reads from (its inputs, theirs, ...) built so far: a stage's
        accounts are named by its name, or by it and a space and what they hold (``"parquet buffers"``)."""
        ids: set[int] = set()
        todo = list(node.inputs)
        while todo:
            n = todo.pop()
            if id(n) not in ids:
                ids.add(id(n))
                todo.extend(n.inputs)
        with self.lock:
            return tuple(name for (i, _), name in self._names.items() if i in ids)

    # ---- nested builds ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def nested_build(self) -> Iterator[None]:
        """Iterators built inside are of a dataset made while the pipeline runs (an ``interleave`` /
        ``flat_map`` function's result): their accounts come and go with it (``StageAccount.nested``), so a
        decision that must be reproducible (a seeded shuffle's capacity) leaves them out."""
        b = self._building
        b.nested = getattr(b, "nested", 0) + 1
        try:
            yield
        finally:
            b.nested -= 1

    def building_nested(self) -> bool:
        return getattr(self._building, "nested", 0) > 0

    # ---- resources --------------------------------------------------------------------------------------
    def resource(self, key: str, make: Callable[[], Any]) -> Any:
        """The object kept under ``key`` for this iteration (made by ``make()`` the first time): what a stage
        made again for each ``repeat`` epoch shares, e.g. its worker processes. Closed with the iterator."""
        with self.lock:
            r = self.resources.get(key)
        if r is None:
            made = make()
            with self.lock:
                r = self.resources.setdefault(key, made)
            if r is not made:
                made.close()
        return r

    def close_resources(self) -> None:
        with self.lock:
            items = list(self.resources.values())
            self.resources.clear()
        for r in items:
            r.close()

    def resource_threads(self) -> list[threading.Thread]:
        with self.lock:
            items = list(self.resources.values())
        return [t for r in items for t in getattr(r, "threads", list)()]


class IteratorContext:
    """What the stages of one subtree are built with (see the module docstring)."""

    def __init__(self, options: Options, budget: MemoryBudget, iteration: tuple[int, ...] = (0,)) -> None:
        self.options = options
        self.budget = budget
        self.iteration = iteration
        self.tree = TreeServices()
        self.replay = ReplayMode()

    @property
    def cpu_budget(self) -> int:
        return self.options.cpu_budget or cpu_count()

    def stage_name(self, node: object, base: str) -> str:
        """``node``'s unique stage name (:meth:`TreeServices.stage_name`)."""
        return self.tree.stage_name(node, base)

    def account(self, stage: str, demand: int | None, *, mandatory: bool = False, min_units: int = 1,
                hint: str | None = None, stage_of: str | None = None) -> StageAccount:
        """A budget account named ``stage``, owned by this tree; ``stage_of``: the stage it belongs to when
        that is not its name (a batch's ``assembly``, a reader's ``buffers``)."""
        tree = self.tree
        if hint is None:
            acc = self.budget.account(stage, demand, mandatory=mandatory, min_units=min_units, owner=tree)
        else:
            acc = self.budget.account(stage, demand, mandatory=mandatory, min_units=min_units, owner=tree, hint=hint)
        acc.warnings = tree.warnings
        acc.nested = tree.building_nested()
        acc.stage_of = stage_of
        return acc

    def deterministic(self, value: bool | None) -> bool:
        """Whether a parallel stage given ``deterministic=value`` delivers in order here."""
        return self.replay.deterministic(value, self.options)

    # ---- copies for subtrees (sharing the tree's services) --------------------------------------------
    def for_iteration(self, *epoch: int) -> IteratorContext:
        """The same context for a subtree made for ``repeat`` epoch ``epoch``."""
        child = copy.copy(self)
        child.iteration = (*self.iteration, *epoch)
        return child

    def at_iteration(self, path: tuple[int, ...]) -> IteratorContext:
        """The same context on iteration path ``path`` (a restored ``repeat``: the saved run's path, so its
        later epochs draw the saved run's seeds)."""
        child = copy.copy(self)
        child.iteration = tuple(path)
        return child

    def in_order(self) -> IteratorContext:
        """The same context for a subtree whose order must be the same on every run (below a ``shard``:
        every rank runs it and keeps its own positions): every parallel stage in order."""
        child = copy.copy(self)
        child.replay = self.replay.ordered()
        return child

    def replaying(self) -> IteratorContext:
        """The same context for a replay that must be deterministic (every parallel stage in order), with
        its own ``restoring`` flag."""
        child = copy.copy(self)
        child.replay = ReplayMode.scan_copy()
        return child
