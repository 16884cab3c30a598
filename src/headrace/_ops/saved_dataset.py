"""``Dataset.save(path, compression, shard_func)`` / ``Dataset.load(path)``: headrace's saved-dataset format.

Format (version 1), a directory:

- ``dataset.json``: ``{"format": "headrace-saved-dataset", "version": 1, "element_spec": <_spec.to_json>,
  "compression": "" | "GZIP" | "ZLIB", "shards": [{"file": "v-<pid>-<hex>/shard-00000.tfrecord", "elements": n},
  ...], "cardinality": total}``: the one pointer to the current version; ``file`` is relative to the directory
  (saves by headrace before 0.1 put the shards beside ``dataset.json``: ``"file": "shard-00000.tfrecord"``;
  they load unchanged, and the next save over them replaces them).
- ``v-<pid>-<hex>/shard-NNNNN.tfrecord``: one version's TFRecord files (length and data CRC32C per record,
  optionally GZIP / ZLIB), one record per element: its components in ``flatten`` order (``None`` components
  take no space), each as an 8-byte little-endian length and a payload: numbers and bools in ``.npy`` format
  (``allow_pickle=False``, so loading never runs code); strings as ``.npy`` of their int64 lengths followed by
  the bytes. Ragged and dataset components cannot be saved (``TypeError`` when ``save`` starts). Beside
  them an empty ``.lock``, ``flock``-ed by the save while it writes the version.

``save`` streams: each element is written as it is produced (the pipeline runs inside its own memory
budget; nothing is gathered) into a fresh version directory ``v-<pid>-<hex>``; when every shard is closed and
fsynced, the new ``dataset.json`` is written to ``dataset.json.tmp-v-<pid>-<hex>``, fsynced, and
``os.replace``-d over the old one: the one atomic step. A ``load`` (or a kill of the writer) at any moment
sees the old dataset or the new one, complete, never nothing and never a mix. Then the superseded version is
deleted, and so are the leftovers of killed saves: version directories no manifest names whose lock is
free, manifest temporaries and ``.new-v-...`` directories (a version before it is locked) whose writer's
process is dead, shard files no manifest names, and the ``<path>.tmp-<pid>`` / ``<path>.old-<pid>``
siblings of dead processes that saves before this layout left.
``load`` ignores them; other files in ``path`` are left alone. A pipeline that raises stops the save and
leaves ``path`` as it was. Local paths only (the atomic step is POSIX ``rename``); a Dataset loaded before
a later save replaced ``path`` reads files that save deleted (``FileNotFoundError``): load again after a
save. ``shard_func(element)`` (an integer) picks the shard file (default: all in shard 0); shards are read
back in shard order, each in its written order. ``load`` gives a Dataset with the saved element_spec and
cardinality whose state is the shard and the position in it.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import secrets
import shutil
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from .._args import as_int
from .._engine.calls import guarded_call
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, SpecOf
from .._engine.stage import Stage
from .._engine.stage_support import check_state, note_error
from .._files.framing import DEFAULT_BUFFER_BYTES, RecordReader
from .._files.tfrecord_writer import TFRecordWriter
from .._spec import STRING, NoneTensorSpec, TensorSpec, from_json, most_specific_compatible, to_json
from .._structure import flatten, pack_as
from .cache import pid_alive

FORMAT = "headrace-saved-dataset"
VERSION = 1
META = "dataset.json"
LOCK = ".lock"
_LEN = struct.Struct("<Q")
_VERSION_DIR = re.compile(r"v-(\d+)-[0-9a-f]+")
_TEMP = re.compile(re.escape(META) + r"\.tmp-v-(\d+)-[0-9a-f]+|\.new-v-(\d+)-[0-9a-f]+")
_LEGACY_SHARD = re.compile(r"shard-\d{5}\.tfrecord")
_step: Callable[[str], None] | None = None  # tests: called with the name of each step of save (kill points)


def _at(step: str) -> None:
    if _step is not None:
        _step(step)


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
    values: list[Any] = []  # (None, bytes, numpy scalars and arrays)
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
            flat: list[bytes] = []
            start = 0
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
         shard_func: Callable[..., Any] | None = None, stage: str = "save") -> None:
    """See the module docstring: replaces the save at ``path`` (a local directory, created if missing)
    atomically (``stage``: its name in errors, ``save(<name=>)``).
    Raises ``TypeError`` for components the format cannot hold and ``ValueError`` for a negative
    shard index; what the pipeline raises stops the save (``path`` is left as it was)."""
    path = os.fspath(path).rstrip(os.sep) or os.sep
    ctype = (compression or "").upper()
    if ctype not in ("", "GZIP", "ZLIB"):
        raise ValueError(f"save(compression={compression!r}): use None, 'GZIP' or 'ZLIB'")
    if shard_func is not None and not callable(shard_func):
        raise TypeError(f"save(shard_func={shard_func!r}): shard_func must be callable element -> shard index")
    spec = dataset.element_spec
    leaves = _check_spec(spec)
    created = not os.path.isdir(path)
    version = f"v-{os.getpid()}-{secrets.token_hex(4)}"
    vdir = os.path.join(path, version)
    lock = _new_version(path, version)
    tmp = os.path.join(path, f"{META}.tmp-{version}")
    writers: dict[int, TFRecordWriter] = {}
    try:
        _at("start")
        with iter(dataset) as it:
            for i, x in enumerate(it):
                shard = 0
                if shard_func is not None:
                    try:
                        shard = as_int(guarded_call(shard_func, x, stage), f"{stage}: shard_func result", minimum=0)
                    except Exception as e:
                        note_error(e, stage, i)
                        raise
                w = writers.get(shard)
                if w is None:
                    w = writers[shard] = TFRecordWriter(os.path.join(vdir, f"shard-{shard:05d}.tfrecord"), ctype)
                w.write(encode(x, leaves))
                _at(f"element-{i}")
        shards: list[dict[str, Any]] = []
        for shard in sorted(writers):
            name = f"shard-{shard:05d}.tfrecord"
            writers[shard].close()
            _fsync(os.path.join(vdir, name))
            shards.append({"file": f"{version}/{name}", "elements": writers[shard].records})
        meta = {"format": FORMAT, "version": VERSION, "element_spec": to_json(spec), "compression": ctype,
                "shards": shards, "cardinality": sum(s["elements"] for s in shards)}
        with open(tmp, "w") as f:
            json.dump(meta, f)
            f.flush()
            os.fsync(f.fileno())
        _at("manifest-written")
        os.replace(tmp, os.path.join(path, META))
    except BaseException:
        for w in writers.values():
            w.close()
        shutil.rmtree(vdir, ignore_errors=True)
        _remove(tmp)
        if created:
            _rmdir_if_empty(path)
        raise
    finally:
        os.close(lock)
    _fsync(path)
    _at("switched")
    _clean(path)
    _at("cleaned")


def _new_version(path: str, version: str) -> int:
    """Make the version directory ``path/version`` holding its ``.lock`` locked (the lock's descriptor):
    made as ``.new-<version>`` and renamed once locked, so other saves never see it unlocked."""
    staging = os.path.join(path, f".new-{version}")
    os.makedirs(staging)
    lock = os.open(os.path.join(staging, LOCK), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # "writing", for other saves; dropped on a kill
        os.rename(staging, os.path.join(path, version))
    except BaseException:
        os.close(lock)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return lock


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_meta(path: str) -> dict[str, Any] | None:
    """The manifest at ``path``, or None where there is none (or it cannot be read)."""
    try:
        with open(os.path.join(path, META)) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _top_names(meta: dict[str, Any] | None) -> set[str]:
    """The entries of the save directory a manifest uses: its version directory (or legacy shard files)."""
    if meta is None:
        return set()
    return {str(s.get("file", "")).split("/")[0] for s in meta.get("shards", []) if isinstance(s, dict)}


def _remove(p: str) -> None:
    if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p, ignore_errors=True)
        return
    try:
        os.remove(p)
    except OSError:
        pass


def _rmdir_if_empty(p: str) -> None:
    try:
        os.rmdir(p)
    except OSError:
        pass


def _writing(vdir: str, pid: int) -> bool:
    """Whether a save is still writing the version directory ``vdir``: its lock is held (the directory gets
    its name only once locked; without a lock file it is judged by whether its writer ``pid`` is alive)."""
    try:
        fd = os.open(os.path.join(vdir, LOCK), os.O_RDWR)
    except FileNotFoundError:
        return pid_alive(pid)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _leftover(p: str, name: str) -> bool:
    """Whether the entry ``name`` (at ``p``) of a save directory, named by no manifest, is a leftover."""
    if m := _VERSION_DIR.fullmatch(name):
        return not _writing(p, int(m[1]))
    if m := _TEMP.fullmatch(name):
        return not pid_alive(int(m[1] or m[2]))
    return _LEGACY_SHARD.fullmatch(name) is not None


def _clean(path: str) -> None:
    """After a switch: delete what no manifest names and no save is writing: the version the switch
    superseded, versions and manifest temporaries of killed saves, legacy shards and siblings (module docstring).
    """
    used = _top_names(_read_meta(path))
    for name in os.listdir(path):
        if name not in used and _leftover(os.path.join(path, name), name):
            _remove(os.path.join(path, name))
    parent, base = os.path.split(path)
    sibling = re.compile(re.escape(base) + r"\.(?:tmp|old)-(\d+)")
    for name in os.listdir(parent or "."):
        m = sibling.fullmatch(name)
        if m and not pid_alive(int(m[1])):
            _remove(os.path.join(parent, name))


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

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _SavedIterator(ctx, self)


class _SavedIterator(Stage):
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
    names = []
    for s in meta["shards"]:
        rel = str(s["file"])
        if os.path.isabs(rel) or ".." in rel.split("/"):
            raise ValueError(f"load({path!r}): {META} names the shard {rel!r} outside the save directory; it is "
                             "not a manifest written by Dataset.save (save the dataset again)")
        names.append(os.path.join(path, rel))
    return SavedNode(names, meta["compression"], spec, int(meta["cardinality"]))
