"""A parallel stage's state (``headrace._engine.pool.parallel``): the input snapshots, the replay events below, the
state dict it saves and the restore: the mechanism of exactly-once below ``deterministic=False``, whose rules
are ``headrace._engine.replay``.

The input's state is snapshotted every ``snapshot_every`` pulls (every pull when the input does not replay in
order); the state after delivering a prefix of *p* sequence numbers is "the snapshot at or before *p*, then
``forward`` more input elements", plus the offsets delivered beyond the prefix, which the restored stage skips.
A restore with such offsets reads the input up to the last of them while ``set_state`` runs
(:meth:`InputSnapshots.prepull`). A replay event below makes a snapshot right after its element and a barrier
to out-of-order delivery. The inline path takes no snapshots (its state is the input's position); a worker
taking over snapshots first. Why, with a picture: docs/design/replay.md and docs/design/pool.md.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any

from ..._errors import StateError
from ..._memory import WAIT_SLICE_S
from ..._structure import nbytes
from ..replay import fast_forward
from .order import Result

if TYPE_CHECKING:
    from .order import ResultsWindow
    from .parallel import ParallelApplier
    from .workers import WorkerThreads

RESTORE_WAIT_S = 60.0
"""How long ``set_state`` waits for a worker stuck in the input (a slow user function) to leave it."""


class InputSnapshots:
    """The input snapshots, replay events, state and restore of one
    :class:`~headrace._engine.pool.parallel.ParallelApplier`."""

    def __init__(self, pool: ParallelApplier, record_state: bool, every: int) -> None:
        """Set up the snapshots; :attr:`base_state`: the input's state now (None without state)."""
        self.pool = pool
        source = pool.source
        self.record_state = record_state
        self.base_state: Any = None
        if record_state:
            try:
                self.base_state = source.get_state()
            except NotImplementedError:
                self.record_state = False
        self.every = every  # pulls between two snapshots
        self.replay_epoch = source.replay_epoch() if self.record_state else 0  # the input's, as last seen
        self.events: deque[tuple[int, int]] = deque()  # (seq, epoch increase) of replay events not delivered
        self.prepulled: dict[int, Result] = {}  # seq -> input element read by restore() (see prepull)
        self.epoch_out = 0  # replay events among the delivered elements (what a downstream stage sees)
        self.snaps: dict[int, tuple[Any, int]] = {}
        self.prepull_end = 0
        self.inline_dirty = False
        self.epoch_stale = False

    def wire(self) -> None:
        """Bind the pool's other parts (built after this one)."""
        self.window: ResultsWindow = self.pool.window
        self.workers: WorkerThreads = self.pool.workers

    def reset(self, base_state: Any, forward: int) -> None:
        self.snaps = {0: (base_state, forward)}  # position -> (state, forward)
        self.drop_prepulled()
        self.prepull_end = 0         # the input is this many elements ahead of seq 0 while any are left
        self.events.clear()
        self.inline_dirty = False  # inline calls since the last snapshot (see InlinePath.next_inline)
        self.epoch_stale = False  # replay events below not counted yet (see ResultsWindow.next_lean)

    def mark_inline(self) -> None:
        """An inline call since the last snapshot: ``state()`` asks the input for its position."""
        self.inline_dirty = True

    def mark_lean(self) -> None:
        """Lean calls since the last snapshot: the replay events below them are counted when next asked."""
        self.inline_dirty = self.epoch_stale = True

    def _add(self, position: int, snap: Any) -> None:
        """Results lock held: a snapshot at ``position``; those no state can name any more (before the one at
        or before the window's prefix) are dropped."""
        snaps = self.snaps
        snaps[position] = (snap, 0)
        if len(snaps) > 2:
            prefix = self.window.prefix
            base = max(p for p in snaps if p <= prefix)
            for p in [p for p in snaps if p < base]:
                del snaps[p]

    # ---- snapshots (the input lock held) -----------------------------------------------------------
    def snapshot_at(self, gen: int, seq: int) -> None:
        """Input lock held, element ``seq`` about to be pulled: snapshot the input (``every`` pulls apart)."""
        snap = self.pool.source.get_state()
        with self.window.cv:
            if gen == self.workers.gen:
                self._add(seq, snap)

    def snapshot_after_replay_event(self, gen: int, seq: int) -> None:
        """Input lock held. Snapshot the input right after this element when the input does not replay
        (every element), or when something below happened that a replay cannot repeat (``replay_epoch``),
        so no restore fast-forwards across it."""
        source = self.pool.source
        epoch = source.replay_epoch()
        if self.every == 1 or epoch != self.replay_epoch:
            event = epoch != self.replay_epoch
            increase = max(0, epoch - self.replay_epoch)
            self.replay_epoch = epoch
            snap = source.get_state()
            window = self.window
            with window.cv:
                if gen == self.workers.gen:
                    self._add(seq + 1, snap)
                    if event:
                        self.events.append((seq, increase))
                    if event and not window.deterministic:
                        window.set_barrier(seq)

    def record_event(self, seq: int, epoch: int) -> None:
        """Input lock held, on the consumer's thread: the replay epoch below moved to ``epoch`` with element
        ``seq`` (delivered now, in order: no snapshot needed)."""
        with self.window.cv:
            self.events.append((seq, max(0, epoch - self.replay_epoch)))
        self.replay_epoch = epoch

    def sync_lean_epoch(self) -> None:
        """Input lock held: count the replay events that happened below while the lean path ran, as
        delivered with the last element it delivered."""
        self.epoch_stale = False
        if not self.record_state:
            return
        epoch = self.pool.source.replay_epoch()
        if epoch != self.replay_epoch:
            self.record_event(self.window.prefix - 1, epoch)

    def resnapshot_after_inline(self, seq: int) -> None:
        """Input lock held, a worker claimed ``seq``: the inline calls took no snapshots; take one at ``seq`` once
        nothing is in flight. The consumer computes its inline element outside the input lock, so a worker started
        meanwhile can claim ``seq`` while ``seq - 1`` is still computed there: a snapshot at ``seq`` alone would
        leave none at or before the prefix (a worker's next snapshot then failed on ``max()`` of nothing: sweep
        seed 1270 under load). Then the snapshots stay as they are and the next claim with nothing in flight
        takes it."""
        if self.epoch_stale:
            self.sync_lean_epoch()
        if seq < self.prepull_end:  # the input is ahead of seq: the restore's snapshot stays the base
            return
        if self.window.prefix != seq:  # an inline element is still computed: not yet
            return
        if self.inline_dirty and self.record_state:
            source = self.pool.source
            snap = source.get_state()
            with self.window.cv:
                self.snaps = {seq: (snap, 0)}
                self.replay_epoch = source.replay_epoch()
        self.inline_dirty = False

    def delivered_epoch(self) -> int:
        """The replay events below among the elements delivered so far. A downstream parallel stage
        snapshots this stage right after an event (``replay_epoch``); the event must count from the
        element produced after it, not from when a worker reading ahead saw it: this stage's state at a
        snapshot taken earlier names an input snapshot from before the event, and a restore from it would
        replay across the event (found by ``bench/promises.py``: ``shuffle -> map -> prefetch`` under a
        tight budget lost and repeated elements)."""
        pool = self.pool
        if self.epoch_stale and self.workers.acquire_input(self.workers.stop_flag):
            try:
                if self.epoch_stale:
                    self.sync_lean_epoch()
            finally:
                pool.input_lock.release()
        if self.events:
            window = self.window
            with window.cv:
                events = self.events
                while events and events[0][0] < window.prefix:
                    self.epoch_out += events.popleft()[1]
        return self.epoch_out

    # ---- state -------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        if not self.record_state:
            raise NotImplementedError(f"{self.pool.stage}: its input does not support get_state()")
        if self.inline_dirty:
            inline = self._inline_state()
            if inline is not None:
                return inline
        window = self.window
        with window.cv:
            prefix = window.prefix
            pos = max(p for p in self.snaps if p <= prefix)
            snap, forward = self.snaps[pos]
            beyond = (sorted(s - prefix for s in window.beyond | window.skip)
                      if window.beyond or window.skip else [])
            return {"input": snap, "forward": forward + prefix - pos, "skip": beyond,
                    "index": window.index_base + prefix}

    def _inline_state(self) -> dict[str, Any] | None:
        """After inline calls and with nothing in flight, the input's position *is* the prefix's. Waiting for
        the input lock ends once a worker has taken it and snapshotted (``resnapshot_after_inline``): the
        snapshots then say the state, and that worker may be waiting for budget room that only this consumer's
        progress frees (sweep seed 400 under load: ``get_state`` inside ``next()`` waited for ever)."""
        pool, window = self.pool, self.window
        while not pool.input_lock.acquire(timeout=WAIT_SLICE_S):
            if self.workers.stop_flag.is_set() or not self.inline_dirty:
                return None
        try:
            with window.cv:
                if (window.next_seq != window.prefix or window.beyond or window.results
                        or window.prefix < self.prepull_end):
                    return None
                skip = sorted(s - window.prefix for s in window.skip)
                index = window.index_base + window.prefix
            return {"input": pool.source.get_state(), "forward": 0, "skip": skip, "index": index}
        finally:
            pool.input_lock.release()

    def restore(self, state: dict[str, Any]) -> None:
        pool = self.pool
        pool.stop()
        deadline = time.monotonic() + RESTORE_WAIT_S
        while not pool.input_lock.acquire(timeout=WAIT_SLICE_S):
            if time.monotonic() > deadline:
                raise StateError(f"{pool.stage}: set_state() waited {RESTORE_WAIT_S:.0f} s for a worker still "
                                 f"inside the input ({', '.join(t.name for t in pool.alive_threads())}); a "
                                 "function upstream does not return. Close this iterator and restore into a new one.")
        try:
            pool.source.set_state(state["input"])
            forward = int(state.get("forward", 0))
            fast_forward(pool.source, forward)
            skip = [int(s) for s in state["skip"]]
            pool.reset(int(state["index"]), state["input"], forward, skip)
            self.prepull(skip)
            if self.record_state:
                self.replay_epoch = pool.source.replay_epoch()
        finally:
            pool.input_lock.release()

    # ---- read-ahead of a restore -------------------------------------------------------------------
    def prepull(self, skip: list[int]) -> None:
        """Input lock held, in ``restore``: read the input up to the last skipped offset now, while the
        pipeline is restoring: a stage below may change how it produces elements once the restore is over (a
        shuffle capping its buffer), and the skipped positions must name what the saved run delivered. Held
        elements are charged (``adjust``: no wait, they existed in the saved run too) unless another account
        holds them (``input_charged``)."""
        if not skip:
            return
        pool = self.pool
        for seq in range(max(skip) + 1):
            self.prepull_end = seq + 1  # an element that raised was read too: the input is past it
            try:
                x = pool.source.__next__()
            except StopIteration as e:
                self.prepulled[seq] = Result(None, 0, e)
                return
            except Exception as e:
                self.prepulled[seq] = Result(None, 0, e)
                continue
            n = 0 if pool.input_charged else nbytes(x)
            if n:
                pool.account.adjust(n)
            self.prepulled[seq] = Result(x, n, None)

    def take_prepulled(self, seq: int) -> Any:
        """Input lock held: element ``seq`` read ahead by the restore (its error raised), uncharged."""
        item = self.prepulled.pop(seq)
        if item.nbytes:
            self.pool.account.adjust(-item.nbytes)
        if item.error is not None:
            error = item.error
            del item
            try:
                raise error
            finally:
                del error
        return item.value

    def drop_prepulled(self) -> None:
        pool = self.pool
        prepulled = self.prepulled
        for item in prepulled.values():
            if item.error is None:
                if item.nbytes:
                    pool.account.adjust(-item.nbytes)
                elif pool.release_input is not None:
                    pool.release_input(item.value)
        prepulled.clear()
