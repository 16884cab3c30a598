"""The byte capacity of a ``shuffle`` buffer in one iteration (docs/design/shuffle-capacity.md):
set from the budget's model whenever the largest element pulled grows, never grown, saved in the state, and
the event of the first fill it stops (the order starts to depend on it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._memory import StageAccount


class ByteCapacity:
    """``limit``: the bytes the buffer may hold (None: only ``buffer_size`` limits it); ``largest``: the largest
    element pulled in this iteration; ``changes``: the limits that stopped a fill (replay events)."""

    __slots__ = ("changes", "largest", "limit", "limited_at")

    def __init__(self) -> None:
        self.limit: int | None = None
        self.largest = 0
        self.limited_at: int | None = None  # the limit that last stopped a fill (note_limit)
        self.changes = 0

    def restore(self, limit: int | None) -> None:
        """The limit a saved state recorded (it stopped a fill already, or never will: no new event)."""
        self.limit = self.limited_at = limit

    def room(self, held: int) -> bool:
        """Whether a buffer holding ``held`` bytes may pull another element as large as the largest."""
        return self.limit is None or held + self.largest <= self.limit

    def saw(self, n: int) -> bool:
        """An element of ``n`` bytes was pulled: whether it is the largest so far (the capacity is fitted again)."""
        if n > self.largest:
            self.largest = n
            return True
        return False

    def fit(self, acc: StageAccount, below: tuple[str, ...], buffer_size: int) -> None:
        """The capacity the budget gives a buffer whose order depends on it (``MemoryBudget.fixed_capacity``:
        its modelled share, half of it where other stages' sizes are guesses), unless it holds ``buffer_size``
        elements of the largest size; never larger than before. Never from what the stages hold now."""
        cap = acc.budget.fixed_capacity(acc, self.largest, below, buffer_size * self.largest)
        if cap is not None and (self.limit is None or cap < self.limit):
            self.limit = cap

    def stopped(self, held: int, buffered: int, buffer_size: int, input_done: bool) -> bool:
        """After a fill: whether this limit stopped it (not ``buffer_size``, not the input's end) for the first
        time: the order starts to depend on it, an event (counted in ``changes``; the caller warns once)."""
        cap = self.limit
        if (cap is not None and cap != self.limited_at and buffered and not input_done
                and buffered < buffer_size and held + self.largest > cap):
            self.limited_at = cap
            self.changes += 1
            return True
        return False
