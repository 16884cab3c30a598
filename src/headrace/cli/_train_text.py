"""``headrace train PATH --text``: train :class:`~headrace.train.text.PackedTextClassifier` on labelled text.

PATH (and ``--eval``) is ``headrace convert --from text --to text`` output (read by
:class:`headrace.io.TextLineDataset`; ``--to tfrecord`` output works too) whose lines are ``<label>\\t<text>``
(:mod:`headrace.train.text_data`). A byte-level BPE tokenizer (``--vocab-size``) is trained on PATH's text and
saved as ``tokenizer.json`` in ``--checkpoint-dir`` (under torchrun every rank trains the same one and rank 0
writes it); ``--resume`` reads it back from there, so a resumed run
encodes exactly as the first did. Rows of ``--sequence-length`` tokens hold at most ``sequence_length // 4``
sequences (shorter than 4 tokens are left out). AdamW (weight decay 0.01) with a cosine schedule (10% warm-up)
over the epochs' steps, counted by one pass over the packed rows first.
"""

from __future__ import annotations

import os
from typing import Any

MIN_TOKENS = 4
TOKENIZER_FILE = "tokenizer.json"


def run_train_text(path: str, *, eval_path: str | None, global_batch_size: int, epochs: int, precision: str,
                   memory_budget: int | str | None, checkpoint_dir: str | None, resume: bool,
                   micro_batch_size: int | str, learning_rate: float, num_classes: int | None, seed: int,
                   checkpoint_every: int, sequence_length: int, vocab_size: int, d_model: int = 128,
                   num_layers: int = 2, progress: bool | None = None) -> dict[str, Any]:
    """Train and return a summary (``steps``, ``history``, ``samples_per_s``, memory figures, ``num_classes``,
    ``records``, ``rows_per_epoch``, ``tokenizer``).

    Raises:
        FileNotFoundError / ManifestError: PATH is not a conversion's output.
        ValueError: a line that is not ``<label>\\t<text>`` (quoted), ``num_classes`` below the labels, fewer
            rows than one global batch.
    """
    from .._deps import require

    torch = require("torch", "headrace train --text")
    from .. import text
    from ..distribute import process_info
    from ..train import fit
    from ..train.schedule import cosine_schedule
    from ..train.text import PackedTextClassifier, segment_cross_entropy
    from ..train.text_data import count_labels, labelled_lines, packed_text_dataset, texts_of

    lines = labelled_lines(path)
    counts = count_labels(lines)
    if num_classes is not None and num_classes < len(counts):
        raise ValueError(f"--num-classes {num_classes} is too few: the labels in {path} go up to {len(counts) - 1}; "
                         f"use --num-classes {len(counts)} or more, or leave it out")
    classes = num_classes or len(counts)
    saved = os.path.join(checkpoint_dir, TOKENIZER_FILE) if checkpoint_dir else None
    if resume and saved and os.path.exists(saved):
        tok = require("tokenizers", "headrace train --text").Tokenizer.from_file(saved)
    else:  # every rank trains the same tokenizer on the same lines; one writes it
        tok = text.train_tokenizer(texts_of(lines), vocab_size=vocab_size)
        if saved and process_info().is_main:
            os.makedirs(checkpoint_dir, exist_ok=True)  # type: ignore[arg-type]
            tmp = f"{saved}.tmp-{os.getpid()}"
            tok.save(tmp)
            os.replace(tmp, saved)  # never a half-written tokenizer for --resume to read
    encoder = text.Encoder(tok, eos="[EOS]", max_length=sequence_length)
    shape = {"sequence_length": sequence_length, "max_segments": max(1, sequence_length // MIN_TOKENS), "seed": seed}
    train_ds = packed_text_dataset(lines, encoder, training=True, **shape)
    rows = sum(len(targets) for _, targets in train_ds.batch(256))
    if rows < global_batch_size:
        raise ValueError(f"{path}: {int(counts.sum())} lines pack into {rows} rows of {sequence_length} tokens, "
                         f"fewer than one global batch ({global_batch_size}); use a smaller --global-batch-size")
    eval_ds = packed_text_dataset(labelled_lines(eval_path), encoder, training=False, **shape) if eval_path else None
    torch.manual_seed(seed)
    net = PackedTextClassifier(tok.get_vocab_size(), classes, sequence_length=sequence_length,
                               max_segments=shape["max_segments"], d_model=d_model, num_layers=num_layers, dropout=0.1)
    optimizer = torch.optim.AdamW(net.parameters(), lr=learning_rate, weight_decay=0.01)
    total = rows // global_batch_size * epochs
    result = fit(net, train_ds, loss_fn=segment_cross_entropy, optimizer=optimizer,
                 global_batch_size=global_batch_size, micro_batch_size=micro_batch_size, epochs=epochs,
                 precision=precision, memory_budget=memory_budget, checkpoint_dir=checkpoint_dir,
                 checkpoint_every=checkpoint_every, resume=resume, eval_dataset=eval_ds,
                 lr_scheduler=cosine_schedule(optimizer, total, warmup_steps=total // 10), progress=progress,
                 dataset_size=rows)
    return {"steps": result.steps, "epochs": result.epochs, "num_classes": classes, "records": int(counts.sum()),
            "rows_per_epoch": rows, "micro_batch_size": result.micro_batch_size,
            "accumulation_steps": result.accumulation_steps, "samples_per_s": round(result.samples_per_s, 2),
            "peak_rss_bytes": result.peak_rss_bytes, "base_rss_bytes": result.base_rss_bytes,
            "memory_budget_bytes": result.memory_budget_bytes, "history": result.history,
            "resumed_from": result.resumed_from, "tokenizer": saved}


__all__ = ["run_train_text"]
