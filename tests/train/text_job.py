"""A tiny text-training job for the DDP tests of the text model (not collected by pytest); run under torchrun.

``python text_job.py OUT_DIR [--steps K] [--resume]``

The text path of ``headrace train --text`` on 120 generated ``<label>\\t<text>`` lines (2 classes, each drawn
from its own word list): a byte-level BPE tokenizer trained on every rank, ``packed_text_dataset`` (rows of 32
tokens, 8 segment slots), a 1-layer :class:`~headrace.train.text.PackedTextClassifier`, ``fit`` with a global
batch of 4 rows in micro-batches of 1 (2 accumulation steps per rank), AdamW, checkpoints every 2 steps in
``OUT_DIR/ckpt``, until step K (default 4).

Writes, per rank R: ``tokenizer-rank<R>.txt`` (the SHA-256 of the tokenizer's JSON), ``steps-rank<R>.txt``
(one line per step: ``<step> <sum of the parameters> <SHA-256 prefix of each packed row trained on>``) and, at
the end, ``params-rank<R>.pt`` (the ``state_dict``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

import numpy as np
import torch

import headrace as hr
from headrace import text
from headrace.distribute import rank
from headrace.train import StepInfo, fit
from headrace.train.text import PackedTextClassifier, segment_cross_entropy
from headrace.train.text_data import packed_text_dataset, texts_of

WORDS = [["alpha", "beta", "gamma", "delta", "epsilon"], ["one", "two", "three", "four", "five"]]


def lines(n: int = 120) -> list[bytes]:
    return [(f"{i % 2}\t" + " ".join(WORDS[i % 2][(i * 7 + j) % 5] for j in range(3 + i % 4))).encode()
            for i in range(n)]


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--resume", action="store_true")
    args = p.parse_args(argv)
    r = rank()
    data = hr.Dataset.from_tensor_slices(np.array(lines(), dtype=object))
    tok = text.train_tokenizer(texts_of(data), vocab_size=300)
    with open(os.path.join(args.out, f"tokenizer-rank{r}.txt"), "w", encoding="utf-8") as f:
        f.write(hashlib.sha256(tok.to_str().encode()).hexdigest())
    encoder = text.Encoder(tok, eos="[EOS]", max_length=32)
    rows = packed_text_dataset(data, encoder, sequence_length=32, max_segments=8, training=True, seed=0)
    torch.manual_seed(0)
    model = PackedTextClassifier(tok.get_vocab_size(), 2, sequence_length=32, max_segments=8, d_model=32,
                                 num_heads=2, num_layers=1)
    log = open(os.path.join(args.out, f"steps-rank{r}.txt"), "a", encoding="utf-8")  # noqa: SIM115

    def record(info: StepInfo) -> None:
        total = sum(float(q.detach().double().sum()) for q in model.parameters())
        batch = info.batch[0].numpy()
        digests = [hashlib.sha256(row.tobytes()).hexdigest()[:16] for row in batch]
        log.write(f"{info.step} {total!r} {' '.join(digests)}\n")
        log.flush()

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    try:
        fit(model, rows, loss_fn=segment_cross_entropy, optimizer=optimizer, global_batch_size=4,
            micro_batch_size=1, steps=args.steps, checkpoint_dir=os.path.join(args.out, "ckpt"),
            checkpoint_every=2, resume=args.resume, callbacks=[record], progress=False, device="cpu")
    finally:
        log.close()
    torch.save(model.state_dict(), os.path.join(args.out, f"params-rank{r}.pt"))


if __name__ == "__main__":
    main(sys.argv[1:])
