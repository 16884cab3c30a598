"""Exactly-once replay: the rules, in one place. Stages declare facts; this module decides.

A state names *positions* (never data) wherever it can; a restore re-reads the input and skips to the saved
position, which is exact only where the input yields the same elements in the same order again. The rules:
(1) a stage replays in order unless it or an input *reorders*; (2) it replays the same elements unless a
stage that *depends on its input's order* reads an input that does not replay in order; (3) replay events
(:meth:`Replayable.replay_epoch`) count what a replay cannot repeat; (4) a stage holding part of its input
saves positions while :func:`rereads_same`, else values (``headrace._engine.by_value``), and a shuffle's keys
come from :func:`buffer_keys`; (5) advancing by positions (:func:`advance`); (6) the replay mode while a
restore runs (:func:`restoring`). Each rule with a picture: docs/design/replay.md; a parallel stage's
mechanism: ``headrace._engine.pool.snapshots``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from .._options import Options
from .._sync import Flag


# ---- the facts a stage declares and what the engine asks it (rules 1-3, 5) ----------------------------
class Replayable:
    """The replay half of every stage (``headrace._engine.stage.Stage``): the facts it declares and the
    questions the engine asks, answered from the facts of the stage and its inputs (``_children()``)."""

    #: Each element depends on the input's order or position, not only on one input element: the op groups,
    #: pairs, counts, cuts or carries state along the stream (``zip``, ``batch``, ``window``, ``scan``, ``take``
    #: ...). Below a ``deterministic=False`` stage a re-read then makes other elements (rule 2), and a shuffle
    #: above keeps its buffer by value.
    depends_on_input_order = False
    #: The stage delivers its elements in an order a re-read does not repeat (rule 1).
    reorders = False

    def _children(self) -> list[Any]:
        return []

    def replay_epoch(self) -> int:
        """The replay events below this stage (rule 3). Asked for every element an inline parallel stage
        pulls, so the common cases are short."""
        children = self._children()
        if not children:
            return 0
        if len(children) == 1:
            child = children[0]
            return 0 if child is None else child.replay_epoch()
        total = 0
        for child in children:  # (a loop, not sum() over a generator: a call less per child, per element)
            if child is not None:
                total += child.replay_epoch()
        return total

    def replays_deterministically(self) -> bool:
        """Whether re-reading after ``set_state`` yields the same elements in the same order (rule 1)."""
        return not self.reorders and all(
            child.replays_deterministically() for child in self._children() if child is not None)

    def replays_same_elements(self) -> bool:
        """Whether re-reading after ``set_state`` yields the same elements, in any order (rule 2: a shuffle's
        hash keys need it)."""
        children = [child for child in self._children() if child is not None]
        if self.depends_on_input_order and not all(child.replays_deterministically() for child in children):
            return False
        return all(child.replays_same_elements() for child in children)

    def skip_ahead(self, n: int) -> None:
        """Advance ``n`` positions (rule 5); sources override it to seek."""
        advance(self.__next__, n)  # type: ignore[attr-defined]


def replays_in_order(it: Any) -> bool:
    """Rule 1 for any input (a stage, or an object without the question: it replays in order)."""
    probe = getattr(it, "replays_deterministically", None)
    return True if probe is None else bool(probe())


# ---- what a stage saves (rule 4) ------------------------------------------------------------------------
def rereads_same(source: Any, since_epoch: int, in_order: bool | None = None) -> bool:
    """Whether re-reading ``source`` from a state taken when its ``replay_epoch()`` was ``since_epoch``
    yields what it has yielded since: it replays in order (``in_order``, asked of ``source`` when None) and no
    replay event happened since. If not, a stage holding part of its input saves it by value."""
    if in_order is None:
        in_order = source.replays_deterministically()
    return in_order and source.replay_epoch() == since_epoch


def buffer_keys(source: Any, since_epoch: int, in_order: bool, same_elements: bool) -> str:
    """How a shuffle names its buffered elements in a state taken from a checkpoint of ``source`` at replay
    epoch ``since_epoch``: ``"pull"`` (pull numbers after the checkpoint) where the re-read repeats the order;
    ``"hash"`` (content hashes, found again by scanning a replay) where it yields the same elements in another
    order or an event happened since; ``"value"`` (the elements themselves) where it may yield other elements
    (``in_order`` / ``same_elements``: the input's rules 1 and 2, fixed when the shuffle is built)."""
    by_hash = not in_order or source.replay_epoch() != since_epoch
    if not same_elements:
        return "value"
    return "hash" if by_hash else "pull"


# ---- advancing by positions (rule 5) --------------------------------------------------------------------
def advance(step: Callable[[], Any], n: int, drop: Callable[[Any], None] | None = None) -> None:
    """Call ``step`` for ``n`` positions (an element that raises counts as one; the end stops early);
    ``drop`` is given each element skipped (to release what it holds)."""
    for _ in range(n):
        try:
            out = step()
        except StopIteration:
            return
        except Exception:
            continue
        if drop is not None:
            drop(out)


def fast_forward(it: Any, n: int) -> None:
    """Advance ``it`` by ``n`` positions: its ``skip_ahead`` (a stage's, which a source may override to
    seek), else :func:`advance` over ``__next__``."""
    skip = getattr(it, "skip_ahead", None)
    if skip is not None:
        skip(n)
        return
    advance(it.__next__, n)


# ---- the replay mode (rule 6) ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ReplayMode:
    """How a subtree replays (``IteratorContext.replay``; shared by the copies of a context): ``restoring`` is
    set while ``Iterator.set_state`` runs (:func:`restoring`); ``in_order``: every parallel stage delivers in
    order (below a ``shard``, in a restore's scan); ``copy``: a second copy of a subtree that a restore scans
    (it writes nothing, e.g. no ``cache`` file)."""

    restoring: Flag = dataclasses.field(default_factory=Flag)
    in_order: bool = False
    copy: bool = False

    def deterministic(self, value: bool | None, options: Options) -> bool:
        """Whether a parallel stage given ``deterministic=value`` delivers in order in this mode."""
        if self.in_order:
            return True
        return options.is_deterministic() if value is None else bool(value)

    def ordered(self) -> ReplayMode:
        """This mode with every parallel stage in order (the same ``restoring`` flag)."""
        return dataclasses.replace(self, in_order=True)

    @staticmethod
    def scan_copy() -> ReplayMode:
        """The mode of a restore's scan copy: in order, writing nothing, with its own ``restoring`` flag."""
        return ReplayMode(in_order=True, copy=True)


@contextlib.contextmanager
def restoring(mode: ReplayMode) -> Iterator[None]:
    """The tree (or scan copy) of ``mode`` is restoring inside (rule 6)."""
    mode.restoring.set()
    try:
        yield
    finally:
        mode.restoring.clear()
