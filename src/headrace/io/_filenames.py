"""The ``filenames`` of tf.data's file readers (``TFRecordDataset``, ``TextLineDataset``,
``FixedLengthRecordDataset``): one path, a list of paths or a Dataset of paths; their ``buffer_size`` and
``num_parallel_reads`` arguments; sharding by file; and the parallel interleave of files tf.data builds for
``num_parallel_reads > 1`` (``names.interleave(reader, cycle_length=n, block_length=1, num_parallel_calls=n)``).
"""

from __future__ import annotations

import copy
import io
import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .._args import as_int
from .._engine.context import IteratorContext
from .._engine.counted_cardinality import elements
from .._engine.recipe import DatasetNode, node_of
from .._engine.stage import Stage
from .._errors import StateError
from .._files.streams import DEFAULT_BUFFER_BYTES
from .._machine import cpu_count
from .._ops.in_memory import TensorSlicesNode
from .._ops.interleave import InterleaveNode
from .._options import AUTOTUNE
from . import files


def name_list(filenames: Any, what: str) -> list[str]:
    """Paths from one path (``str``, ``bytes``, ``os.PathLike``), a numpy array or an iterable of them."""
    if isinstance(filenames, str | bytes | os.PathLike):
        return [files.to_str_path(filenames)]
    if isinstance(filenames, np.ndarray):
        return [files.to_str_path(v) for v in filenames.reshape(-1).tolist()]
    if isinstance(filenames, Iterable):
        return [files.to_str_path(v) for v in filenames]
    raise TypeError(f"{what}(filenames={filenames!r}): expected a path (str, bytes, os.PathLike), "
                    "a list of paths or a Dataset of paths")


def read_buffer_size(value: Any, what: str) -> int:
    """``buffer_size`` as tf.data takes it: ``None`` (256 KiB) or an integer >= 0; 0 is "no buffering" in
    tf.data, here the smallest read buffer Python's ``io`` uses (``io.DEFAULT_BUFFER_SIZE``)."""
    if value is None:
        return DEFAULT_BUFFER_BYTES
    n = as_int(value, f"{what}(buffer_size)", minimum=0, fix="use None for the default (256 KiB) or 0 "
               "for the smallest buffer")
    return n or io.DEFAULT_BUFFER_SIZE


def parallel_reads(value: Any, what: str) -> int:
    """``num_parallel_reads``: ``None`` (1), ``AUTOTUNE`` (the CPU count) or an integer >= 1."""
    if value is None:
        return 1
    n = as_int(value, f"{what}(num_parallel_reads)")
    if n == AUTOTUNE:
        return cpu_count()
    if n < 1:
        raise ValueError(f"{what}(num_parallel_reads={n}) must be None, headrace.AUTOTUNE or >= 1")
    return n


class FileNames:
    """The files of a reader: a list (``names``) or a Dataset of names (``node``), exactly one of them."""

    def __init__(self, filenames: Any, what: str) -> None:
        self.node: DatasetNode | None = node_of(filenames)
        self.names: list[str] | None = None if self.node is not None else name_list(filenames, what)

    def inputs(self) -> list[DatasetNode]:
        """The recipe inputs of the reader's node (the names Dataset, if any)."""
        return [self.node] if self.node is not None else []

    def shard(self, num_shards: int, index: int) -> FileNames | None:
        """Files ``index, index + num_shards, ...`` when there are at least ``num_shards`` files, else None (the
        elements are sharded above the reader)."""
        from .._ops.shard import shard_at_source

        clone = copy.copy(self)
        if self.node is not None:
            if self.node.cardinality() < num_shards:
                return None
            clone.node = shard_at_source(self.node, num_shards, index)
            return clone
        if self.names is None or len(self.names) < num_shards:
            return None
        clone.names = self.names[index::num_shards]
        return clone

    def all_names(self) -> list[str] | None:
        """Every name (a names Dataset is iterated); None when a names Dataset's cardinality is unknown."""
        if self.names is not None:
            return self.names
        node = self.node  # (exactly one of names and node is set)
        if node is None or node.cardinality() < 0:
            return None
        return [files.to_str_path(v) for v in elements(node)]

    def interleave(self, ctx: IteratorContext, single: Callable[[Any], DatasetNode], n: int, label: str) -> Stage:
        """tf.data's ``num_parallel_reads=n``: ``n`` files read at once, their elements interleaved one by one
        (deterministic unless ``Options(deterministic=False)``; the iterator state is interleave's)."""
        names = self.node if self.node is not None else TensorSlicesNode(np.array(self.names, dtype=object))
        return InterleaveNode(names, single, cycle_length=n, block_length=1, num_parallel_calls=n,
                              deterministic=None, name=label).make_iterator(ctx)


def shard_by_file(node: Any, num_shards: int, index: int) -> DatasetNode | None:
    """A copy of a reader's ``node`` (its files in ``node._files``) reading files ``index, index + num_shards,
    ...`` when there are at least ``num_shards`` files, else None (its elements are sharded above);
    ``headrace._ops.shard.shard_at_source``."""
    shard = node._files.shard(num_shards, index)
    if shard is None:
        return None
    clone = copy.copy(node)
    clone._files = shard
    clone.inputs = tuple(shard.inputs())
    return clone


class NameSource:
    """The file names of a reader's iterator: a list, or a Dataset of names pulled lazily, one at a time
    (only the current name and the names iterator's state just before it are kept, so an endless
    ``list_files(...).repeat()`` holds nothing more as it goes)."""

    def __init__(self, ctx: IteratorContext, names: FileNames) -> None:
        self._it: Stage | None = names.node.make_iterator(ctx) if names.node is not None else None
        self._list: list[str] = names.names if names.names is not None else []  # (used while _it is None)
        self._index = -1  # file index of the last name pulled from the dataset
        self._name: str | None = None
        self._before: Any = None  # the names iterator's state just before that name was pulled

    def get(self, i: int) -> str | None:
        """File ``i``'s name, or None past the end (files are visited in order: ``i`` never goes back)."""
        it = self._it
        if it is None:
            return self._list[i] if i < len(self._list) else None
        while self._index < i:
            before = it.get_state()
            try:
                name = next(it)
            except StopIteration:
                return None
            self._index, self._name, self._before = self._index + 1, files.to_str_path(name), before
        return self._name if self._index == i else None

    def known(self, i: int) -> str | None:
        """File ``i``'s name if already known (never pulls from a names dataset)."""
        if self._it is None:
            return self._list[i] if i < len(self._list) else None
        return self._name if i == self._index else None

    def state(self, i: int) -> Any:
        """The names iterator's state just before file ``i`` is pulled (None for a list)."""
        if self._it is None:
            return None
        return self._before if i == self._index else self._it.get_state()

    def restore(self, i: int, names_state: Any) -> None:
        if self._it is None:
            return
        self._it.set_state(names_state)
        self._index, self._name, self._before = i - 1, None, None

    def restore_checked(self, state: dict[str, Any], kind: str) -> int:
        """Restore to the file of a reader's ``state`` (``file_index``, ``names``, ``path``); its index.

        Raises ``StateError`` when that file has another name in this pipeline than in the state."""
        i = int(state["file_index"])
        self.restore(i, state.get("names"))
        name = self.get(i)
        if name is not None and state.get("path") is not None and name != state["path"]:
            raise StateError(f"{kind} state mismatch: file {i} is {name!r} in this pipeline but {state['path']!r} in "
                             "the state; restore into a pipeline reading the same files in the same order")
        return i

    def children(self) -> list[Stage]:
        """The names iterator, when the names are a Dataset (the reader's input stage)."""
        return [self._it] if self._it is not None else []
