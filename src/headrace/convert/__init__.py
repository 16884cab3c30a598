"""Prepare datasets at scale on Apache Beam: ``headrace convert SRC DST --to tfrecord|parquet``.

One pipeline that runs embedded on a laptop (Beam's DirectRunner, one worker process per core) and
unchanged on a cluster (Flink, Spark, Dataflow runners): it reads an image folder, CSV, JSON Lines,
Parquet or TFRecord files, writes deterministic shards ``prefix-00000-of-000NN.tfrecord`` (or ``.parquet``),
each record a ``tf.train.Example``, an index per shard, and a ``dataset.json`` manifest (feature spec,
per-shard counts, bytes and SHA-256, statistics) written last. Bad source rows go to
``_rejected.jsonl``.

    >>> from headrace import convert
    >>> manifest = convert.convert("photos/", "shards/", num_shards=16)            # doctest: +SKIP
    >>> ds = convert.open_dataset("shards/", verify_checksums=True)                # doctest: +SKIP

Importing this package needs no Beam; the functions that run pipelines import it and raise
:class:`~headrace.MissingDependencyError` (an ``ImportError``) naming ``pip install 'headrace[beam]'`` when
it is missing. Errors: :class:`ConvertError`, :class:`SchemaConflictError`, :class:`ManifestError`, all
``headrace.HeadraceError`` (see :mod:`headrace._errors`). Reading the output
(:func:`load_manifest`, :func:`verify`, :func:`open_dataset`) needs no Beam at all.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "build_pipeline": "pipeline",
    "convert": "pipeline",
    "pipeline_options": "pipeline",
    "ConvertConfig": "config",
    "ConvertError": "_errors",
    "ConvertTransform": "_pipeline",
    "load_manifest": "manifest",
    "verify": "manifest",
    "open_dataset": "manifest",
    "feature_spec": "manifest",
    "shard_paths": "manifest",
    "ManifestError": "_errors",
    "SchemaConflictError": "_errors",
    "open_source": "sources",
}


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'headrace.convert' has no attribute {name!r}")
    if module == "_errors":
        return getattr(importlib.import_module("headrace._errors"), name)
    if module == "_pipeline":
        from ._beam import import_beam

        import_beam()
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = sorted(_NAMES)
