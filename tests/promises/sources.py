"""Every source of the public API, for the generated cases: written into a case's temporary directory (small
files), optionally damaged at one element, read back as ``{"id": int64, "payload": uint8 (s,)}`` elements.

A source spec is a JSON-friendly dict: ``{"kind": "parquet", "files": 2, "row_group": 16, "shuffle": False,
"corrupt": {"id": 37, "ignore": True}}`` (plus ``n`` and ``sizes``, those of the case). ``build_source``
returns the dataset, the ids in the order the source yields them (``None`` where that order is random) and
the ids a damage destroys (the damaged record, row group or chunk).

Kinds: ``range``, ``tensor_slices`` (of ids, or of the whole ``{"id", "payload"}`` arrays), ``generator``,
``random_access`` (optionally shuffled), ``files`` (an ``interleave`` of ranges, as ``shapes.py``),
``tfrecord`` (1-4 files, ``num_parallel_reads``), ``parquet`` (gzip row groups, optionally shuffled),
``hdf5`` (gzip chunks), ``image_folder`` (PNGs decoded by headrace), ``load`` (a ``Dataset.save``), ``csv``
(``CsvDataset`` of ``id,payload-base64`` records, 1-2 files, uncompressed or GZIP),
``text`` (``TextLineDataset``: a line ``"<id> <payload hex>"``; 1-4 files, uncompressed / GZIP / ZLIB,
``num_parallel_reads``) and ``fixed_length`` (``FixedLengthRecordDataset``: TFRecord's record bytes between a
header and a footer, fixed sizes only; compressed or not).
Damage: TFRecord / saved records get bytes flipped inside one record's data (its CRC fails), a Parquet
row group or an HDF5 chunk gets garbage in the middle of its compressed bytes, an image file is replaced
by garbage, a CSV record gets an id that is not a number.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import numpy as np

import headrace as hr
from tests.promises.ops import make_map, sim_interleave
from tests.promises.shapes import make_element, size_of

FILE_KINDS = ("tfrecord", "parquet", "hdf5", "image_folder", "load", "csv")
TEXT_KINDS = ("text", "fixed_length")  # (never damaged: a text file has no checksum to fail)
KINDS = ("range", "tensor_slices", "generator", "random_access", "files", *FILE_KINDS, *TEXT_KINDS)


# ---- picklable readers --------------------------------------------------------------------------------
class DecodeRecord:
    """A TFRecord record: the id as 8 little-endian bytes, then the payload."""

    def __call__(self, x: Any) -> dict[str, Any]:
        b = bytes(x)
        return {"id": np.int64(int.from_bytes(b[:8], "little")), "payload": np.frombuffer(b[8:], np.uint8).copy()}


class DecodeCsv:
    """A CSV record ``(id, payload in base64)``."""

    def __call__(self, i: Any, payload: Any) -> dict[str, Any]:
        return {"id": np.int64(i), "payload": np.frombuffer(base64.b64decode(payload), np.uint8).copy()}


class DecodeRow:
    def __call__(self, r: Any) -> dict[str, Any]:
        return {"id": np.int64(r["id"]), "payload": np.frombuffer(bytes(r["payload"]), np.uint8).copy()}


class DecodeLine:
    """A text line: the id in decimal, a space, the payload in hex."""

    def __call__(self, x: Any) -> dict[str, Any]:
        i, _, p = bytes(x).partition(b" ")
        return {"id": np.int64(int(i)), "payload": np.frombuffer(bytes.fromhex(p.decode()), np.uint8).copy()}


class FromImage:
    def __call__(self, image: Any, label: Any) -> dict[str, Any]:
        return {"id": np.int64(label), "payload": np.ascontiguousarray(image).reshape(-1)}


class Generate:
    def __init__(self, n: int, sizes: dict[str, Any]) -> None:
        self.n, self.sizes = n, sizes

    def __call__(self) -> Any:
        return (make_element(i, self.sizes) for i in range(self.n))


class RandomAccess:
    def __init__(self, n: int, sizes: dict[str, Any]) -> None:
        self.n, self.sizes = n, sizes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not 0 <= i < self.n:
            raise IndexError(i)
        return make_element(i, self.sizes)


class OpenRange:
    def __init__(self, per: int, n: int, sizes: dict[str, Any]) -> None:
        self.per, self.n, self.sizes = per, n, sizes

    def __call__(self, f: Any) -> hr.Dataset:
        start = int(f) * self.per
        return make_map(hr.Dataset.range(start, min(start + self.per, self.n)), self.sizes)


# ---- damage ------------------------------------------------------------------------------------------
def _garble(path: str, offset: int, length: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(length)
        f.seek(offset)
        f.write(bytes(b ^ 0xA5 for b in old))


def _record_offsets(path: str) -> list[tuple[int, int]]:
    """(data offset, data length) of every record of an uncompressed TFRecord file."""
    out, pos = [], 0
    with open(path, "rb") as f:
        data = f.read()
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos:pos + 8], "little")
        out.append((pos + 12, length))
        pos += 16 + length
    return out


def _damage_record(path: str, k: int) -> None:
    off, length = _record_offsets(path)[k]
    _garble(path, off + length // 2, max(1, min(8, length // 2)))


# ---- writers -----------------------------------------------------------------------------------------
def _split(n: int, files: int) -> list[range]:
    per = -(-n // files)
    return [range(s, min(s + per, n)) for s in range(0, n, per)]


def _tfrecord(src: dict[str, Any], n: int, sizes: dict[str, Any], d: str, write: bool
              ) -> tuple[hr.Dataset, list | None, set]:
    from headrace.io import TFRecordDataset, TFRecordWriter

    parts = _split(n, src["files"])
    paths = [os.path.join(d, f"part-{k}.tfrecord") for k in range(len(parts))]
    for path, part in zip(paths, parts) if write else ():
        with TFRecordWriter(path) as w:
            for i in part:
                w.write(np.int64(i).tobytes() + make_element(i, sizes)["payload"].tobytes())
    damaged: set[int] = set()
    if src.get("corrupt"):
        j = src["corrupt"]["id"]
        k = next(k for k, part in enumerate(parts) if j in part)
        if write:
            _damage_record(paths[k], j - parts[k].start)
        damaged = {j}
    reads = src["reads"]
    ds = TFRecordDataset(paths, num_parallel_reads=reads).map(DecodeRecord())
    order = [list(p) for p in parts]
    return ds, (sim_interleave(order, reads, 1) if reads > 1 else [i for p in order for i in p]), damaged


def _text(src: dict[str, Any], n: int, sizes: dict[str, Any], d: str, write: bool
          ) -> tuple[hr.Dataset, list | None, set]:
    import gzip
    import zlib

    from headrace.io import FixedLengthRecordDataset, TextLineDataset

    lines, kind = src["kind"] == "text", src["compression"]
    compress = {"": bytes, "GZIP": gzip.compress, "ZLIB": zlib.compress}[kind]
    parts = _split(n, src["files"])
    paths = [os.path.join(d, f"part-{k}.{'txt' if lines else 'bin'}") for k in range(len(parts))]
    head, foot = src.get("header", 0), src.get("footer", 0)
    for path, part in zip(paths, parts) if write else ():
        if lines:
            body = b"".join(b"%d %s\n" % (i, make_element(i, sizes)["payload"].tobytes().hex().encode())
                            for i in part)
        else:
            body = b"H" * head + b"".join(np.int64(i).tobytes() + make_element(i, sizes)["payload"].tobytes()
                                          for i in part) + b"F" * foot
        with open(path, "wb") as f:
            f.write(compress(body))
    reads = src["reads"]
    if lines:
        ds = TextLineDataset(paths, compression_type=kind, num_parallel_reads=reads).map(DecodeLine())
    else:
        ds = FixedLengthRecordDataset(paths, 8 + size_of(sizes, 0), head, foot, compression_type=kind,
                                      num_parallel_reads=reads).map(DecodeRecord())
    order = [list(p) for p in parts]
    return ds, (sim_interleave(order, reads, 1) if reads > 1 else [i for p in order for i in p]), set()


def _parquet(src: dict[str, Any], n: int, sizes: dict[str, Any], d: str, write: bool
             ) -> tuple[hr.Dataset, list | None, set]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from headrace.io import ParquetDataset

    parts, rg = _split(n, src["files"]), src["row_group"]
    paths = [os.path.join(d, f"part-{k}.parquet") for k in range(len(parts))]
    for path, part in zip(paths, parts) if write else ():
        table = pa.table({"id": np.asarray(part, np.int64),
                          "payload": pa.array([make_element(i, sizes)["payload"].tobytes() for i in part],
                                              pa.binary())})
        pq.write_table(table, path, row_group_size=rg, compression="gzip", use_dictionary=False,
                       write_statistics=False)  # (the middle of a chunk is then compressed data)
    damaged: set[int] = set()
    if src.get("corrupt"):
        j = src["corrupt"]["id"]
        k = next(k for k, part in enumerate(parts) if j in part)
        g = (j - parts[k].start) // rg
        if write:
            col = pq.ParquetFile(paths[k]).metadata.row_group(g).column(1)
            start = col.dictionary_page_offset or col.data_page_offset
            _garble(paths[k], start + col.total_compressed_size // 2, 16)
        damaged = set(parts[k][g * rg:(g + 1) * rg])
    ds = ParquetDataset(paths, shuffle_row_groups=src["shuffle"], seed=3).map(DecodeRow())
    return ds, None if src["shuffle"] else list(range(n)), damaged


def _csv(src: dict[str, Any], n: int, sizes: dict[str, Any], d: str, write: bool
         ) -> tuple[hr.Dataset, list | None, set]:
    """CSV files of ``id,payload-in-base64`` records, uncompressed or GZIP; a damaged record has an id that is not a
    number (its row fails to parse)."""
    import gzip

    from headrace.io import CsvDataset

    parts, comp = _split(n, src["files"]), src["compression"]
    paths = [os.path.join(d, f"part-{k}.csv{'.gz' if comp else ''}") for k in range(len(parts))]
    bad = src["corrupt"]["id"] if src.get("corrupt") else -1
    for path, part in zip(paths, parts) if write else ():
        with (gzip.open(path, "wb", compresslevel=1) if comp else open(path, "wb")) as f:
            for i in part:
                f.write(b"%s,%s\n" % (b"x%d" % i if i == bad else b"%d" % i,
                                          base64.b64encode(make_element(i, sizes)["payload"].tobytes())))
    ds = CsvDataset(paths, [np.int64, bytes], compression_type=comp or None).map(DecodeCsv())
    return ds, list(range(n)), {bad} if bad >= 0 else set()


def _hdf5(src: dict[str, Any], n: int, sizes: dict[str, Any], d: str, write: bool
          ) -> tuple[hr.Dataset, list | None, set]:
    import h5py

    from headrace.io import HDF5Dataset

    s, chunk, path = size_of(sizes, 0), min(src["chunk"], n), os.path.join(d, "data.h5")
    if write:
        with h5py.File(path, "w") as f:
            f.create_dataset("id", data=np.arange(n, dtype=np.int64))
            p = f.create_dataset("payload", (n, s), np.uint8, chunks=(chunk, s), compression="gzip")
            step = max(chunk, (8 << 20) // s // chunk * chunk)
            for a in range(0, n, step):
                rows = (np.arange(a, min(a + step, n)) % 251).astype(np.uint8)
                p[a:a + len(rows)] = np.repeat(rows[:, None], s, axis=1)
    damaged: set[int] = set()
    if src.get("corrupt"):
        row0 = src["corrupt"]["id"] // chunk * chunk
        if write:
            with h5py.File(path, "r") as f:
                info = f["payload"].id.get_chunk_info_by_coord((row0, 0))
            # (within the chunk: a gzip chunk of 4 short rows is ~21 bytes, and 16 bytes from its middle also
            # damaged the next chunk, which the reader then rightly lost too: sweep seed 934)
            _garble(path, info.byte_offset + info.size // 2, min(16, info.size - info.size // 2))
        damaged = set(range(row0, min(row0 + chunk, n)))
    return HDF5Dataset(path, ["id", "payload"]), list(range(n)), damaged


def _image_folder(src: dict[str, Any], n: int, sizes: dict[str, Any], d: str, write: bool
                  ) -> tuple[hr.Dataset, list | None, set]:
    import cv2

    from headrace.io import image_folder

    side = src["side"]
    root = os.path.join(d, "images")
    for i in range(n) if write else ():
        os.makedirs(root, exist_ok=True)
        cv2.imwrite(os.path.join(root, f"{i:06d}.png"), np.full((side, side, 3), i % 251, np.uint8))
    damaged: set[int] = set()
    if src.get("corrupt"):
        j = src["corrupt"]["id"]
        if write:
            with open(os.path.join(root, f"{j:06d}.png"), "wb") as f:
                f.write(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
        damaged = {j}
    ds = image_folder(root, labels=list(range(n)), shuffle=False, image_size=(side, side),
                      num_parallel_calls=src["parallel"]).map(FromImage())
    return ds, list(range(n)), damaged


def _load(src: dict[str, Any], n: int, sizes: dict[str, Any], d: str, write: bool
          ) -> tuple[hr.Dataset, list | None, set]:
    path = os.path.join(d, "saved")
    if write:
        make_map(hr.Dataset.range(n), sizes).save(path)
    damaged: set[int] = set()
    if src.get("corrupt") and not write:
        damaged = {src["corrupt"]["id"]}
    elif src.get("corrupt"):
        with open(os.path.join(path, "dataset.json")) as f:
            shard = json.load(f)["shards"][0]["file"]
        _damage_record(os.path.join(path, shard), src["corrupt"]["id"])
        damaged = {src["corrupt"]["id"]}
    return hr.Dataset.load(path), list(range(n)), damaged


def build_source(src: dict[str, Any], n: int, sizes: dict[str, Any], d: str, write: bool = True
                 ) -> tuple[hr.Dataset, list | None, set]:
    """``(dataset, ids in source order or None, damaged ids)``; files are written (and damaged) under ``d``
    when ``write`` (once per case: later builds read them)."""
    kind = src["kind"]
    writers = {"tfrecord": _tfrecord, "parquet": _parquet, "hdf5": _hdf5, "image_folder": _image_folder,
               "load": _load, "csv": _csv, "text": _text, "fixed_length": _text}
    if kind in writers:
        return writers[kind](src, n, sizes, d, write)
    order: list[int] | None = list(range(n))
    if kind == "range":
        ds = make_map(hr.Dataset.range(n), sizes)
    elif kind == "tensor_slices":
        if src["whole"] and sizes["kind"] == "fixed":  # (one array: rows of one length)
            ds = hr.Dataset.from_tensor_slices({"id": np.arange(n, dtype=np.int64), "payload": np.stack(
                [make_element(i, sizes)["payload"] for i in range(n)])})
        else:
            ds = make_map(hr.Dataset.from_tensor_slices(np.arange(n, dtype=np.int64)), sizes)
    elif kind == "generator":
        ds = hr.Dataset.from_generator(Generate(n, sizes))
    elif kind == "random_access":
        ds = hr.Dataset.from_random_access(RandomAccess(n, sizes), shuffle=src["shuffle"], seed=5)
        order = None if src["shuffle"] else order
    elif kind == "files":
        parts = _split(n, src["files"])
        ds = hr.Dataset.range(len(parts)).interleave(
            OpenRange(len(parts[0]), n, sizes), cycle_length=src["cycle"], block_length=src["block"],
            num_parallel_calls=hr.AUTOTUNE if src["parallel"] else None, deterministic=src["deterministic"])
        nondet = src["parallel"] and not src["deterministic"]
        order = None if nondet else sim_interleave([list(p) for p in parts], src["cycle"], src["block"])
    else:
        raise ValueError(f"unknown source kind {kind!r}")
    return ds, order, set()


def nondeterministic(src: dict[str, Any]) -> bool:
    return src["kind"] == "files" and src["parallel"] and not src["deterministic"]
