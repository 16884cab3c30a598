"""The worker's side of ``headrace.service``: :class:`SplitWorker`, the body of one Ray actor.

A worker holds the pipeline upstream of ``distribute`` (its recipe node, sent once when the actor starts) and
runs one split at a time (``headrace.service._splits``) under its own memory budget: ``next_chunk(split, skip)``
opens the split's pipeline when it is not the one open (skipping the ``skip`` elements the trainer already
has), and returns the next elements in one chunk (up to ``chunk_bytes`` / ``chunk_elements``, or what
``chunk_s`` of work made), so that Ray's per-call cost is paid per chunk, not per element. The trainer keeps one
or two calls outstanding per worker: that bounds what a worker makes ahead (back-pressure). A chunk is a tuple
``(elements, finished, report)``; ``report`` has the worker's RSS (psutil), its peak, its budget and its rate.

Elements travel as Ray serializes them: numpy arrays of a chunk go through the object store out of band and the
trainer reads them without a copy (read-only arrays).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import psutil

from .._dataset import Dataset
from .._engine.recipe import DatasetNode
from .._iterator import Iterator
from .._options import Options
from .._structure import nbytes
from ._splits import InOrderNode, Split, split_node

RSS_SAMPLE_S = 0.005  # the worker's RSS is sampled this often while it makes a chunk (its peak is reported)


def _cpu_s() -> float:
    t = psutil.Process().cpu_times()
    return float(t.user + t.system)


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


class SplitWorker:
    """One worker actor: runs the splits the trainer hands it (see the module docstring).

    Args:
        node: the recipe node upstream of ``distribute``.
        memory_budget: this worker's byte budget (``Options.memory_budget``: an int of bytes or ``"256MiB"``),
            or None for the process budget headrace gives any process.
        chunk_bytes, chunk_elements, chunk_s: what one call returns at most (bytes, elements, seconds of work).
    """

    def __init__(self, node: DatasetNode, memory_budget: int | str | None, chunk_bytes: int,
                 chunk_elements: int, chunk_s: float) -> None:
        self._ds = Dataset(node)
        self._budget = memory_budget
        self._chunk = (int(chunk_bytes), int(chunk_elements), float(chunk_s))
        self._split: list[Any] | None = None  # [split, iteration path] of the one open
        self._done: list[Any] | None = None  # the one finished last (a call still queued for it gets nothing)
        self._error: BaseException | None = None  # raised by the chunk after the elements made before it
        self._it: Any = None
        self._rss0 = _rss()
        self._cpu0 = _cpu_s()
        self._node_id = self.node_id()[0]
        self._peak = self._rss0
        self._made = 0
        self._held_peak = 0  # the most bytes a split's pipeline held (its budget's count)
        self._limit = 0
        self._busy_s = 0.0

    def node_id(self) -> tuple[str, int]:
        """The Ray node this actor runs on (``"local"`` outside Ray) and its process id."""
        ray = sys.modules.get("ray")
        if ray is None or not ray.is_initialized():
            return "local", os.getpid()
        return ray.get_runtime_context().get_node_id(), os.getpid()

    def set_node(self, node: DatasetNode) -> None:
        """Run the splits of ``node`` from now on (a restored state's seeds: ``_splits.with_seeds``); the split
        open is closed."""
        self._close_split()
        self._ds, self._done = Dataset(node), None

    def _open(self, split: list[Any], skip: int, iteration: tuple[int, ...]) -> None:
        self._close_split()
        ds = Dataset(InOrderNode(split_node(self._ds._node, split)))
        if self._budget is not None:
            ds = ds.with_options(Options(memory_budget=self._budget))
        # the trainer's iteration path: a reshuffle_each_iteration shuffle upstream draws each epoch's order
        it = Iterator(ds, iteration=iteration)
        self._it, self._split, self._done = it, [split, list(iteration)], None
        skipped = 0
        while skipped < skip:  # what the trainer has of this split already (a worker lost, a restore)
            try:
                next(it)
            except StopIteration:
                raise
            except Exception:
                continue
            skipped += 1

    def next_chunk(self, split: Split, skip: int, iteration: Sequence[int] = (0,)
                   ) -> tuple[list[Any], bool, dict[str, Any]]:
        """The next elements of ``split`` in the trainer's iteration ``iteration`` (its iteration path: which
        ``iter()`` of the dataset, which ``repeat`` epochs), opened (and ``skip`` elements skipped) unless it is
        the one open; ``finished``: the split has no more elements."""
        start = time.monotonic()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        key = [list(split), [int(i) for i in iteration]]
        if self._done == key:
            return [], True, self.report()
        if self._split != key:
            try:
                self._open(key[0], skip, tuple(key[1]))
            except StopIteration:
                self._close_split()
                self._done = key
                return [], True, self.report()
        max_bytes, max_elements, max_s = self._chunk
        out: list[Any] = []
        size = 0
        sampled = start
        finished = False
        it = self._it
        while len(out) < max_elements and size < max_bytes:
            try:
                x = next(it)
            except StopIteration:
                finished = True
                break
            except Exception as e:
                if not out:
                    raise  # (the trainer re-raises it; the split goes on with the next element)
                self._error = e
                break
            out.append(x)
            size += nbytes(x)
            now = time.monotonic()
            if now - sampled >= RSS_SAMPLE_S:
                self._peak, sampled = max(self._peak, _rss()), now
            if now - start >= max_s:
                break
        self._peak = max(self._peak, _rss())  # (before the split's pipeline lets go of its buffers)
        stats = it.memory_stats()
        self._held_peak = max(self._held_peak, int(stats["peak_bytes"]))
        self._limit = int(stats["limit_bytes"])
        if finished:
            self._close_split()
            self._done = key
        self._made += len(out)
        self._busy_s += time.monotonic() - start
        return out, finished, self.report()

    def report(self) -> dict[str, Any]:
        """``rss_bytes`` now, ``peak_rss_bytes`` (sampled every ``RSS_SAMPLE_S`` while making a chunk),
        ``start_rss_bytes`` (before any pipeline ran), ``memory_budget`` (as given), ``budget_bytes`` (the limit
        its pipelines ran under), ``held_peak_bytes`` (the most their budget counted held), ``elements`` made,
        ``busy_s`` (seconds in calls), ``cpu_s`` (CPU seconds of the process since the actor started), ``pid``
        and the Ray ``node_id``."""
        return {"rss_bytes": _rss(), "peak_rss_bytes": self._peak, "start_rss_bytes": self._rss0,
                "memory_budget": self._budget, "budget_bytes": self._limit, "held_peak_bytes": self._held_peak,
                "elements": self._made, "busy_s": round(self._busy_s, 3), "cpu_s": round(_cpu_s() - self._cpu0, 3),
                "pid": os.getpid(),
                "node_id": self._node_id}

    def _close_split(self) -> None:
        it, self._it, self._split = self._it, None, None
        if it is not None:
            it.close()

    def close(self) -> None:
        """Close the open split's pipeline (its threads and budget) and forget the split finished last and a
        deferred error: the trainer restored a state, every split may come again."""
        self._close_split()
        self._done = self._error = None


__all__ = ["SplitWorker"]
