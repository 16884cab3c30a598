"""The Beam transforms of a conversion (imported only once Apache Beam is known to be installed).

Graph::

    Create(units) -> Reshuffle -> ParDo(ReadAndSpill) --rows--> CombineGlobally(SchemaCombine) = schema
                                        |--runs: (shard, section ref)--> GroupByKey
                                        +--rejected--> ToList
    GroupByKey -> ParDo(WriteShard, schema): merge the shard's sections, encode, write = shard infos
    Create([None]) -> ParDo(Finalize, shard infos, rejected, schema) = the manifest

Rows reach the shard writers through sorted run files in the staging folder (:mod:`headrace.convert.runs`),
so the runner shuffles only small references and no process holds more than a buffer of rows. The schema
combine is lifted into the readers' stage by every runner (only accumulators travel).

A record's shard is ``key % num_shards`` and its place in the shard the order of ``(key, source id)``,
where ``key`` is a seeded 64-bit BLAKE2b hash of its source ID: the output depends only on the source,
the seed and the shard count (fixed when the pipeline is built), never on how the runner split the work.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from ..io.files import join
from .config import ConvertConfig
from .output import finalize, staging_dir, write_shard
from .runs import SPILL_BYTES, merge_sections, write_run
from .schema import SchemaAccumulator, estimate_bytes
from .sinks import row_encoder, shard_name
from .sources import Rejected, Source

REJECTED_TAG = "rejected"
RUNS_TAG = "runs"


def order_key(seed: int, source_id: str) -> int:
    """The seeded 64-bit hash that places a record (module docstring)."""
    return int.from_bytes(hashlib.blake2b(source_id.encode("utf-8"), digest_size=8,
                                          key=seed.to_bytes(8, "little", signed=True)).digest(), "little")


class ReadAndSpill(beam.DoFn):
    """Reads work units. Main output: the rows ``(source id, features)`` (for the schema); ``runs``
    output: ``(shard, section ref)`` of the sorted run files the rows are spilled to (every
    :data:`~headrace.convert.runs.SPILL_BYTES` and at the end of a bundle); ``rejected`` output: the
    rejected rows as JSON dicts."""

    def __init__(self, source: Source, cfg: ConvertConfig) -> None:
        self.source, self.seed, self.shards = source, cfg.seed, cfg.shards
        self.runs_dir = join(staging_dir(cfg), "runs")

    def start_bundle(self) -> None:
        self._buf: defaultdict[int, list[Any]] = defaultdict(list)
        self._bytes = 0

    def _spill(self) -> list[tuple[int, Any]]:
        refs = write_run(self.runs_dir, self._buf) if self._buf else []
        self.start_bundle()
        return [(ref[0], ref) for ref in refs]

    def process(self, unit: Any) -> Iterator[Any]:
        for item in self.source.read(unit):
            if isinstance(item, Rejected):
                yield beam.pvalue.TaggedOutput(REJECTED_TAG, item.to_json())
                continue
            row_id, feats = item
            key = order_key(self.seed, row_id)
            self._buf[key % self.shards].append((key, row_id, feats))
            self._bytes += estimate_bytes(feats)
            yield item
            if self._bytes >= SPILL_BYTES:
                for ref in self._spill():
                    yield beam.pvalue.TaggedOutput(RUNS_TAG, ref)

    def finish_bundle(self) -> Iterator[Any]:
        for ref in self._spill():
            yield beam.pvalue.TaggedOutput(RUNS_TAG, WindowedValue(ref, MIN_TIMESTAMP, [GlobalWindow()]))  # type: ignore[arg-type]


class SchemaCombine(beam.CombineFn):
    """Kinds, shapes and statistics of every feature (:class:`SchemaAccumulator`); the output is the
    finished :class:`~headrace.convert.schema.Schema` (a kind conflict fails the pipeline here)."""

    def __init__(self, label_features: tuple[str, ...]) -> None:
        self.labels = label_features

    def create_accumulator(self) -> SchemaAccumulator:
        return SchemaAccumulator(self.labels)

    def add_input(self, acc: SchemaAccumulator, row: Any) -> SchemaAccumulator:
        return acc.add(row)

    def merge_accumulators(self, accs: Any) -> SchemaAccumulator:
        it = iter(accs)
        first = next(it)
        for a in it:
            first.merge(a)
        return first

    def extract_output(self, acc: SchemaAccumulator) -> Any:
        return acc.schema()


class WriteShard(beam.DoFn):
    """Merges one shard's run sections into ``(key, id)`` order, encodes the rows with the dataset's kinds
    (tf.train.Example, Parquet columns or text lines), writes the shard to the staging folder, yields its info."""

    def __init__(self, cfg: ConvertConfig) -> None:
        self.cfg = cfg

    def process(self, element: tuple[int, Any], schema: Any) -> Iterator[dict[str, Any]]:
        shard, refs = element
        cfg = self.cfg
        encode = row_encoder(cfg.to, schema, shard_name(cfg.prefix, shard, cfg.shards, cfg.to, cfg.compression))
        rows = merge_sections(refs, join(staging_dir(cfg), f"merge-{shard}-{uuid.uuid4().hex[:8]}"))
        payloads = (encode(row_id, feats) for _, row_id, feats in rows)
        yield write_shard(cfg, schema, shard, payloads, uuid.uuid4().hex[:8])


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
        if cfg.num_shards is None:
            cfg = cfg.with_shards(source.estimate_bytes())
        self.cfg, self.source, self.extra = cfg, source, extra or {}

    def expand(self, root: Any) -> Any:
        AsSingleton, AsList = beam.pvalue.AsSingleton, beam.pvalue.AsList
        read = (root | "Units" >> beam.Create(self.source.units())
                | "Spread" >> beam.Reshuffle()
                | "Read" >> beam.ParDo(ReadAndSpill(self.source, self.cfg)).with_outputs(
                    REJECTED_TAG, RUNS_TAG, main="rows"))
        labels = (self.cfg.label,) if self.cfg.label else self.source.label_features
        schema = read.rows | "Schema" >> beam.CombineGlobally(SchemaCombine(labels))
        shards = (read[RUNS_TAG]
                  | "Group" >> beam.GroupByKey()
                  | "Write" >> beam.ParDo(WriteShard(self.cfg), AsSingleton(schema)))
        return (root | "Once" >> beam.Create([None])
                | "Finalize" >> beam.ParDo(Finalize(self.cfg, self.source.describe(), self.extra), AsList(shards),
                                           AsList(read[REJECTED_TAG]), AsSingleton(schema)))
