"""``Dataset.pack`` and ``Dataset.concat_then_split``: sequences packed into rows of ``sequence_length`` tokens.

headrace's additions (tf.data has none; Grain's ``FirstFitPackIterDataset`` / ``ConcatThenSplitIterDataset``
and T5's packing are the anchors). The algorithms are :mod:`headrace._ops.packing`; this module is the node
(arguments, element spec) and the stage (memory, state, figures). Rationale: docs/design/packing.md.

Memory: one mandatory account per stage. Each input element is reserved before it is pulled (the largest
sequence seen so far) and settled to the bytes of its sequence as held (after truncation); a row is reserved
before it is built and handed on charged (``headrace._handoff``); the sequences of a row are released once
no row still to come needs them (``pack``: when the last row of their group is out). The unit of the account is
one output row; ``pack`` needs ``num_packing_bins + 2`` rows (its open bins, the row being built and the
element being pulled), ``concat_then_split`` 3 (the largest element held counts as a row where it is larger):
a budget that cannot hold them raises ``MemoryBudgetError`` naming the stage.

State (exactly once): positions where it can, as ``batch``. The stage checkpoints its input's state every
``CHECKPOINT_EVERY`` pulls; a state names the latest checkpoint at or before the first sequence still held
(the first of the group being handed out or filled: rebuilding starts with empty bins there), the pull count
and the packer's position (rows handed out of a closed group, tokens of the first sequence handed out).
Restoring re-reads the input from that checkpoint, skips to the first held sequence and packs again up to
the pull count: at most ``CHECKPOINT_EVERY`` elements plus one group. Where re-reading could give other
elements (below a ``deterministic=False`` stage, or after a replay event: ``headrace._engine.replay``), the
held sequences are saved by value instead (``headrace._engine.by_value``), as ``batch`` saves its partial batch;
so are they while no checkpoint precedes the first held sequence (restored from such a state).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from .._args import count_arg
from .._engine import by_value
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, SpecOf
from .._engine.replay import fast_forward, rereads_same
from .._engine.stacking import padding_scalar
from .._engine.stage import Stage
from .._engine.stage_support import check_state, stop_flag
from .._handoff import hand_off
from .._memory import WHOLE
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from .._spec import TensorSpec
from .._structure import flatten, pack_as
from .packing import ConcatBuffer, FirstFitBins, RowBuilder, Sequence, SequenceCheck, component_names

DEFAULT_PACKING_BINS = 16
"""``pack``'s ``num_packing_bins`` when not given: 16 open bins (rows), 16 x ``sequence_length`` tokens held."""
CHECKPOINT_EVERY = 64
"""The stage takes its input's state every this many pulls (the most a restore re-reads besides one group)."""


class PackNode(DatasetNode):
    """``pack`` (``mode="first_fit"``) or ``concat_then_split`` (``mode="concat"``); see the facade."""

    def __init__(self, input_node: DatasetNode, mode: str, sequence_length: Any, num_packing_bins: Any = None,
                 padding_value: Any = 0, truncate: bool = True, separator: Any = None,
                 drop_remainder: bool = False) -> None:
        super().__init__([input_node])
        self.mode = mode
        self.label = "pack" if mode == "first_fit" else "concat_then_split"
        self.sequence_length = count_arg(sequence_length, f"{self.label}(sequence_length)", minimum=1,
                                         fix="give the number of tokens of one packed row")
        self.num_packing_bins = 1
        if mode == "first_fit":
            bins = DEFAULT_PACKING_BINS if num_packing_bins is None else num_packing_bins
            self.num_packing_bins = count_arg(bins, "pack(num_packing_bins)", minimum=1,
                                              fix="use 1 to fill one row at a time")
        self.padding_value = padding_value
        self.truncate = bool(truncate)
        self.separator = separator
        self.drop_remainder = bool(drop_remainder)
        self.static_spec()  # a spec that cannot be packed raises now

    def settings(self) -> dict[str, Any]:
        return {"mode": self.mode, "sequence_length": self.sequence_length,
                "num_packing_bins": self.num_packing_bins, "drop_remainder": self.drop_remainder}

    def cardinality(self) -> int:
        return INFINITE_CARDINALITY if self.inputs[0].cardinality() == INFINITE_CARDINALITY else UNKNOWN_CARDINALITY

    def scalars(self, value: Any, dtypes: list[np.dtype], structure: Any, what: str) -> list[Any]:
        """``value`` (one scalar, or the input's structure of scalars) as one scalar per component."""
        names = component_names(structure)
        per = flatten(value) if isinstance(value, dict | tuple | list) else [value] * len(dtypes)
        if len(per) != len(dtypes):
            raise ValueError(f"{self.label}: {what}={value!r} has {len(per)} components but the elements have "
                             f"{len(dtypes)}; give one scalar or one per component")
        return [padding_scalar(v, dt, f"{self.label}: {what} for component {n}")
                for v, dt, n in zip(per, dtypes, names)]

    def compute_spec(self, spec_of: SpecOf) -> Any:
        spec = spec_of(self.inputs[0])
        if spec is None:
            return None
        leaves = flatten(spec)
        names = component_names(spec)
        for s, name in zip(leaves, names):
            if not isinstance(s, TensorSpec) or s.dtype.kind not in "biufc":
                raise TypeError(f"{self.label}: component {name} is {s!r}; {self.label} takes numeric 1-D "
                                "sequences (e.g. token ids); map strings to ids first")
            if s.shape.rank is not None and s.shape.rank != 1:
                raise ValueError(f"{self.label}: component {name} has shape {s.shape}; {self.label} takes 1-D "
                                 "sequences (one length per element); use unbatch() or reshape(-1) first")
        dtypes = [s.dtype for s in leaves]
        self.scalars(self.padding_value, dtypes, spec, "padding_value")
        if self.separator is not None:
            self.scalars(self.separator, dtypes, spec, "separator")
        L = self.sequence_length

        def out(dtype_of: Any) -> Any:
            specs = [TensorSpec((L,), dtype_of(s)) for s in leaves]
            return pack_as(spec, specs) if isinstance(spec, dict | tuple | list) else specs[0]

        return (out(lambda s: s.dtype), out(lambda s: np.int32), out(lambda s: np.int32))

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        source = self.inputs[0].make_iterator(ctx)
        stage = ctx.stage_name(self, f"{self.label}({self.sequence_length})")
        return _PackIterator(ctx, self, source, stage)


class _PackIterator(Stage):
    kind = "pack"
    depends_on_input_order = True  # consecutive elements share rows

    def __init__(self, ctx: IteratorContext, node: PackNode, source: Stage, stage: str) -> None:
        super().__init__(ctx)
        self._node = node
        self._source = source
        self._next_input = source.__next__
        self._stage = stage
        self._L = node.sequence_length
        units = node.num_packing_bins + 2
        self._account = ctx.account(stage, units, mandatory=True, min_units=units, stage_of=stage,
                                    hint=f"use fewer num_packing_bins or a shorter sequence_length in {node.label}")
        self._account.min_what = (f"{node.num_packing_bins} open row(s), the row being built and the element being "
                                  f"pulled, {units} rows of {self._L} tokens")
        self._check = SequenceCheck(stage, self._L if node.mode == "first_fit" else None, node.truncate)
        self._builder: RowBuilder | None = None
        spec = node.inputs[0].static_spec()
        if spec is not None:
            self._start_rows(spec, [s.dtype for s in flatten(spec)])
        self._largest = 0
        self._pulls = 0
        self._done = False
        self._counts = {"rows": 0, "tokens": 0, "sequences": 0, "empty_sequences": 0, "dropped_tokens": 0}
        self._packer = self._new_packer()
        self._checkpoints: deque[tuple[int, Any, int]] = deque(
            [(0, by_value.materialize(source.get_state()), source.replay_epoch())])

    def _new_packer(self) -> FirstFitBins | ConcatBuffer:
        node = self._node
        if node.mode == "first_fit":
            return FirstFitBins(self._L, node.num_packing_bins)
        return ConcatBuffer(self._L, node.drop_remainder)

    def _start_rows(self, structure: Any, dtypes: list[np.dtype]) -> None:
        """The elements' structure and dtypes are known: the checks and the row builder."""
        node = self._node
        self._check.expect(structure, dtypes)
        paddings = node.scalars(node.padding_value, dtypes, structure, "padding_value")
        if node.separator is not None:
            seps = node.scalars(node.separator, dtypes, structure, "separator")
            self._check.separator = [np.array([v], dtype=dt) for v, dt in zip(seps, dtypes)]
        self._builder = RowBuilder(structure, dtypes, paddings, self._L)
        self._account.grow_unit(self._builder.row_bytes)

    # ---- pulling ------------------------------------------------------------------------------------
    def _take(self, x: Any, pull: int) -> Sequence:
        if self._builder is None:
            self._start_rows(x, [getattr(a, "dtype", np.dtype(object)) for a in flatten(x)])
        return self._check(x, pull)

    def _first_held(self) -> int:
        """The pull number a rebuild starts at: the first sequence held, or the next pull when none is."""
        held = self._packer.held()
        return held[0].pull if held else self._pulls

    def _checkpoint(self) -> None:
        cps = self._checkpoints
        if self._pulls - cps[-1][0] < CHECKPOINT_EVERY:
            return
        cps.append((self._pulls, by_value.materialize(self._source.get_state()), self._source.replay_epoch()))
        first = self._first_held()
        while len(cps) > 1 and cps[1][0] <= first:
            cps.popleft()

    def _pull(self) -> bool:
        """Pull one element into the packer; False at the end of the input. An element that raises (or that
        ``pack`` rejects) counts as a position, as in ``batch``."""
        self._checkpoint()
        pull = self._pulls
        with self._account.reserve(self._largest, stop_flag(self.ctx)) as reservation:
            try:
                x = self._next_input()
            except StopIteration:
                return False
            except Exception:
                self._pulls += 1
                raise
            self._pulls += 1
            seq = self._take(x, pull)
            del x
            reservation.settle(seq.nbytes)
        self._largest = max(self._largest, seq.nbytes)
        self._place(seq)
        return True

    def _place(self, seq: Sequence) -> None:
        if seq.n == 0:  # no token: no room, no segment (see Dataset.pack)
            self._counts["empty_sequences"] += 1
            self._account.release(seq.nbytes)
            return
        self._counts["sequences"] += 1
        self._packer.add(seq)

    def _release(self, seqs: list[Sequence]) -> None:
        if seqs:
            self._account.release(sum(s.nbytes for s in seqs), count=len(seqs))

    # ---- output -------------------------------------------------------------------------------------
    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        packer = self._packer
        while not packer.has_row():
            if not self._pull():
                left = getattr(packer, "tokens", 0)  # (concat_then_split: what drop_remainder drops)
                dropped = packer.finish()
                if dropped:
                    self._counts["dropped_tokens"] += left
                self._release(dropped)
                if not packer.has_row():
                    self._done = True
                    raise StopIteration
        pieces, freed = packer.take_row()
        builder: RowBuilder = self._builder  # type: ignore[assignment]
        n = builder.row_bytes
        with self._account.reserve(n, stop_flag(self.ctx), WHOLE) as reservation:
            packed, segment_ids, positions, used = builder.build(pieces)
            reservation.settle(n, unit=False)
        self._release(freed)
        self._counts["rows"] += 1
        self._counts["tokens"] += used
        hand_off(self._account, n, self)
        return packed, segment_ids, positions

    def delivers_charged(self) -> bool:
        """A row is charged until it is returned (``headrace._handoff``)."""
        return True

    def stage_figures(self) -> dict[str, Any]:
        """For ``explain()``: the packing efficiency (non-padding share of the tokens of the rows handed out)
        and the counts behind it."""
        c = self._counts
        slots = c["rows"] * self._L
        return {"packing_efficiency": round(c["tokens"] / slots, 4) if slots else None, **c,
                "truncated_tokens": self._check.truncated_tokens}

    # ---- state --------------------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"kind": self.kind, **self._node.settings(), "done": self._done,
                                 "pulls": self._pulls, "counts": dict(self._counts),
                                 "truncated_tokens": self._check.truncated_tokens,
                                 "packer": self._packer.position()}
        first = self._first_held()
        anchor = self._checkpoints[0]
        for cp in self._checkpoints:
            if cp[0] <= first:
                anchor = cp
        if self._done or (anchor[0] <= first and rereads_same(self._source, anchor[2])):
            state.update(anchor=anchor[0], input=anchor[1], first=first)
        else:  # re-reading could deliver other elements, or no checkpoint precedes the first held sequence
            # (restored by value: the only checkpoint is at the restored pull count): the held sequences themselves
            held = [(s.pull, s.n, self._element(s)) for s in self._packer.held()]
            state.update(input=self._source.get_state(), held=by_value.Deferred(held))
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, **self._node.settings())
        self._release(self._packer.held())
        self._packer = self._new_packer()
        self._source.set_state(state["input"])
        pulls = int(state["pulls"])
        if "held" in state:
            held = by_value.decode(state["held"], self._stage)
            if held and self._builder is None:
                first_element = held[0][2]
                self._start_rows(first_element, [a.dtype for a in flatten(first_element)])
            seqs = [Sequence(flatten(x), int(n), int(p)) for p, n, x in held]
            anchor = pulls
        else:
            anchor = int(state["anchor"])
            seqs = self._replay(anchor, int(state["first"]), pulls) if not state["done"] else []
        for s in seqs:
            self._account.hold(s.nbytes)
            self._largest = max(self._largest, s.nbytes)
        self._packer.restore(seqs, state["packer"])
        self._pulls, self._done = pulls, bool(state["done"])
        self._counts = {k: int(v) for k, v in state["counts"].items()}
        self._check.truncated_tokens = int(state["truncated_tokens"])
        self._checkpoints = deque([(anchor, by_value.materialize(state["input"]), self._source.replay_epoch())])

    def _element(self, seq: Sequence) -> Any:
        """``seq``'s leaves in the elements' structure (for a state saved by value)."""
        structure = self._check.structure
        return pack_as(structure, seq.leaves) if isinstance(structure, dict | tuple | list) else seq.leaves[0]

    def _replay(self, anchor: int, first: int, pulls: int) -> list[Sequence]:
        """Re-read the input from the checkpoint at pull ``anchor`` (restored): skip to ``first`` and return
        the sequences of positions ``first .. pulls - 1`` (positions that raised were reported already)."""
        fast_forward(self._source, first - anchor)
        seqs = []
        for pull in range(first, pulls):
            try:
                seq = self._take(self._next_input(), pull)
            except StopIteration:
                break
            except Exception:
                continue
            if seq.n:
                seqs.append(seq)
        return seqs

    def _drop_all(self) -> None:
        self._release(self._packer.held())
        self._packer = self._new_packer()

    def _close_self(self) -> None:
        self._drop_all()
        self._account.close()

    def _children(self) -> list[Stage]:
        return [self._source]

