"""``Dataset.interleave`` and ``Dataset.flat_map``.

Order (tf.data's ``InterleaveDataset``): ``cycle_length`` slots, each holding the dataset
``map_func(x)`` made from one input element. Output takes ``block_length`` elements from the current slot,
then moves to the next slot. An empty slot is filled with the next input element when the cycle reaches
it, and read from at once; an exhausted slot is emptied and the cycle moves on. ``flat_map`` is the case
``cycle_length=1``.

``cycle_length`` ``None`` / ``AUTOTUNE`` follows tf.data's rule (``cycle_length_for``): the CPU count
without ``num_parallel_calls``; ``min(num_parallel_calls, CPU count)`` with a fixed ``num_parallel_calls``;
``ceil(CPU count / 3)`` when both are ``AUTOTUNE``.

``num_parallel_calls`` (int or ``AUTOTUNE`` = ``cycle_length``) reads every open slot in a background
thread (a one-worker prefetcher per slot, ``headrace._engine.pool.parallel``), refilled in bursts from half full so
the reader is woken once per burst rather than once per element. The slots share **one** memory account
(the stage's share of the budget): each reads ahead at most ``max(SLOT_BUFFER, block_length)`` elements
and at most its fair part of the account (``cap / (cycle_length x element size)``, at least one; over the
open slots instead once the input has ended), and the
readers keep one element of headroom that only the slot the consumer is waiting on may use. So a tight
budget shortens the read-ahead instead of starving a slot: with room for two elements per open slot the
stage runs at most a little slower than with an unlimited budget (``bench/promises.py`` measures it).
The output order is the same as without parallelism when ``deterministic`` is true; with
``deterministic=False`` a slot that has nothing ready is passed over for one that has.

State: the cycle position, the input's state, and per open slot the input state just before its element
plus the slot's own iterator state. Restoring re-reads those input elements (cheap for file-name inputs)
and restores each slot where it was; when the input does not replay deterministically (below a
``deterministic=False`` stage) the slot's element itself is saved instead (``headrace._engine.by_value``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

from .._args import count_arg, parallel_calls_arg
from .._engine import by_value
from .._engine.calls import call_with_element, guarded_call
from .._engine.context import IteratorContext
from .._engine.counted_cardinality import counting_enabled, elements, memoized
from .._engine.pool.parallel import PoolIterator
from .._engine.recipe import DatasetNode, SpecOf, node_of, trace
from .._engine.replay import rereads_same
from .._engine.stage import Stage
from .._engine.stage_support import check_state, fn_name, note_error
from .._engine.tuning.knobs import MAX_BUFFER, KnobKind, StageStats, stage_tuning
from .._engine.tuning.starting_values import cpu_count
from .._handoff import delivers_charged, passing, taker_of
from .._memory import Cancelled
from .._options import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from .prefetch import _identity

SLOT_BUFFER = 16  # elements read ahead per parallel slot (records are small; the budget still caps bytes)


class InterleaveNode(DatasetNode):
    def __init__(self, input_node: DatasetNode, fn: Callable[..., Any], cycle_length: int | None,
                 block_length: int | None, num_parallel_calls: int | None, deterministic: bool | None,
                 name: str | None, kind: str = "interleave") -> None:
        super().__init__([input_node])
        if not callable(fn):
            raise TypeError(f"{kind}(map_func={fn!r}): map_func must be callable and return a Dataset")
        if cycle_length is not None:
            cycle_length = count_arg(cycle_length, f"{kind}(cycle_length)", minimum=1, allow_autotune=True,
                                     fix="use headrace.AUTOTUNE to read as many datasets at once as there are CPUs")
        if block_length is not None:
            block_length = count_arg(block_length, f"{kind}(block_length)", minimum=1,
                                     fix="use 1 to take one element from each dataset in turn")
        self.fn = fn
        self.cycle_length = cycle_length
        self.block_length = 1 if block_length is None else block_length
        self.num_parallel_calls = parallel_calls_arg(num_parallel_calls, kind)
        self.deterministic = deterministic
        self.kind = kind
        self.label = f"{kind}({name or fn_name(fn)})"

    def shard_source(self, num_shards: int, index: int) -> DatasetNode | None:
        """Shard the datasets (files) interleaved, when there are at least ``num_shards`` of them."""
        from .shard import shard_at_source

        n = self.inputs[0].cardinality()
        if n < num_shards:  # unknown / infinite (negative) or too few: shard the elements above instead
            return None
        return self.with_inputs([shard_at_source(self.inputs[0], num_shards, index)])

    def cardinality(self) -> int:
        """tf.data's: infinite for a parallel interleave of an infinite input, else unknown; inside
        ``counting()`` the sum of the counts of the datasets ``map_func`` makes
        (``headrace._engine.counted_cardinality``)."""
        n = self.inputs[0].cardinality()
        if self.num_parallel_calls is not None and n == INFINITE_CARDINALITY:
            return INFINITE_CARDINALITY
        if n < 0 or not counting_enabled():
            return UNKNOWN_CARDINALITY
        return memoized(self, self._count)

    def _count(self) -> int:
        total = 0
        with contextlib.closing(elements(self.inputs[0])) as inputs:
            for x in inputs:
                child = node_of(call_with_element(self.fn, x))
                n = UNKNOWN_CARDINALITY if child is None else child.cardinality()
                if n < 0:
                    return n  # infinite or unknown
                total += n
        return total

    def compute_spec(self, spec_of: SpecOf) -> Any:
        def dataset_spec(ds: Any) -> Any:
            node = node_of(ds)
            if node is None:
                raise TypeError("map_func did not return a Dataset")
            return spec_of(node)

        return trace(lambda x: call_with_element(self.fn, x), spec_of(self.inputs[0]), dataset_spec)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        cycle = cycle_length_for(self.cycle_length, self.num_parallel_calls)
        parallel = self.num_parallel_calls is not None
        return _InterleaveIterator(ctx, self, self.inputs[0].make_iterator(ctx), int(cycle), parallel,
                                   ctx.deterministic(self.deterministic), ctx.stage_name(self, self.label))


def cycle_length_for(cycle_length: int | None, num_parallel_calls: int | None) -> int:
    """tf.data's ``cycle_length`` for ``None`` / ``AUTOTUNE`` (see the module docstring)."""
    if cycle_length is not None and cycle_length != AUTOTUNE:
        return cycle_length
    cpus = cpu_count()
    if num_parallel_calls is None:
        return cpus
    if num_parallel_calls != AUTOTUNE:
        return min(num_parallel_calls, cpus)
    return -(-cpus // 3)


class _Slot:
    __slots__ = ("before", "element", "epoch", "iterator")

    def __init__(self, iterator: Stage, before: Any, element: Any, epoch: int) -> None:
        self.iterator = iterator
        self.before = before    # the input's state before the element that opened this slot
        self.element = element  # that element (usually a file name), saved by value when re-reading cannot
        self.epoch = epoch      # the input's replay_epoch() then


class _InterleaveIterator(Stage):
    ctx: IteratorContext

    def __init__(self, ctx: IteratorContext, node: InterleaveNode, source: Stage, cycle_length: int,
                 parallel: bool, deterministic: bool, stage: str) -> None:
        super().__init__(ctx)
        self.kind = node.kind
        self._node = node
        self._source = source
        self._cycle_length = cycle_length
        self._block_length = node.block_length
        self._parallel = parallel
        self._deterministic = deterministic
        self.reorders = parallel and not deterministic  # (replay's rule 1)
        self._stage = stage
        self._slots: list[_Slot | None] = [None] * cycle_length
        self._cycle_index = 0
        self._block_index = 0
        self._end_of_input = False
        self._input_index = 0
        self._input_replays = source.replays_deterministically()
        self._account = None
        self._read_ahead = max(SLOT_BUFFER, self._block_length)
        self._parallel_slots = cycle_length
        self._slots_charged = False  # whether the last slot opened delivers charged (delivers_charged)
        self._tuning: Any = None
        if parallel:
            self._account = ctx.account(stage, cycle_length * self._read_ahead)
            self._account.warn_shrink = False
            if node.num_parallel_calls == AUTOTUNE and ctx.options.autotune_enabled is not False:
                t = self._tuning = stage_tuning(ctx, stage, "interleave")
                t.knob(KnobKind.PARALLEL_SLOTS, cycle_length, 0, cycle_length,
                       f"AUTOTUNE start: every slot of cycle_length={cycle_length} read by its own thread")
                t.knob(KnobKind.READ_AHEAD, self._read_ahead, 1, MAX_BUFFER,
                       f"AUTOTUNE start: {self._read_ahead} elements per slot (within its share of the budget)")
                t.start(self)

    # ---- AUTOTUNE (headrace._engine.tuning.tuner) ------------------------------------------------------------------
    def apply_knob(self, kind: KnobKind, value: int, *, start: bool = False) -> None:
        """Set ``kind`` to ``value`` (the tuner thread; ``start``: its starting value, while building)."""
        if kind is KnobKind.READ_AHEAD:
            self._read_ahead = max(1, value)
            if self._account is not None:
                self._account.set_demand(self._cycle_length * self._read_ahead, start=start)
        elif kind is KnobKind.PARALLEL_SLOTS:
            self._parallel_slots = value
            for j, slot in enumerate(list(self._slots)):
                if slot is not None and isinstance(slot.iterator, PoolIterator):
                    slot.iterator.pool.set_workers(1 if j < value else 0)

    def tuning_stats(self) -> StageStats:
        """The slots' counters summed; its settings: the slots read by their own thread (its workers) and the
        elements each reads ahead (its window)."""
        total = StageStats()
        for slot in list(self._slots):
            if slot is not None and isinstance(slot.iterator, PoolIterator):
                total = total + slot.iterator.pool.stage_stats()
        return dataclasses.replace(total, workers=self._parallel_slots, window=self._read_ahead)

    def _slot_window(self) -> int:
        """Read-ahead per slot: SLOT_BUFFER (or block_length; AUTOTUNE: the tuned read-ahead), at most a
        fair part of the stage's share: the share split over the cycle's ``cycle_length`` slots while the
        input may open more, over the open ones once it ended. (Split over the slots open so far, the first
        slots read far ahead while the others were still opening and held most of the share when they were
        open: the consumer, taking the slots in turn, then waited on each of the others' reads in series:
        docs/design/pool.md.)"""
        most = self._read_ahead
        acc = self._account
        if acc is None:
            return most
        unit = acc.unit_bytes()
        if unit <= 0:
            return most
        active = max(1, sum(s is not None for s in self._slots)) if self._end_of_input else self._cycle_length
        return max(1, min(most, int(acc.cap_bytes // (active * unit))))

    # ---- opening slots -------------------------------------------------------------------------------
    def _open(self, x: Any, before: Any, slot: int, epoch: int) -> _Slot:
        i = self._input_index
        self._input_index += 1
        try:
            ds = guarded_call(self._node.fn, x, self._stage)
        except Exception as e:
            note_error(e, self._stage, i)
            raise
        node = node_of(ds)
        if node is None:
            raise note_error(TypeError(f"{self._stage}: map_func returned {type(ds).__name__}; it must return a "
                                       "headrace.Dataset (e.g. headrace.io.TFRecordDataset(filename))"),
                             self._stage, i)
        with self.ctx.tree.nested_build():
            it = node.make_iterator(self.ctx)
        if self._parallel:
            it = PoolIterator(self.ctx, it, _identity, f"{self._stage}[slot {slot}]", 1, True,
                              kind="interleave_slot", window=self._slot_window, account=self._account,
                              identity=True, refill_at=lambda: self._slot_window() // 2,
                              urgent_when_waited=True, headroom=self._cycle_length > 1)
            if slot >= self._parallel_slots:
                it.pool.set_workers(0)  # AUTOTUNE: this slot is read in the consumer's thread
        else:
            self._slots_charged = delivers_charged(it)
        return _Slot(it, before, x, epoch)

    def _took_one(self) -> None:
        """The current slot gave one element of its block (or, parallel, an error in its place)."""
        self._block_index += 1
        if self._block_index >= self._block_length:
            self._advance()

    def _advance(self) -> None:
        self._block_index = 0
        self._cycle_index = (self._cycle_index + 1) % self._cycle_length

    def _close_slot(self, index: int) -> None:
        slot = self._slots[index]
        self._slots[index] = None
        if slot is not None:
            slot.iterator.close()

    # ---- iteration -----------------------------------------------------------------------------------
    def __next__(self) -> Any:
        slots = self._slots
        while not self._end_of_input or any(s is not None for s in slots):
            slot = slots[self._cycle_index]
            if slot is not None:
                if not self._deterministic and self._parallel:
                    self._prefer_ready_slot()
                    slot = slots[self._cycle_index] or slot
                try:
                    if taker_of(self) is None:
                        x = slot.iterator.__next__()
                    else:  # a reader above takes the slot's element as it is handed off (_handoff)
                        with passing(self, slot.iterator):
                            x = slot.iterator.__next__()
                except StopIteration:
                    self._close_slot(self._cycle_index)
                    self._advance()
                    continue
                except Cancelled:
                    raise
                except Exception:
                    if self._parallel:  # the error is the slot's element in its turn (tf.data's parallel
                        self._took_one()  # interleave; its sequential one reads the same slot again)
                    raise
                self._took_one()
                return x
            if not self._end_of_input:
                before = by_value.materialize(self._source.get_state())  # kept for the slot's lifetime
                epoch = self._source.replay_epoch()
                try:
                    x = self._source.__next__()
                except StopIteration:
                    self._end_of_input = True
                    continue
                slots[self._cycle_index] = self._open(x, before, self._cycle_index, epoch)
            else:
                self._advance()
        raise StopIteration

    def _prefer_ready_slot(self) -> None:
        """deterministic=False: if the current slot has nothing buffered, move to one that has."""
        current = self._slots[self._cycle_index]
        if current is None or current.iterator.has_ready():
            return
        n = self._cycle_length
        for k in range(1, n):
            j = (self._cycle_index + k) % n
            s = self._slots[j]
            if s is not None and s.iterator.has_ready():
                self._cycle_index, self._block_index = j, 0
                return

    # ---- state ----------------------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "cycle_length": self._cycle_length, "block_length": self._block_length,
            "cycle_index": self._cycle_index, "block_index": self._block_index,
            "end_of_input": self._end_of_input, "input_index": self._input_index,
            "input": self._source.get_state(),
            "slots": [None if s is None else {"before": self._saved_before(s), "state": s.iterator.get_state()}
                      for s in self._slots],
        }

    def _saved_before(self, slot: _Slot) -> Any:
        """Where to re-read the slot's element, or the element itself when the input cannot replay it."""
        if rereads_same(self._source, slot.epoch, self._input_replays):
            return slot.before
        return {"by_value": by_value.Deferred(slot.element)}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, cycle_length=self._cycle_length, block_length=self._block_length)
        for j in range(self._cycle_length):
            self._close_slot(j)
        for j, saved in enumerate(state["slots"]):
            if saved is None:
                continue
            before = saved["before"]
            if isinstance(before, dict) and "by_value" in before:  # the input did not replay: saved as is
                x = by_value.decode(before["by_value"], self._stage)
            else:
                self._source.set_state(before)
                x = self._source.__next__()
            slot = self._open(x, before, j, self._source.replay_epoch())
            slot.iterator.set_state(saved["state"])
            self._slots[j] = slot
        self._source.set_state(state["input"])
        self._cycle_index = int(state["cycle_index"])
        self._block_index = int(state["block_index"])
        self._end_of_input = bool(state["end_of_input"])
        self._input_index = int(state["input_index"])

    def _close_self(self) -> None:
        if self._tuning is not None:
            self._tuning.remove(self)
        for j in range(self._cycle_length):
            self._close_slot(j)
        if self._account is not None:
            self._account.close()

    def delivers_charged(self) -> bool:
        """Every slot is read by a thread, or (sequential) every slot is open and delivers charged: the
        elements are charged until handed on (``headrace._handoff``)."""
        if self._parallel:
            return self._parallel_slots >= self._cycle_length
        # a slot opened during the pull is taken to be like the last one opened
        return self._slots_charged and all(s is None or delivers_charged(s.iterator) for s in self._slots)

    def _children(self) -> list[Stage]:
        children = [self._source]  # (asked per element, by replay_epoch: a loop, no generator)
        for s in self._slots:
            if s is not None:
                children.append(s.iterator)
        return children
