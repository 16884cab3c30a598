"""The Beam transforms of a conversion (imported only once Apache Beam is known to be installed).

Graph::

    Create(units) -> Reshuffle -> ParDo(ReadUnit) --rows--> CombineGlobally(SchemaCombine) = schema
                                        |                \\-> ParDo(Encode, schema) -> (shard, (key, id, payload))
                                        |                      -> GroupByKey -> ParDo(WriteShard, schema) = shard infos
                                        \\--rejected--> ToList
    Create([None]) -> ParDo(Finalize, shard infos, rejected, schema) = the manifest

A record's shard is ``key % num_shards`` and its place in the shard the order of ``(key, source id)``,
where ``key`` is a seeded 64-bit BLAKE2b hash of its source ID: the output depends only on the source,
the seed and the shard count, never on how the runner split the work.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from .config import ConvertConfig
from .output import finalize, write_shard
from .schema import Row, SchemaAccumulator, columns, encode_row
from .sources import Rejected, Source

REJECTED_TAG = "rejected"


def order_key(seed: int, source_id: str) -> int:
    """The seeded 64-bit hash that places a record (module docstring)."""
    return int.from_bytes(hashlib.blake2b(source_id.encode("utf-8"), digest_size=8,
                                          key=seed.to_bytes(8, "little", signed=True)).digest(), "little")


class ReadUnit(beam.DoFn):
    """Rows of one work unit; rejected rows go to the ``rejected`` output as JSON dicts."""

    def __init__(self, source: Source) -> None:
        self.source = source

    def process(self, unit: Any) -> Iterator[Any]:
        for item in self.source.read(unit):
            if isinstance(item, Rejected):
                yield beam.pvalue.TaggedOutput(REJECTED_TAG, item.to_json())
            else:
                yield item


class SchemaCombine(beam.CombineFn):
    """Kinds, shapes and statistics of every feature (:class:`SchemaAccumulator`); the output is the
    finished :class:`~headrace.convert.schema.Schema` (a kind conflict fails the pipeline here)."""

    def __init__(self, label_features: tuple[str, ...]) -> None:
        self.labels = label_features

    def create_accumulator(self) -> SchemaAccumulator:
        return SchemaAccumulator(self.labels)

    def add_input(self, acc: SchemaAccumulator, row: Row) -> SchemaAccumulator:
        return acc.add(row)

    def merge_accumulators(self, accs: Any) -> SchemaAccumulator:
        it = iter(accs)
        first = next(it)
        for a in it:
            first.merge(a)
        return first

    def extract_output(self, acc: SchemaAccumulator) -> Any:
        return acc.schema()


class Encode(beam.DoFn):
    """``(shard, (order key, source id, payload))``: the payload is the serialized Example (TFRecord) or
    the converted columns (Parquet)."""

    def __init__(self, cfg: ConvertConfig) -> None:
        self.cfg = cfg

    def process(self, row: Row, schema: Any) -> Iterator[tuple[int, tuple[int, str, Any]]]:
        row_id, feats = row
        payload = columns(feats, schema.kinds) if self.cfg.to == "parquet" else encode_row(feats, schema.kinds)
        key = order_key(self.cfg.seed, row_id)
        yield key % self.cfg.shard_count(schema.est_bytes), (key, row_id, payload)


class WriteShard(beam.DoFn):
    """Writes one shard (its records in ``(key, id)`` order) to the staging folder; yields its info."""

    def __init__(self, cfg: ConvertConfig) -> None:
        self.cfg = cfg

    def process(self, element: tuple[int, Any], schema: Any) -> Iterator[dict[str, Any]]:
        shard, items = element
        ordered = sorted(items, key=lambda t: (t[0], t[1]))
        yield write_shard(self.cfg, schema, shard, [p for _, _, p in ordered], uuid.uuid4().hex[:8])


class Finalize(beam.DoFn):
    """Publishes the dataset once every shard is written (:func:`headrace.convert.output.finalize`)."""

    def __init__(self, cfg: ConvertConfig, source: dict[str, Any], extra: dict[str, Any]) -> None:
        self.cfg, self.source, self.extra = cfg, source, extra

    def process(self, _: Any, shards: list[dict[str, Any]], rejected: list[dict[str, str]],
                schema: Any) -> Iterator[dict[str, Any]]:
        yield finalize(self.cfg, schema, shards, rejected, self.source, self.extra)


class ConvertTransform(beam.PTransform):
    """The whole conversion as one transform applied to a pipeline's root: ``pipeline | ConvertTransform(...)``.

    The result is a one-element ``PCollection`` holding the manifest (a dict), available once the dataset
    is published.
    """

    def __init__(self, cfg: ConvertConfig, source: Source, extra: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.cfg, self.source, self.extra = cfg, source, extra or {}

    def expand(self, root: Any) -> Any:
        AsSingleton, AsList = beam.pvalue.AsSingleton, beam.pvalue.AsList
        read = (root | "Units" >> beam.Create(self.source.units())
                | "Spread" >> beam.Reshuffle()
                | "Read" >> beam.ParDo(ReadUnit(self.source)).with_outputs(REJECTED_TAG, main="rows"))
        labels = (self.cfg.label,) if self.cfg.label else self.source.label_features
        schema = read.rows | "Schema" >> beam.CombineGlobally(SchemaCombine(labels))
        shards = (read.rows
                  | "Encode" >> beam.ParDo(Encode(self.cfg), AsSingleton(schema))
                  | "Group" >> beam.GroupByKey()
                  | "Write" >> beam.ParDo(WriteShard(self.cfg), AsSingleton(schema)))
        return (root | "Once" >> beam.Create([None])
                | "Finalize" >> beam.ParDo(Finalize(self.cfg, self.source.describe(), self.extra), AsList(shards),
                                           AsList(read[REJECTED_TAG]), AsSingleton(schema)))
