"""``Dataset.save(path, compression, shard_func)`` / ``Dataset.load(path)``: headrace's saved-dataset format.

Format (version 1), a directory:

- ``dataset.json``: ``{"format": "headrace-saved-dataset", "version": 1, "element_spec": <_spec.to_json>,
  "compression": "" | "GZIP" | "ZLIB", "shards": [{"file": "shard-00000.tfrecord", "elements": n}, ...],
  "cardinality": total}``; written last, so a directory without it is not a saved dataset.
- ``shard-NNNNN.tfrecord``: TFRecord files (length and data CRC32C per record, optionally GZIP / ZLIB), one
  record per element: its components in ``flatten`` order (``None`` components take no space), each as an
  8-byte little-endian length and a payload: numbers and bools in ``.npy`` format (``allow_pickle=False``,
  so loading never runs code); strings as ``.npy`` of their int64 lengths followed by the bytes.
  Ragged and dataset components cannot be saved (``TypeError`` when ``save`` starts).

``save`` streams: each element is written as it is produced (the pipeline runs inside its own memory
budget; nothing is gathered), into ``<path>.tmp-<pid>`` which replaces ``path`` when complete (a crash
leaves no half-written dataset under ``path``). ``shard_func(element)`` (an integer) picks the shard file
(default: all in shard 0); shards are read back in shard order, each in its written order. ``load`` gives a
Dataset with the saved element_spec and cardinality whose state is the shard and the position in it.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from .._args import as_int
from .._ops.base import DatasetIterator, IteratorContext, check_state, note_error
from .._ops.node import DatasetNode, SpecOf
from .._spec import STRING, NoneTensorSpec, TensorSpec, from_json, most_specific_compatible, to_json
from .._structure import flatten, pack_as
from ._framing import DEFAULT_BUFFER_BYTES, RecordReader
from .tfrecord_writer import TFRecordWriter

FORMAT = "headrace-saved-dataset"
VERSION = 1
META = "dataset.json"
_LEN = struct.Struct("<Q")


def _check_spec(spec: Any) -> list[Any]:
    leaves = flatten(spec)
    for s in leaves:
        if not isinstance(s, TensorSpec | NoneTensorSpec):
            raise TypeError(f"save(): a component {s!r} cannot be saved (ragged and dataset components are not "
                            "part of the format); map it to arrays first")
    return leaves


def encode(x: Any, leaves: list[Any]) -> bytes:
    """One element as a record (see the module docstring)."""
    out = bytearray()
    for s, v in zip(leaves, flatten(x)):
        if isinstance(s, NoneTensorSpec):
            continue
        buf = io.BytesIO()
        if s.dtype == STRING:
            arr = np.asarray(v, dtype=object)
            items = [bytes(b) for b in arr.reshape(-1).tolist()]
            lengths = np.array([len(b) for b in items], np.int64).reshape(arr.shape)
            np.lib.format.write_array(buf, lengths, allow_pickle=False)
            buf.write(b"".join(items))
        else:
            np.lib.format.write_array(buf, np.asarray(v), allow_pickle=False)
        payload = buf.getvalue()
        out += _LEN.pack(len(payload)) + payload
    return bytes(out)


def decode(record: bytes, spec: Any, leaves: list[Any]) -> Any:
    """The element of one record (the inverse of :func:`encode`)."""
    view = memoryview(record)
    pos = 0
    values = []
    for s in leaves:
        if isinstance(s, NoneTensorSpec):
            values.append(None)
            continue
        (n,) = _LEN.unpack_from(view, pos)
        pos += _LEN.size
        buf = io.BytesIO(view[pos:pos + n])
        pos += n
        arr = np.lib.format.read_array(buf, allow_pickle=False)
        if s.dtype == STRING:
            data = buf.read()
            flat, start = [], 0
            for length in arr.reshape(-1).tolist():
                flat.append(data[start:start + length])
                start += length
            if arr.ndim == 0:
                values.append(flat[0])
                continue
            out = np.empty(arr.shape, dtype=object)
            out.reshape(-1)[:] = flat
            values.append(out)
        else:
            values.append(arr[()] if arr.ndim == 0 else arr)
    return pack_as(spec, values) if isinstance(spec, dict | tuple | list) else values[0]


def save(dataset: Any, path: str | os.PathLike[str], compression: str | None = None,
         shard_func: Callable[..., Any] | None = None) -> None:
    """See the module docstring. Raises ``TypeError`` for components the format cannot hold and
    ``ValueError`` for a negative shard index; what the pipeline raises stops the save (nothing is
    left under ``path``)."""
    path = os.fspath(path)
    ctype = (compression or "").upper()
    if ctype not in ("", "GZIP", "ZLIB"):
        raise ValueError(f"save(compression={compression!r}): use None, 'GZIP' or 'ZLIB'")
    if shard_func is not None and not callable(shard_func):
        raise TypeError(f"save(shard_func={shard_func!r}): shard_func must be callable element -> shard index")
    spec = dataset.element_spec
    leaves = _check_spec(spec)
    tmp = f"{path.rstrip(os.sep)}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    writers: dict[int, TFRecordWriter] = {}
    try:
        with iter(dataset) as it:
            for i, x in enumerate(it):
                shard = 0
                if shard_func is not None:
                    args = x if isinstance(x, tuple) else (x,)
                    shard = as_int(shard_func(*args), f"save(shard_func) at element {i}", minimum=0)
                w = writers.get(shard)
                if w is None:
                    w = writers[shard] = TFRecordWriter(os.path.join(tmp, f"shard-{shard:05d}.tfrecord"), ctype)
                w.write(encode(x, leaves))
        shards = []
        for shard in sorted(writers):
            writers[shard].close()
            shards.append({"file": f"shard-{shard:05d}.tfrecord", "elements": writers[shard].records})
        meta = {"format": FORMAT, "version": VERSION, "element_spec": to_json(spec), "compression": ctype,
                "shards": shards, "cardinality": sum(s["elements"] for s in shards)}
        with open(os.path.join(tmp, META), "w") as f:
            json.dump(meta, f)
    except BaseException:
        for w in writers.values():
            w.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = f"{path.rstrip(os.sep)}.old-{os.getpid()}"
    if os.path.exists(path):
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


class SavedNode(DatasetNode):
    """The loaded dataset: the shards' records in order, decoded, with the saved spec and cardinality.

    State: the shard being read and the reader's position in it (byte offset of the next record in the
    uncompressed stream, records read): positions only.
    """

    label = "load"

    def __init__(self, paths: list[str], compression: str, spec: Any, cardinality: int) -> None:
        super().__init__()
        self.paths = paths
        self.compression = compression
        self.spec = spec
        self.leaves = _check_spec(spec)
        self.count = cardinality

    def cardinality(self) -> int:
        return self.count

    def compute_spec(self, spec_of: SpecOf) -> Any:
        return self.spec

    def make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return _SavedIterator(ctx, self)


class _SavedIterator(DatasetIterator):
    kind = "load"

    def __init__(self, ctx: IteratorContext, node: SavedNode) -> None:
        super().__init__(ctx)
        self._node = node
        self._shard = 0
        self._reader: RecordReader | None = None
        self._produced = 0

    def _open(self, offset: int = 0, index: int = 0) -> RecordReader:
        self._reader = RecordReader(self._node.paths[self._shard], self._node.compression, DEFAULT_BUFFER_BYTES,
                                    offset, index)
        return self._reader

    def _drop_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __next__(self) -> Any:
        node = self._node
        while self._shard < len(node.paths):
            reader = self._reader or self._open()
            record = reader.next_record()
            if record is None:
                self._drop_reader()
                self._shard += 1
                continue
            i = self._produced
            self._produced = i + 1
            try:
                return decode(record, node.spec, node.leaves)
            except Exception as e:
                note_error(e, "load", i)
                raise
        raise StopIteration

    def get_state(self) -> dict[str, Any]:
        r = self._reader
        return {"kind": self.kind, "shards": len(self._node.paths), "shard": self._shard, "produced": self._produced,
                "offset": 0 if r is None else r.offset, "index": 0 if r is None else r.index}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, shards=len(self._node.paths))
        self._drop_reader()
        self._shard, self._produced = int(state["shard"]), int(state["produced"])
        if self._shard < len(self._node.paths) and int(state["offset"]):
            self._open(int(state["offset"]), int(state["index"]))

    def _close_self(self) -> None:
        self._drop_reader()


def load(path: str | os.PathLike[str], element_spec: Any = None, compression: str | None = None,
         reader_func: Any = None) -> DatasetNode:
    """The node of ``Dataset.load`` (see the module docstring). Raises ``FileNotFoundError`` when ``path``
    holds no saved dataset, ``ValueError`` for another format / version or a given ``element_spec`` or
    ``compression`` that contradicts the saved one, ``TypeError`` for ``reader_func`` (shards are read in
    order; reorder with ``interleave`` / ``shuffle`` after loading)."""
    path = os.fspath(path)
    if reader_func is not None:
        raise TypeError("load(reader_func=...): headrace reads the shards in shard order; reorder after loading "
                        "(shuffle / interleave) instead")
    meta_path = os.path.join(path, META)
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"load({path!r}): no {META} there; it is not a dataset written by Dataset.save "
                                "(or the save did not complete)")
    with open(meta_path) as f:
        meta = json.load(f)
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ValueError(f"load({path!r}): {META} is format {meta.get('format')!r} version {meta.get('version')!r}; "
                         f"this headrace reads {FORMAT!r} version {VERSION}")
    spec = from_json(meta["element_spec"])
    if element_spec is not None and most_specific_compatible(spec, element_spec) is None:
        raise ValueError(f"load({path!r}): element_spec={element_spec!r} does not match the saved {spec!r}")
    if compression is not None and (compression or "").upper() != meta["compression"]:
        raise ValueError(f"load({path!r}, compression={compression!r}): the dataset was saved with "
                         f"compression {meta['compression'] or None!r}")
    names = [os.path.join(path, s["file"]) for s in meta["shards"]]
    return SavedNode(names, meta["compression"], spec, int(meta["cardinality"]))
