"""A parallel stage's state (``headrace._engine.pool.parallel``): the input snapshots, the replay events below, the
state dict it saves and the restore: the mechanism of exactly-once below ``deterministic=False``, whose rules
are ``headrace._engine.replay``.

State: the input's state is snapshotted every ``snapshot_every`` pulls (``parallel.SNAPSHOT_EVERY``; every
pull when the input does not replay deterministically). The state after delivering a prefix of *p* sequence
numbers is "the snapshot at or before *p*, then ``forward`` more input elements", plus the offsets delivered
beyond the prefix (out-of-order delivery), which the restored stage skips: exactly-once either way, at a
fraction of the cost of asking the input for its state per element. A restore with such offsets reads the
input up to the last of them while ``set_state`` runs (:meth:`InputSnapshots._prepull`: the elements are
held, charged, until workers take them): a stage below may change how it produces elements once the restore
is over (a shuffle capping its buffer to the budget), and the skipped positions must name what the saved run
delivered (found by ``bench/promises.py``: ``shuffle -> prefetch(AUTOTUNE) -> map(deterministic=False)``
lost and repeated an element).

Replay events (``replay_epoch``): something below that a replay cannot repeat (a shuffle buffer capped by
the budget). The input is snapshotted right after the element that saw one, so no restore fast-forwards
across it; out-of-order delivery stops at it (``_barrier``) until the prefix passes it; and it counts for
the stage above from the element delivered after it (``delivered_epoch``).

The inline path (``headrace._engine.pool.inline``) takes no snapshots: with nothing in flight the input's
position is the prefix's (``_inline_state``); a worker taking over snapshots first (``_resnapshot_after_inline``).

``restore()`` stops the workers and waits (timed, ``RESTORE_WAIT_S``) for one still inside the input to leave
it before it resets the input under the input lock, so a stale worker can neither pull from the restored input
nor end the new run.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from ..._errors import StateError
from ..._memory import WAIT_SLICE_S
from ..._structure import nbytes
from ..replay import fast_forward
from .fields import PoolFields, Result

RESTORE_WAIT_S = 60.0
"""How long ``set_state`` waits for a worker stuck in the input (a slow user function) to leave it."""


class InputSnapshots(PoolFields):
    """The state part of :class:`~headrace._engine.pool.parallel.ParallelApplier`
    (a part: its fields are listed in ``fields``)."""

    def _init_snapshots(self, record_state: bool, every: int) -> Any:
        """Set up the snapshots; the input's state now (the base snapshot), or None without state."""
        source = self.source
        self.record_state = record_state
        base_state: Any = None
        if record_state:
            try:
                base_state = source.get_state()
            except NotImplementedError:
                self.record_state = False
        self._every = every
        self._replay_epoch = source.replay_epoch() if self.record_state else 0
        self._events = deque()  # (seq, epoch increase) of replay events not delivered
        self._prepulled = {}  # seq -> input element read by restore() (see _prepull)
        self._epoch_out = 0  # replay events among the delivered elements (what a downstream stage sees)
        return base_state

    def _reset_snapshots(self, base_state: Any, forward: int) -> None:
        self._snaps = {0: (base_state, forward)}  # position -> (state, forward)
        self._drop_prepulled()
        self._prepull_end = 0         # the input is this many elements ahead of seq 0 while any are left
        self._events.clear()
        self._inline_dirty = False  # inline calls since the last snapshot (see _next_inline)
        self._epoch_stale = False  # replay events below not counted yet (see _next_lean)

    # ---- snapshots (the input lock held) -----------------------------------------------------------
    def _snapshot_at(self, gen: int, seq: int) -> None:
        """Input lock held, element ``seq`` about to be pulled: snapshot the input (``_every`` pulls apart)."""
        snap = self.source.get_state()
        with self._cv:
            if gen == self._gen:
                self._snaps[seq] = (snap, 0)

    def _snapshot_after_replay_event(self, gen: int, seq: int) -> None:
        """Input lock held. Snapshot the input right after this element when the input does not replay
        (every element), or when something below happened that a replay cannot repeat (``replay_epoch``),
        so no restore fast-forwards across it."""
        epoch = self.source.replay_epoch()
        if self._every == 1 or epoch != self._replay_epoch:
            event = epoch != self._replay_epoch
            increase = max(0, epoch - self._replay_epoch)
            self._replay_epoch = epoch
            snap = self.source.get_state()
            with self._cv:
                if gen == self._gen:
                    self._snaps[seq + 1] = (snap, 0)
                    if event:
                        self._events.append((seq, increase))
                    if event and not self.deterministic:
                        # Elements from ``seq`` on may differ in a replay from an earlier snapshot: deliver
                        # them in order until the prefix passes the event, so no skip offset names them.
                        self._barrier = seq if self._barrier is None else min(self._barrier, seq)

    def _record_event(self, seq: int, epoch: int) -> None:
        """Input lock held, on the consumer's thread: the replay epoch below moved to ``epoch`` with element
        ``seq`` (delivered now, in order: no snapshot needed)."""
        with self._cv:
            self._events.append((seq, max(0, epoch - self._replay_epoch)))
        self._replay_epoch = epoch

    def _sync_lean_epoch(self) -> None:
        """Input lock held: count the replay events that happened below while the lean path ran (see
        ``_next_lean``), as delivered with the last element it delivered."""
        self._epoch_stale = False
        if not self.record_state:
            return
        epoch = self.source.replay_epoch()
        if epoch != self._replay_epoch:
            self._record_event(self._prefix - 1, epoch)

    def _resnapshot_after_inline(self, seq: int) -> None:
        """Input lock held, nothing in flight: the inline calls took no snapshots; take one at ``seq``."""
        if self._epoch_stale:
            self._sync_lean_epoch()
        if seq < self._prepull_end:  # the input is ahead of seq: the restore's snapshot stays the base
            return
        if self._inline_dirty and self.record_state:
            snap = self.source.get_state()
            with self._cv:
                self._snaps = {seq: (snap, 0)}
                self._replay_epoch = self.source.replay_epoch()
        self._inline_dirty = False

    def delivered_epoch(self) -> int:
        """The replay events below among the elements delivered so far. A downstream parallel stage
        snapshots this stage right after an event (``replay_epoch``); the event must count from the
        element produced after it, not from when a worker reading ahead saw it: this stage's state at a
        snapshot taken earlier names an input snapshot from before the event, and a restore from it would
        replay across the event (found by ``bench/promises.py``: ``shuffle -> map -> prefetch`` under a
        tight budget lost and repeated elements)."""
        if self._epoch_stale and self._acquire_input(self._stop):
            try:
                if self._epoch_stale:
                    self._sync_lean_epoch()
            finally:
                self._input_lock.release()
        if self._events:
            with self._cv:
                events = self._events
                while events and events[0][0] < self._prefix:
                    self._epoch_out += events.popleft()[1]
        return self._epoch_out

    # ---- state -------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        if not self.record_state:
            raise NotImplementedError(f"{self.stage}: its input does not support get_state()")
        if self._inline_dirty:
            inline = self._inline_state()
            if inline is not None:
                return inline
        with self._cv:
            prefix = self._prefix
            pos = max(p for p in self._snaps if p <= prefix)
            snap, forward = self._snaps[pos]
            beyond = sorted(s - prefix for s in self._beyond | self._skip) if self._beyond or self._skip else []
            return {"input": snap, "forward": forward + prefix - pos, "skip": beyond,
                    "index": self._index_base + prefix}

    def _inline_state(self) -> dict[str, Any] | None:
        """After inline calls and with nothing in flight, the input's position *is* the prefix's. Waiting for
        the input lock ends once a worker has taken it and snapshotted (``_resnapshot_after_inline``): the
        snapshots then say the state, and that worker may be waiting for budget room that only this consumer's
        progress frees (sweep seed 400 under load: ``get_state`` inside ``next()`` waited for ever)."""
        while not self._input_lock.acquire(timeout=WAIT_SLICE_S):
            if self._stop.is_set() or not self._inline_dirty:
                return None
        try:
            with self._cv:
                if (self._next_seq != self._prefix or self._beyond or self._results
                        or self._prefix < self._prepull_end):
                    return None
                skip = sorted(s - self._prefix for s in self._skip)
                index = self._index_base + self._prefix
            return {"input": self.source.get_state(), "forward": 0, "skip": skip, "index": index}
        finally:
            self._input_lock.release()

    def restore(self, state: dict[str, Any]) -> None:
        self.stop()
        deadline = time.monotonic() + RESTORE_WAIT_S
        while not self._input_lock.acquire(timeout=WAIT_SLICE_S):
            if time.monotonic() > deadline:
                raise StateError(f"{self.stage}: set_state() waited {RESTORE_WAIT_S:.0f} s for a worker still "
                                 f"inside the input ({', '.join(t.name for t in self.alive_threads())}); a "
                                 "function upstream does not return. Close this iterator and restore into a new one.")
        try:
            self.source.set_state(state["input"])
            forward = int(state.get("forward", 0))
            fast_forward(self.source, forward)
            skip = [int(s) for s in state["skip"]]
            self._reset_counters(int(state["index"]), state["input"], forward, skip)
            self._prepull(skip)
            if self.record_state:
                self._replay_epoch = self.source.replay_epoch()
        finally:
            self._input_lock.release()

    # ---- read-ahead of a restore -------------------------------------------------------------------
    def _prepull(self, skip: list[int]) -> None:
        """Input lock held, in ``restore``: read the input up to the last skipped offset now, while the
        pipeline is restoring (see the module docstring: State). Held elements are charged (``adjust``: no
        wait, they existed in the saved run too) unless another account holds them (``input_charged``)."""
        if not skip:
            return
        for seq in range(max(skip) + 1):
            self._prepull_end = seq + 1  # an element that raised was read too: the input is past it
            try:
                x = self.source.__next__()
            except StopIteration as e:
                self._prepulled[seq] = Result(None, 0, e)
                return
            except Exception as e:
                self._prepulled[seq] = Result(None, 0, e)
                continue
            n = 0 if self.input_charged else nbytes(x)
            if n:
                self.account.adjust(n)
            self._prepulled[seq] = Result(x, n, None)

    def _drop_prepulled(self) -> None:
        prepulled = self._prepulled
        for item in prepulled.values():
            if item.error is None:
                if item.nbytes:
                    self.account.adjust(-item.nbytes)
                elif self.release_input is not None:
                    self.release_input(item.value)
        prepulled.clear()
