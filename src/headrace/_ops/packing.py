"""The packing algorithms behind ``Dataset.pack`` and ``Dataset.concat_then_split`` (no engine here: the stage,
its memory account and its state are :mod:`headrace._ops.pack`).

An input element is one *sequence*: a 1-D array, or a tuple / dict of 1-D arrays of one length (the
components of one sequence: token ids, a loss mask, ...). :class:`SequenceCheck` validates it and turns it
into a :class:`Sequence` (its leaves in ``flatten`` order, its length, its pull number). A packer holds
sequences in the order they were pulled and hands out *rows*: lists of :class:`Piece` (a sequence's leaves
sliced), one segment each, which :class:`RowBuilder` writes into ``(packed, segment_ids, positions)``.

- :class:`FirstFitBins` (``pack``): first fit over ``num_packing_bins`` open bins of ``sequence_length``
  tokens: a sequence goes into the first bin (in the order they were opened) with room for it, or opens a new
  bin; when none has room and all are open, every bin is closed and handed out as one row each, in bin order,
  and the sequence opens the next group of bins (Grain's ``FirstFitPackIterDataset`` without ``shuffle_bins``).
- :class:`ConcatBuffer` (``concat_then_split``): sequences joined in order (each followed by the separator,
  if any) and cut into rows of ``sequence_length`` tokens; a sequence may continue into the next row.

Both are deterministic functions of the sequences added: adding the same sequences again from the start of
what a packer holds (:meth:`FirstFitBins.replay_from`, :meth:`ConcatBuffer.replay_from`) rebuilds it exactly,
which is how a restore rebuilds them (by re-reading the input or from values saved in the state).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np

from .._structure import flatten, pack_as, structure_signature


class Sequence:
    """One input element: ``leaves`` (1-D arrays of one length ``n``, truncated already), ``pull`` (its position
    in the input, from 0) and ``nbytes`` (what its leaves hold, charged to the stage's account)."""

    __slots__ = ("leaves", "n", "nbytes", "pull")

    def __init__(self, leaves: list[np.ndarray], n: int, pull: int) -> None:
        self.leaves = leaves
        self.n = n
        self.pull = pull
        self.nbytes = sum(a.nbytes for a in leaves)


class Piece:
    """``length`` tokens of ``seq`` from token ``start``: one segment of a row."""

    __slots__ = ("length", "seq", "start")

    def __init__(self, seq: Sequence, start: int, length: int) -> None:
        self.seq, self.start, self.length = seq, start, length


class SequenceCheck:
    """Validates input elements against the structure and dtypes of the first (or the input's spec) and makes
    :class:`Sequence` s of them. ``truncate``: a sequence longer than ``sequence_length`` keeps its first
    ``sequence_length`` tokens (else ``ValueError``); ``separator``: leaves appended to every sequence."""

    def __init__(self, stage: str, sequence_length: int | None, truncate: bool) -> None:
        self.stage = stage
        self.length = sequence_length  # None: any length (concat_then_split)
        self.truncate = truncate
        self.separator: list[np.ndarray] | None = None  # leaves appended to every sequence (concat_then_split)
        self.structure: Any = None      # the first element (its containers), set by ``expect``
        self.signature: Any = None
        self.dtypes: list[np.dtype | None] | None = None
        self.names: list[str] = []      # the components, for messages
        self.truncated_tokens = 0

    def expect(self, example: Any, dtypes: Iterable[np.dtype | None]) -> None:
        """Elements must have ``example``'s containers and these leaf dtypes (from the spec or the first one)."""
        self.structure = example
        self.signature = structure_signature(example)
        self.dtypes = list(dtypes)
        self.names = component_names(example)

    def __call__(self, x: Any, pull: int) -> Sequence:
        leaves = flatten(x)
        if self.dtypes is None:
            self.expect(x, [getattr(a, "dtype", None) for a in leaves])  # checked below like any other
        names = self.names
        if structure_signature(x) != self.signature:
            raise TypeError(f"{self.stage}: element {pull} has structure {_shape_of(x)} but the elements before "
                            f"it {_shape_of(self.structure)}; give every element the same components")
        n = -1
        for i, a in enumerate(leaves):
            if not isinstance(a, np.ndarray) or a.dtype.kind not in "biufc":
                what = f"dtype {a.dtype}" if isinstance(a, np.ndarray | np.generic) else type(a).__name__
                raise TypeError(f"{self.stage}: component {names[i]} of element {pull} is {what}; pack takes "
                                "numeric 1-D sequences (e.g. token ids); map strings to ids first")
            if a.ndim != 1:
                raise ValueError(f"{self.stage}: component {names[i]} of element {pull} has shape {a.shape}; pack "
                                 "takes 1-D sequences (one length per element); use unbatch() or reshape(-1) "
                                 "first")
            if a.dtype != self.dtypes[i]:  # type: ignore[index]
                raise TypeError(f"{self.stage}: component {names[i]} of element {pull} has dtype {a.dtype}, the "
                                f"elements before it {self.dtypes[i]}; cast it (astype) in a map first")  # type: ignore[index]
            if n >= 0 and len(a) != n:
                raise ValueError(f"{self.stage}: element {pull} has components of different lengths "
                                 f"({', '.join(f'{names[j]}: {len(b)}' for j, b in enumerate(leaves))}); the "
                                 "components of one sequence must have one length")
            n = len(a)
        if self.separator is not None:
            leaves = [np.concatenate([a, s]) for a, s in zip(leaves, self.separator)]
            return Sequence(leaves, n + 1, pull)
        if self.length is not None and n > self.length:
            if not self.truncate:
                raise ValueError(f"{self.stage}: element {pull} has {n} tokens, more than sequence_length="
                                 f"{self.length}; truncate it first, raise sequence_length, or pass "
                                 "truncate=True to keep its first sequence_length tokens")
            self.truncated_tokens += n - self.length
            leaves = [np.array(a[:self.length]) for a in leaves]  # a copy: the long original is freed
            n = self.length
        return Sequence(leaves, max(n, 0), pull)


def component_names(example: Any) -> list[str]:
    """The components of ``example`` in ``flatten`` order, as messages name them (``'ids'``, ``0``, ``[0]['a']``)."""
    if not isinstance(example, dict | tuple | list):
        return ["0"]
    out: list[str] = []

    def walk(x: Any, path: str) -> None:
        if isinstance(x, dict):
            for k in sorted(x):
                walk(x[k], f"{path}[{k!r}]")
        elif isinstance(x, tuple | list):
            for i, v in enumerate(x):
                walk(v, f"{path}[{i}]")
        else:
            out.append(path)

    walk(example, "")
    return out


def _shape_of(x: Any) -> str:
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}" for k in x) + "}"
    if isinstance(x, tuple | list):
        return f"a {type(x).__name__} of {len(x)}"
    return "one array"


class RowBuilder:
    """Writes rows of pieces into ``(packed, segment_ids, positions)``, each with the input's structure and
    ``sequence_length`` tokens: packed keeps each component's dtype and is ``padding`` after the last piece;
    segment_ids (int32) number the pieces from 1 and are 0 on padding; positions (int32) count from 0 within
    each piece (0 on padding)."""

    def __init__(self, structure: Any, dtypes: list[np.dtype], paddings: list[Any], sequence_length: int) -> None:
        self.structure = structure
        self.dtypes = dtypes
        self.paddings = paddings
        self.length = sequence_length
        self.arange = np.arange(sequence_length, dtype=np.int32)
        self.structured = isinstance(structure, dict | tuple | list)
        self.row_bytes = sequence_length * sum(dt.itemsize + 8 for dt in dtypes)  # one row, all three parts

    def build(self, pieces: list[Piece]) -> tuple[Any, Any, Any, int]:
        """The row of ``pieces`` and the number of tokens in it (the rest is padding)."""
        L = self.length
        values = [np.full(L, p, dtype=dt) for dt, p in zip(self.dtypes, self.paddings)]
        seg = np.zeros(L, dtype=np.int32)
        pos = np.zeros(L, dtype=np.int32)
        at = 0
        for i, piece in enumerate(pieces, 1):
            end = at + piece.length
            for out, leaf in zip(values, piece.seq.leaves):
                out[at:end] = leaf[piece.start:piece.start + piece.length]
            seg[at:end] = i
            pos[at:end] = self.arange[:piece.length]
            at = end
        if not self.structured:
            return values[0], seg, pos, at
        k = len(values)
        return (pack_as(self.structure, values), pack_as(self.structure, [seg] + [seg.copy() for _ in range(k - 1)]),
                pack_as(self.structure, [pos] + [pos.copy() for _ in range(k - 1)]), at)


class FirstFitBins:
    """First fit over ``num_bins`` bins of ``length`` tokens (see the module docstring).

    ``group``: the sequences of the open bins, in pull order; ``ready``: the rows of the closed group (lists of
    sequences), handed out from ``emitted`` on; ``ready_group``: that group's sequences (held until its last
    row is out)."""

    def __init__(self, length: int, num_bins: int) -> None:
        self.length = length
        self.num_bins = num_bins
        self.ready: list[list[Sequence]] = []
        self.ready_group: list[Sequence] = []
        self.emitted = 0
        self._open()

    def _open(self) -> None:
        self.group: list[Sequence] = []
        self.bins: list[list[Sequence]] = []
        self.fill: list[int] = []

    def add(self, seq: Sequence) -> None:
        """Place ``seq`` (non-empty, at most ``length`` tokens); closes the group first if no bin has room."""
        n = seq.n
        for b, used in enumerate(self.fill):
            if used + n <= self.length:
                self.bins[b].append(seq)
                self.fill[b] = used + n
                self.group.append(seq)
                return
        if len(self.bins) == self.num_bins:
            self.close()
        self.bins.append([seq])
        self.fill.append(n)
        self.group.append(seq)

    def close(self) -> None:
        """Close the open bins (the input ended, or a sequence fits none): their rows become ready."""
        if self.bins:
            self.ready, self.ready_group, self.emitted = self.bins, self.group, 0
            self._open()

    def has_row(self) -> bool:
        return self.emitted < len(self.ready)

    def take_row(self) -> tuple[list[Piece], list[Sequence]]:
        """The next ready row as pieces, and the sequences it frees (the closed group's, after its last row)."""
        row = self.ready[self.emitted]
        self.emitted += 1
        freed: list[Sequence] = []
        if self.emitted == len(self.ready):
            freed, self.ready, self.ready_group, self.emitted = self.ready_group, [], [], 0
        return [Piece(s, 0, s.n) for s in row], freed

    def held(self) -> list[Sequence]:
        """Every sequence held, in pull order: adding them again to empty bins rebuilds this packer."""
        return self.ready_group + self.group

    def position(self) -> dict[str, Any]:
        """What adding :meth:`held` again does not say: whether a group is closed and how many rows are out."""
        return {"closed": bool(self.ready), "emitted": self.emitted}

    def restore(self, seqs: list[Sequence], position: dict[str, Any]) -> None:
        """Rebuild from ``seqs`` (:meth:`held` of the saved run) and :meth:`position`."""
        self.ready, self.ready_group, self.emitted = [], [], 0
        self._open()
        for s in seqs:
            self.add(s)
        if position["closed"] and not self.ready:
            self.close()  # closed by the input's end, not by a sequence that fit no bin
        self.emitted = int(position["emitted"])

    def finish(self) -> list[Sequence]:
        """The input ended: the open bins close (their rows become ready); nothing is dropped."""
        self.close()
        return []


class ConcatBuffer:
    """Sequences joined in order and cut into rows of ``length`` tokens (see the module docstring);
    ``offset``: the tokens of the first held sequence already handed out."""

    def __init__(self, length: int, drop_remainder: bool) -> None:
        self.length = length
        self.drop_remainder = drop_remainder
        self.seqs: deque[Sequence] = deque()
        self.offset = 0
        self.tokens = 0   # tokens held and not handed out
        self.ended = False

    def add(self, seq: Sequence) -> None:
        self.seqs.append(seq)
        self.tokens += seq.n

    def finish(self) -> list[Sequence]:
        """The input ended: the rest makes one last, shorter row, or with ``drop_remainder`` is dropped (the
        sequences returned)."""
        self.ended = True
        return self.drop_rest() if self.drop_remainder else []

    def has_row(self) -> bool:
        return self.tokens >= self.length or (self.ended and self.tokens > 0 and not self.drop_remainder)

    def take_row(self) -> tuple[list[Piece], list[Sequence]]:
        want = min(self.length, self.tokens)
        pieces: list[Piece] = []
        freed: list[Sequence] = []
        while want:
            seq = self.seqs[0]
            k = min(want, seq.n - self.offset)
            pieces.append(Piece(seq, self.offset, k))
            want -= k
            self.tokens -= k
            self.offset += k
            if self.offset == seq.n:
                freed.append(self.seqs.popleft())
                self.offset = 0
        return pieces, freed

    def drop_rest(self) -> list[Sequence]:
        """At the end with ``drop_remainder``: the sequences of the dropped last row."""
        freed = list(self.seqs)
        self.seqs.clear()
        self.tokens = self.offset = 0
        return freed

    def held(self) -> list[Sequence]:
        return list(self.seqs)

    def position(self) -> dict[str, Any]:
        return {"offset": self.offset, "closed": self.ended}

    def restore(self, seqs: list[Sequence], position: dict[str, Any]) -> None:
        self.seqs, self.tokens, self.offset, self.ended = deque(), 0, 0, False
        for s in seqs:
            self.add(s)
        self.offset = int(position["offset"])
        self.tokens -= self.offset
        self.ended = bool(position["closed"])

