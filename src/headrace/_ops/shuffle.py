"""``Dataset.shuffle``: uniform sampling from a buffer, as tf.data does it.

Each output is a uniformly chosen buffered element (one 64-bit PCG64 draw), whose place the next input
element takes; every iterator draws its order from ``(seed, iteration path)`` (``headrace._engine.seeds``).
Buffered elements are charged to an elastic account within a byte capacity that depends on the budget's
model, never on what other stages hold at a moment (``headrace._engine.shuffle_capacity``), so a restored
run draws the same order. The state names the input's latest checkpoint at or before the oldest buffered
element and one key per buffered element: a pull number, a content hash or the element itself, as
``headrace._engine.replay.buffer_keys`` decides. The capacity, the keys and the restore's cost, with a
picture: docs/design/shuffle-capacity.md.
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import Any

import numpy as np
import xxhash

from .._args import as_seed, count_arg
from .._engine import by_value
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.replay import buffer_keys, fast_forward, restoring
from .._engine.seeds import check_seed, fresh_seed, iteration_seed
from .._engine.shuffle_capacity import ByteCapacity
from .._engine.stage import Stage
from .._engine.stage_support import check_state, is_crash, stop_flag
from .._errors import MemoryBudgetError, StateError
from .._handoff import delivers_charged, hand_off, taking, waiter_urgency
from .._memory import UNCAPPED, Cancelled, Reservation
from .._structure import flatten, nbytes

HASH = "xxh3_64"
"""The content hash of new states (``"hash"`` in the state): xxHash's XXH3, 64 bits (about 13 us for a 602 KB
float32 image where BLAKE2b took 940 us: every buffered element is hashed once when a state or a snapshot is
taken, so a shuffle above a ``deterministic=False`` map of images ran at half the rate). States saved before
it name no hash and were keyed with ``"blake2b"``; both restore."""
HASHES = ("xxh3_64", "blake2b")


def content_hash(x: Any, kind: str = HASH) -> str:
    """A 64-bit hash (16 hex digits) of an element's structure, dtypes, shapes and bytes: ``kind`` is
    ``"xxh3_64"`` (xxHash's XXH3) or ``"blake2b"`` (BLAKE2b-64, the states of earlier releases)."""
    h: Any = xxhash.xxh3_64() if kind == "xxh3_64" else hashlib.blake2b(digest_size=8)
    for leaf in flatten(x):
        if isinstance(leaf, bytes):
            h.update(b"B%d:" % len(leaf))
            h.update(leaf)
            continue
        a = np.asarray(leaf)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        if a.dtype.hasobject:
            for v in a.reshape(-1):
                b = v if isinstance(v, bytes) else repr(v).encode()
                h.update(b"%d:" % len(b))
                h.update(b)
        else:
            h.update(np.ascontiguousarray(a).view(np.uint8).data)
    return h.hexdigest()


class ShuffleNode(DatasetNode):
    label = "shuffle"
    shard_passes = True
    spec_passes = True

    def __init__(self, input_node: DatasetNode, buffer_size: int, seed: int | None,
                 reshuffle_each_iteration: bool | None) -> None:
        super().__init__([input_node])
        self.buffer_size = count_arg(buffer_size, "shuffle(buffer_size)", minimum=1,
                                     fix="use buffer_size=1 for no shuffling")
        seed = as_seed(seed, "shuffle(seed)")
        self.seed_given = seed is not None
        self.seed = fresh_seed() if seed is None else int(seed)
        self.reshuffle = True if reshuffle_each_iteration is None else bool(reshuffle_each_iteration)

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        source = self.inputs[0].make_iterator(ctx)
        stage = ctx.stage_name(self, f"shuffle({self.buffer_size})")
        return _ShuffleIterator(ctx, self, source, stage)


def _always() -> bool:
    return True


class _Entry:
    __slots__ = ("key", "nbytes", "pull", "value")

    def __init__(self, value: Any, n: int, pull: int) -> None:
        self.value = value
        self.nbytes = n
        self.pull = pull
        self.key: str | None = None  # content hash, computed on demand


class _ShuffleIterator(Stage):
    kind = "shuffle"
    ctx: IteratorContext

    def __init__(self, ctx: IteratorContext, node: ShuffleNode, source: Stage, stage: str) -> None:
        super().__init__(ctx)
        self._node = node
        self._source = source
        self._stage = stage
        self._buffer_size = node.buffer_size
        self._account = ctx.account(stage, node.buffer_size)
        self._below = ctx.tree.stages_below(node)  # the stages of its input (their accounts, in ByteCapacity.fit)
        # the input's replay facts (headrace._engine.replay, rules 1 and 2), for buffer_keys
        self._input_in_order = source.replays_deterministically()
        self._input_same = source.replays_same_elements()
        self._every = max(64, node.buffer_size // 2)
        self._seed = node.seed
        self._iteration: tuple[int, ...] = tuple(ctx.iteration) if node.reshuffle else ()
        self._buf: list[_Entry] = []
        self._held = 0
        self._capacity = ByteCapacity()  # saved: the fill rule depends on it
        self._skipping = False  # in skip_ahead: no byte-capacity event (see there)
        self._start(0)
        self._pulls = 0
        self._input_done = False
        self._checkpoints: deque[tuple[int, Any, int]] = deque(
            [(0, by_value.materialize(source.get_state()), source.replay_epoch())])

    def _start(self, draws: int) -> None:
        bits = np.random.PCG64(iteration_seed(self._seed, self._iteration))
        if draws:
            bits.advance(draws)
        self._bits = bits
        self._draws = draws

    # ---- filling ------------------------------------------------------------------------------------
    def _room_for_more(self) -> bool:
        buf = self._buf
        if len(buf) >= self._buffer_size or self._input_done:
            return False
        return not buf or self._capacity.room(self._held)

    def _checkpoint(self) -> None:
        cps = self._checkpoints
        if self._pulls - cps[-1][0] < self._every:
            return
        cps.append((self._pulls, by_value.materialize(self._source.get_state()), self._source.replay_epoch()))
        if len(cps) > 64:
            oldest = min((e.pull for e in self._buf), default=self._pulls)
            while len(cps) > 1 and cps[1][0] <= oldest:
                cps.popleft()

    def _fill(self) -> None:
        acc = self._account
        stop = stop_flag(self.ctx)
        restoring = self._skipping or self.ctx.replay.restoring.is_set()
        # the consumer waits for this fill (or the pool worker's pull it serves is urgent): it may use the
        # budget's reserve, and breaks a stall as the element the consumer waits for
        urgent = _always if restoring else (waiter_urgency() or _always)
        acc.pull_begins()  # the buffer is held until the fill returns: a refusal at a stall counts it
        try:
            # an input that delivers its element charged (a prefetch, a shuffle) hands it into this stage's
            # reservation (headrace._handoff): it counts against this stage's share, not the budget again
            # (shuffle(4).shuffle(4) of 2 MiB elements under 3 MiB counted each element twice: 1 s stalls).
            # Asked once per fill: an input that stops delivering charged meanwhile hands nothing in, and
            # ``settle`` charges the element as it would have.
            takes = delivers_charged(self._source)
            while True:  # (called with room for one more)
                self._checkpoint()
                est = acc.estimate()
                charged = est if takes else 0
                # within the byte capacity (ByteCapacity.fit): wait for room in the budget as a whole; what the
                # other stages hold now never changes what the buffer holds, so never the order
                reservation = acc.reserve(est - charged, stop, UNCAPPED, urgent=urgent, charged_in=charged)
                if self._pull_into_buffer(reservation, len(self._buf), takes):  # the largest grew: fitted again
                    self._capacity.fit(acc, self._below, self._buffer_size)
                if not self._room_for_more():
                    break
        finally:
            acc.pull_ends()
        if self._capacity.stopped(self._held, len(self._buf), self._buffer_size, self._input_done):
            acc.warn_shrunk()  # the first fill this capacity stops: an event (replay_epoch), warned once

    def replay_epoch(self) -> int:
        """Its own replay events (the capacity's changes) and those below (``headrace._engine.replay``, rule 3)."""
        return self._capacity.changes + super().replay_epoch()

    def _pull_into_buffer(self, reservation: Reservation | None, slot: int, takes: bool = False) -> bool:
        """Pull one element into the buffer; ``reservation`` None: a restore, which charges it once it exists
        (``takes``: the input delivers it charged, into ``reservation``). Returns whether it is the largest element
        pulled so far in this iteration."""
        try:
            if reservation is None or not takes:
                x = self._source.__next__()
            else:
                with taking(reservation, self._source):
                    x = self._source.__next__()
        except StopIteration:
            if reservation is not None:
                reservation.cancel()
            self._input_done = True
            return False
        except BaseException:
            if reservation is not None:
                reservation.cancel()
            self._pulls += 1
            raise
        n = nbytes(x)
        if reservation is None:
            self._account.hold(n)
        else:
            reservation.settle(n)
        grew = self._capacity.saw(n)
        entry = _Entry(x, n, self._pulls)
        self._pulls += 1
        self._held += n
        if slot == len(self._buf):
            self._buf.append(entry)
        else:
            self._buf[slot] = entry
        return grew

    # ---- output -------------------------------------------------------------------------------------
    def __next__(self) -> Any:
        if self._room_for_more():
            self._fill()
        buf = self._buf
        if not buf:
            raise StopIteration
        i = int(self._bits.random_raw()) % len(buf)
        self._draws += 1
        entry = buf[i]
        last = buf.pop()
        if i < len(buf):
            buf[i] = last
        self._held -= entry.nbytes
        hand_off(self._account, entry.nbytes, self)
        return entry.value

    def delivers_charged(self) -> bool:
        """The element drawn is charged until it is returned (``headrace._handoff``)."""
        return True

    def skip_ahead(self, n: int) -> None:
        """Advance ``n`` positions as the run that saved the state did (see the module docstring: Memory)."""
        self._skipping = True
        try:
            super().skip_ahead(n)
        finally:
            self._skipping = False

    # ---- state --------------------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        oldest = min((e.pull for e in self._buf), default=self._pulls)
        base_pull, base, epoch = next(c for c in reversed(self._checkpoints) if c[0] <= oldest)
        # pull numbers, content hashes or the values themselves: headrace._engine.replay (rule 4)
        keys_by = buffer_keys(self._source, epoch, self._input_in_order, self._input_same)
        keys: list[Any]
        if keys_by == "value":
            keys = [by_value.Deferred(e.value) for e in self._buf]
        elif keys_by == "hash":
            for e in self._buf:
                if e.key is None:
                    e.key = content_hash(e.value)
            keys = [e.key for e in self._buf]
        else:
            keys = [e.pull - base_pull for e in self._buf]
        return {"kind": self.kind, "buffer_size": self._buffer_size, "seed": self._seed,
                "iteration": list(self._iteration), "draws": self._draws,
                "byte_capacity": self._capacity.limit, "largest": self._capacity.largest,
                "keys_by": keys_by, "keys": keys, "hash": HASH if keys_by == "hash" else None, "base": base,
                "base_pull": base_pull, "pulls": self._pulls, "input_done": self._input_done,
                "input": self._source.get_state() if keys_by != "pull" else None}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, buffer_size=self._buffer_size)
        if state["keys_by"] not in ("hash", "pull", "value"):
            raise StateError(f"{self._stage}: keys_by={state['keys_by']!r} in the state; expected 'hash', 'pull' "
                             "or 'value'")
        self._seed = check_seed(self._stage, state, self._node.seed, self._node.seed_given)
        self._iteration = tuple(int(i) for i in state["iteration"])
        self._drop_buffer()
        cap = state["byte_capacity"]
        self._start(int(state["draws"]))
        self._capacity.restore(None if cap is None else int(cap))
        keys = state["keys"]
        base_pull = int(state["base_pull"])
        self._buf = [None] * len(keys)  # type: ignore[list-item]
        if state["keys_by"] == "value":
            self._restore_by_value(keys, base_pull)
            self._source.set_state(state["input"])
        elif state["keys_by"] == "hash":  # (a state saved in either way restores into either kind of input)
            kind = state.get("hash") or "blake2b"  # (states of earlier releases name none)
            if kind not in HASHES:
                raise StateError(f"{self._stage}: hash={kind!r} in the state; expected one of {', '.join(HASHES)}")
            self._restore_by_hash(state["base"], keys, base_pull, kind)
            self._source.set_state(state["input"])
        else:
            self._restore_by_pull(state["base"], base_pull, [int(k) for k in keys], int(state["pulls"]))
        self._pulls = int(state["pulls"])
        self._capacity.largest = int(state.get("largest", 0))
        self._input_done = bool(state["input_done"])
        self._checkpoints = deque([(base_pull, state["base"], -1)])  # (-1: hash keys until the next checkpoint)

    def _restore_by_pull(self, base: Any, base_pull: int, keys: list[int], pulls: int) -> None:
        source = self._source
        source.set_state(base)
        self._pulls = base_pull
        for pull, slot in sorted((base_pull + k, slot) for slot, k in enumerate(keys)):
            fast_forward(source, pull - self._pulls)
            self._pulls = pull
            self._pull_into_buffer(None, slot)
            if self._buf[slot] is None:
                raise StateError(f"{self._stage}: the input ended before element {pull} of the saved buffer; "
                                 "the state does not belong to this input")
        fast_forward(source, pulls - self._pulls)

    def _restore_by_value(self, saved: list[Any], base_pull: int) -> None:
        for slot, text in enumerate(saved):
            x = by_value.decode(text, self._stage)
            n = nbytes(x)
            self._account.hold(n)
            self._buf[slot] = _Entry(x, n, base_pull)
            self._held += n

    def _restore_by_hash(self, base: Any, keys: list[str], base_pull: int, kind: str) -> None:
        """Scan a replay of the input (every parallel stage in order) for the buffered elements' hashes."""
        wanted: dict[str, list[int]] = {}
        for slot, key in enumerate(keys):
            wanted.setdefault(key, []).append(slot)
        missing = len(keys)
        if not missing:
            return
        acc = self._account
        ctx = self.ctx.replaying()  # its own `restoring`: the scan needs the set of elements, not their order
        replay = self._node.inputs[0].make_iterator(ctx)
        try:
            with restoring(ctx.replay):  # re-reaching the checkpoint skips exactly as the saved run (docstring)
                replay.set_state(base)
            while missing:
                try:
                    x = replay.__next__()
                except StopIteration:
                    raise StateError(
                        f"{self._stage}: {missing} buffered element(s) of the saved state were not found when "
                        "re-reading the input; its elements differ from one pass to the next (e.g. a map "
                        "drawing unseeded random numbers), so a shuffle behind it cannot be restored exactly. "
                        "Seed the randomness from the element, or use deterministic=True upstream.") from None
                except Exception as e:
                    if is_crash(e) or isinstance(e, (Cancelled, MemoryBudgetError)):
                        raise  # raised again on every next(): skipping it as a bad element never ended
                    continue
                slots = wanted.get(content_hash(x, kind))
                if not slots:
                    continue
                slot = slots.pop()
                n = nbytes(x)
                acc.hold(n)
                entry = _Entry(x, n, base_pull)  # somewhere after the checkpoint: keep it as the base
                self._buf[slot] = entry
                self._held += n
                missing -= 1
        finally:
            replay.close()

    def _drop_buffer(self) -> None:
        for e in self._buf:
            if e is not None:
                self._account.release(e.nbytes)
        self._buf = []
        self._held = 0

    def _close_self(self) -> None:
        self._drop_buffer()
        self._account.close()

    def _children(self) -> list[Stage]:
        return [self._source]
