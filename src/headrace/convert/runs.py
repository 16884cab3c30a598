"""Sorted runs: how rows travel from the readers to the shard writers through files, not the runner.

A reader buffers the rows it makes (at most :data:`SPILL_BYTES`, estimated) and then writes them to one
*run file* in the staging folder, grouped by shard and sorted by ``(order key, source id)`` inside each
shard's *section*. Only small references ``(shard, path, start, end, rows)`` go through the pipeline's
GroupByKey; the writer of a shard merges its sections (:func:`merge_sections`, a streaming k-way merge)
into the final order. So neither the runner nor any worker ever holds more than a buffer of rows, and a
dataset far larger than memory converts on a laptop's DirectRunner too.

Run file format (private, temporary): a sequence of records, each an 8-byte little-endian length and a
pickled ``(order key, source id, features)`` tuple; a section is a byte range of whole records.
"""

from __future__ import annotations

import heapq
import pickle
import struct
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from ..io import files

SPILL_BYTES = 64 * 2**20
"""Estimated row bytes a reader buffers before writing a run."""

MAX_FAN_IN = 256
"""Run files a shard writer reads at once; more are merged in levels through intermediate runs."""

_LEN = struct.Struct("<Q")
Item = tuple[int, str, Any]  # (order key, source id, features)
Ref = tuple[int, str, int, int, int]  # (shard, path, start, end, rows)


def _write_item(f: Any, item: Item) -> int:
    data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_LEN.pack(len(data)))
    f.write(data)
    return _LEN.size + len(data)


def write_run(directory: str, by_shard: dict[int, list[Item]]) -> list[Ref]:
    """Write the buffered rows as one run file in ``directory``; returns a reference per shard section."""
    files.makedirs(directory)
    path = files.join(directory, f"run-{uuid.uuid4().hex}")
    refs: list[Ref] = []
    at = 0
    with files.open_file(path, "wb") as f:
        for shard in sorted(by_shard):
            items = sorted(by_shard[shard], key=lambda t: (t[0], t[1]))
            start = at
            for item in items:
                at += _write_item(f, item)
            refs.append((shard, path, start, at, len(items)))
    return refs


def read_section(path: str, start: int, end: int) -> Iterator[Item]:
    """The rows of one section, in order. Raises ``OSError`` naming the file if it is cut short."""
    with files.open_file(path, "rb") as f:
        f.seek(start)
        at = start
        while at < end:
            head = f.read(_LEN.size)
            data = f.read(_LEN.unpack(head)[0]) if len(head) == _LEN.size else b""
            if len(head) < _LEN.size or len(data) < _LEN.unpack(head)[0]:
                raise OSError(f"convert: the run file {path} ends before its section's end (byte {end}); the "
                              "staging folder was changed during the run: re-run the conversion")
            yield pickle.loads(data)
            at += _LEN.size + len(data)


def merge_sections(refs: Iterable[Ref], directory: str | None = None, fan_in: int | None = None) -> Iterator[Item]:
    """Every row of the sections, in ``(order key, source id)`` order (each section is sorted).

    At most ``fan_in`` (default :data:`MAX_FAN_IN`) files are open at once: with more sections, groups of
    them are first merged into intermediate runs in ``directory`` (required then), level by level.
    """
    fan_in = fan_in or MAX_FAN_IN
    refs = sorted(refs, key=str)
    while len(refs) > fan_in:
        if directory is None:
            raise ValueError(f"merge_sections: {len(refs)} sections need intermediate runs; pass directory=")
        refs = [_merge_to_run(refs[i:i + fan_in], directory) for i in range(0, len(refs), fan_in)]
    return heapq.merge(*(read_section(path, start, end) for _, path, start, end, _ in refs),
                       key=lambda t: (t[0], t[1]))


def _merge_to_run(refs: list[Ref], directory: str) -> Ref:
    """Merge sections into one new run file (one section); returns its reference."""
    files.makedirs(directory)
    path = files.join(directory, f"merged-{uuid.uuid4().hex}")
    n = at = 0
    with files.open_file(path, "wb") as f:
        for item in merge_sections(refs):
            at += _write_item(f, item)
            n += 1
    return (refs[0][0], path, 0, at, n)
