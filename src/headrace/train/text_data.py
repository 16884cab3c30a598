"""Labelled text as ``headrace train --text`` and ``headrace demo --text`` read it, packed for
:class:`~headrace.train.text.PackedTextClassifier`.

Record format: ``headrace convert --to text`` output (sharded line files, optionally GZIP / ZLIB; read by
:class:`headrace.io.TextLineDataset`), one labelled sequence per line: ``<label>\\t<text>``, ``label`` a decimal
class id ``0 .. num_classes - 1``, ``text`` UTF-8. The TFRecord output of ``headrace convert --from text``
(``tf.train.Example`` records with one string feature ``text`` holding such a line) is read too:
:func:`labelled_lines` looks at the manifest.

The pipeline (:func:`packed_text_dataset`)::

    TextLineDataset(shards, num_parallel_reads=4) -> [shuffle] -> batch(256)
      -> map(Tokenize: parse label + ids + per-token labels, AUTOTUNE threads) -> unbatch -> pack(sequence_length)
      -> map(segment_examples(max_segments)) -> [shuffle]
      -> elements (rows int32 (3, sequence_length), targets int64 (max_segments,))

(``fit`` batches and prefetches them.)
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._dataset import Dataset
from .._options import AUTOTUNE

TEXT_FEATURE = "text"
PARALLEL_READS = 4
"""Shards read at once, their lines interleaved one by one (a fixed count, not the CPU count: the line order,
and so a run, is the same on every machine)."""


def labelled_lines(directory: str | os.PathLike[str]) -> Dataset:
    """The ``<label>\\t<text>`` lines (``bytes``) of a ``headrace convert`` output directory: the lines of a
    ``--to text`` output (:class:`headrace.io.TextLineDataset`, :data:`PARALLEL_READS` shards at once), or the
    ``text`` feature of a TFRecord output's records (in shard order).

    Raises:
        FileNotFoundError / ManifestError: ``directory`` is not a conversion's output (no ``dataset.json``).
        ValueError: a TFRecord or Parquet output without the string feature ``text`` (names the features).
    """
    from ..convert import load_manifest, open_dataset
    from ..io.example import FixedLenFeature, Spec, parse_example

    m = load_manifest(directory)
    if m["output"]["format"] == "text":
        return open_dataset(directory, num_parallel_reads=PARALLEL_READS)
    if m["output"]["format"] != "tfrecord" or m["features"].get(TEXT_FEATURE, {}).get("dtype") != "string":
        raise ValueError(f"{directory}: a {m['output']['format']} conversion with features {sorted(m['features'])}; "
                         f"labelled text is a --to text conversion (or TFRecord with the string feature "
                         f"{TEXT_FEATURE!r}): run headrace convert SRC DST --from text --to text")
    spec: dict[str, Spec] = {TEXT_FEATURE: FixedLenFeature([], "string")}
    return (open_dataset(directory).batch(256)
            .map(lambda records: parse_example(records, spec)[TEXT_FEATURE], num_parallel_calls=AUTOTUNE)
            .unbatch())


def split_label(line: bytes) -> tuple[int, bytes]:
    """``(label, text)`` of one ``<label>\\t<text>`` line.

    Raises:
        ValueError: no tab, or a label that is not a non-negative integer (the message quotes the line's start).
    """
    head, tab, text = line.partition(b"\t")
    if not tab or not head.isdigit():
        raise ValueError(f"labelled text: the line {line[:60]!r} is not '<label>\\t<text>' with a label >= 0 (e.g. "
                         "b'3\\tsome text'); write each record so")
    return int(head), text


class Tokenize:
    """The batched ``map``: ``<label>\\t<text>`` lines -> ragged ``(token ids int32, labels int32)``, one label
    per token (so ``pack`` keeps it with its tokens); sequences under ``min_tokens`` tokens are left out (so no
    packed row holds more segments than the model has slots)."""

    def __init__(self, encoder: Any, min_tokens: int) -> None:
        self.encoder, self.min_tokens = encoder, min_tokens

    def __call__(self, lines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        labels, texts = zip(*(split_label(line) for line in lines), strict=True)
        ids = self.encoder(np.array(texts, dtype=object))
        keep = [i for i, seq in enumerate(ids) if len(seq) >= self.min_tokens]
        out_ids, out_labels = np.empty(len(keep), object), np.empty(len(keep), object)
        for j, i in enumerate(keep):
            out_ids[j], out_labels[j] = ids[i], np.full(len(ids[i]), labels[i], np.int32)
        return out_ids, out_labels


def packed_text_dataset(lines: Dataset, encoder: Any, *, sequence_length: int, max_segments: int, training: bool,
                        seed: int = 0) -> Dataset:
    """``fit``'s elements from labelled lines (module docstring): ``training`` shuffles the lines (a 2,048-line
    buffer) and the packed rows (256). ``encoder``: a :class:`headrace.text.Encoder`."""
    from .text import segment_examples

    if training:
        lines = lines.shuffle(2048, seed=seed)
    min_tokens = -(-sequence_length // max_segments)
    ds = (lines.batch(256).map(Tokenize(encoder, min_tokens), num_parallel_calls=AUTOTUNE, executor="thread")
          .unbatch().pack(sequence_length).map(segment_examples(max_segments)))
    return ds.shuffle(256, seed=seed) if training else ds


def texts_of(lines: Dataset) -> Dataset:
    """The text part of each labelled line (what a tokenizer trains on)."""
    return lines.map(lambda line: split_label(line)[1])


def count_labels(lines: Dataset) -> np.ndarray:
    """Lines per label (``int64``, index = label)."""
    return np.bincount(np.array([split_label(line)[0] for line in lines], np.int64))


__all__ = ["PARALLEL_READS", "TEXT_FEATURE", "Tokenize", "count_labels", "labelled_lines", "packed_text_dataset",
           "split_label", "texts_of"]
