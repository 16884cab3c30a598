"""Writing one shard: TFRecord (with its record index), Parquet or text lines, under a temporary name, with
its SHA-256.

Shard names are ``<prefix>-<i:05d>-of-<n:05d>.tfrecord`` or ``.txt`` (plus ``.gz`` / ``.zlib`` when
compressed) or ``.parquet``, ``i`` counting from 0: the names depend only on ``prefix`` and ``n``.

- **TFRecord**: each record a serialized ``tf.train.Example`` (TensorFlow's framing,
  :class:`headrace.io.TFRecordWriter`); an uncompressed shard gets ``<shard>.idx`` (the
  :mod:`headrace.io.tfrecord_index` format: ``"<offset> <framed length>"`` per line) for random access.
- **Parquet**: one column per feature: ``int64``, ``float`` (float32) or ``binary`` for one-value
  features (``FixedLenFeature([])``, present in every record), ``list<...>`` of those otherwise (a record
  without the feature has an empty list; no nulls, so :class:`headrace.io.ParquetDataset` reads it).
  Row groups of at most :data:`ROW_GROUP_BYTES` (the footer indexes them: no separate index file).
- **Text**: one line per record, the record's only feature (a string present once in every record), its
  bytes as they are (sources encode ``str`` as UTF-8) and ``\\n`` after each, so
  :class:`headrace.io.TextLineDataset` reads the records back; GZIP / ZLIB as TensorFlow's (one gzip member,
  one zlib stream). A value holding ``\\n`` or ``\\r`` cannot be one line and fails the conversion
  (:func:`text_line`). No index.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._deps import require
from .._errors import ConvertError
from ..io import files
from .schema import FLOAT32, INT64, STRING, Schema, Values, columns, encode_row

ROW_GROUP_BYTES = 64 * 2**20
_HASH_CHUNK = 2**20
_EXT = {"tfrecord": ".tfrecord", "text": ".txt", "parquet": ".parquet"}
_COMPRESSED_EXT = {None: "", "GZIP": ".gz", "ZLIB": ".zlib"}  # Parquet compresses inside the file


def shard_name(prefix: str, i: int, n: int, to: str, compression: str | None = None) -> str:
    """``prefix-00003-of-00016.tfrecord`` (or ``.tfrecord.gz``, ``.txt.zlib``, ``.parquet``)."""
    ext = _EXT[to] + ("" if to == "parquet" else _COMPRESSED_EXT[compression])
    return f"{prefix}-{i:05d}-of-{n:05d}{ext}"


def text_feature(schema: Schema) -> str:
    """The feature a text shard's lines hold: the schema's only feature, a string present once in every record.

    Raises:
        ConvertError: any other schema (naming its features, their spec and the fix).
    """
    spec = schema.spec
    if len(spec) == 1:
        name, s = next(iter(spec.items()))
        if s == {"type": "FixedLenFeature", "dtype": STRING, "shape": []}:
            return name
    found = ", ".join(f"{n} ({s['type']} {s['dtype']}{'' if s.get('shape') is None else ' ' + str(s['shape'])})"
                      for n, s in spec.items())
    raise ConvertError(f"convert: --to text writes one line per record from a single string feature present once in "
                       f"every record, but the records have {len(spec)} feature(s): {found}; convert to tfrecord or "
                       "parquet, or keep one string column in the source")


def text_line(row_id: str, features: dict[str, Values], name: str, shard: str) -> bytes:
    """The line of one record (without its ``\\n``).

    Raises:
        ConvertError: the value holds a line break (names the record, the shard and the value's start).
    """
    value = columns(features, {name: STRING})[name][0]
    if b"\n" in value or b"\r" in value:
        raise ConvertError(f"convert: record {row_id} (shard {shard}): the {name!r} value {value[:60]!r} holds a line "
                           "break (\\n or \\r), so it cannot be one line of a text shard; remove line breaks from the "
                           "source's values, or convert to tfrecord or parquet")
    return value


def row_encoder(to: str, schema: Schema, shard: str) -> Callable[[str, dict[str, Values]], Any]:
    """``encode(row_id, features)`` -> the payload :func:`headrace.convert.output.write_shard` writes for
    ``to``: a serialized ``tf.train.Example``, a Parquet row (``{feature: values}``) or a text line.

    Raises:
        ConvertError: ``to="text"`` with a schema that is not one string feature (:func:`text_feature`).
    """
    if to == "text":
        name = text_feature(schema)
        return lambda row_id, feats: text_line(row_id, feats, name, shard)
    encode = columns if to == "parquet" else encode_row
    return lambda row_id, feats: encode(feats, schema.kinds)


def sha256_file(path: str) -> str:
    """Hex SHA-256 of a file's bytes (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with files.open_file(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def write_tfrecord(path: str, records: Iterable[bytes], compression: str | None) -> dict[str, Any]:
    """Write ``records`` (streamed) to the TFRecord file ``path`` (and ``path + ".idx"`` when uncompressed).

    Returns ``{"records", "bytes", "sha256", "index"}`` (``index``: the index path or ``None``).
    """
    from ..io.tfrecord_index import INDEX_SUFFIX
    from ..io.tfrecord_writer import TFRecordWriter

    index = path + INDEX_SUFFIX if compression is None else None
    n = 0
    with TFRecordWriter(path, compression) as w, \
            (files.open_file(index, "wb") if index else contextlib.nullcontext()) as idx:
        for r in records:
            at = w.write(r)
            n += 1
            if idx is not None:
                idx.write(f"{at} {w.offset - at}\n".encode("ascii"))
    return {"records": n, "bytes": files.file_size(path), "sha256": sha256_file(path), "index": index}


def write_text(path: str, lines: Iterable[bytes], compression: str | None) -> dict[str, Any]:
    """Write ``lines`` (streamed; each without its ``\\n``) to the text file ``path``, ``\\n`` after each, GZIP /
    ZLIB compressed as TensorFlow's writers do (zlib's default level). Returns ``{"records", "bytes",
    "sha256", "index": None}``."""
    from .._files.streams import WBITS

    z = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, WBITS[compression]) if compression else None
    n = 0
    with files.open_file(path, "wb") as f:
        for line in lines:
            f.write(z.compress(line + b"\n") if z is not None else line + b"\n")
            n += 1
        if z is not None:
            f.write(z.flush())
    return {"records": n, "bytes": files.file_size(path), "sha256": sha256_file(path), "index": None}


def arrow_schema(kinds: Mapping[str, str], spec: Mapping[str, Mapping[str, Any]]) -> Any:
    """The Parquet (Arrow) schema of the dataset's features (module docstring)."""
    pa = require("pyarrow", "headrace.convert")

    base = {STRING: pa.binary(), INT64: pa.int64(), FLOAT32: pa.float32()}
    fields = []
    for name, kind in kinds.items():
        scalar = spec[name]["type"] == "FixedLenFeature" and spec[name]["shape"] == []
        fields.append(pa.field(name, base[kind] if scalar else pa.list_(base[kind])))
    return pa.schema(fields)


def _table(rows: list[Mapping[str, list[Any]]], schema: Any) -> Any:
    pa = require("pyarrow", "headrace.convert")

    data = {}
    for fld in schema:
        if pa.types.is_list(fld.type):  # a VarLenFeature: a record without it has zero values, not a null
            data[fld.name] = [r.get(fld.name) or [] for r in rows]
        else:  # a FixedLenFeature([]): every record has it
            data[fld.name] = [r[fld.name][0] for r in rows]
    return pa.Table.from_pydict(data, schema=schema)


def write_parquet(path: str, rows: Iterable[Mapping[str, list[Any]]], schema: Any, compression: str | None,
                  est_row_bytes: float) -> dict[str, Any]:
    """Write ``rows`` (``{feature: converted values}``, see :func:`headrace.convert.schema.columns`;
    streamed, one row group in memory at a time) as one Parquet file.
    Returns ``{"records", "bytes", "sha256", "index": None}``."""
    pq = require("pyarrow.parquet", "headrace.convert")

    group = max(1, int(ROW_GROUP_BYTES // max(1.0, est_row_bytes)))
    codec = "snappy" if compression is None else compression
    n = 0
    with files.open_file(path, "wb") as f, pq.ParquetWriter(f, schema, compression=codec) as w:
        batch: list[Mapping[str, list[Any]]] = []
        for row in itertools.chain(rows, [None]):
            if row is not None:
                batch.append(row)
            if batch and (row is None or len(batch) >= group):
                w.write_table(_table(batch, schema), row_group_size=group)
                n += len(batch)
                batch = []
    return {"records": n, "bytes": files.file_size(path), "sha256": sha256_file(path), "index": None}
