"""Text classification on packed rows: the model :func:`~headrace.train.fit` trains on ``Dataset.pack``'s output.

A packed row holds several sequences (segments) side by side (``Dataset.pack``: ``segment_ids`` number them
from 1, 0 on padding; ``positions`` count from 0 in each). :class:`PackedTextClassifier` is a pre-norm
Transformer encoder whose attention is block-diagonal per segment (a token attends only to the tokens of its
own segment; padding only to padding), with learned position embeddings indexed by ``positions``, so a
segment's output is the same as if it were alone in its row. Each segment's tokens are mean-pooled and
classified: one row gives ``max_segments`` predictions, one per segment slot.

Elements ``fit`` trains on (:func:`segment_examples` builds them from ``pack``'s output):

- inputs: ``rows`` int32 ``(3, sequence_length)``: token ids, segment ids, positions (one array, so the
  model has one input and exports to ONNX / quantizes like the image models);
- targets: int64 ``(max_segments,)``: the label of segment ``s`` at index ``s - 1``, ``IGNORE`` (-1) where
  the row has no such segment.

:func:`segment_cross_entropy` is the loss (mean over the labelled segments); ``fit``'s evaluation counts
accuracy over labelled segments only (targets < 0 are ignored).

Memory: activations grow with ``micro-batch x sequence_length`` (and the attention scores with
``micro-batch x heads x sequence_length**2``): ``sequence_length`` and the micro-batch are the two knobs,
``fit(micro_batch_size="auto")`` chooses the second for the first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._deps import import_torch

if TYPE_CHECKING:  # (the real module, for its types; at run time it comes through import_torch)
    import torch
    from torch import nn
else:
    torch = import_torch()
    nn = torch.nn
F = torch.nn.functional

IGNORE = -1
"""The target of a segment slot a row does not use."""


def segment_attention_mask(segment_ids: Any) -> Any:
    """Boolean ``(batch, length, length)``: True where query ``i`` may attend to key ``j``, i.e. both are in the
    same segment (padding, segment 0, attends only to padding, so no row of the mask is empty)."""
    return segment_ids[:, :, None] == segment_ids[:, None, :]


class _EncoderLayer(nn.Module):
    """Pre-norm Transformer encoder layer (attention, then a GELU feed-forward), with plain ``nn.Linear``
    projections (dynamic int8 quantization replaces every one of them)."""

    def __init__(self, d_model: int, num_heads: int, dim_feedforward: int, dropout: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, dim_feedforward)
        self.ff2 = nn.Linear(dim_feedforward, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, h: Any, allowed: Any) -> Any:
        b, n, d = h.shape
        q, k, v = self.qkv(self.norm1(h)).view(b, n, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])
        h = h + self.dropout(self.out(att.transpose(1, 2).reshape(b, n, d)))
        return h + self.dropout(self.ff2(F.gelu(self.ff1(self.norm2(h)))))


class PackedTextClassifier(nn.Module):
    """Classifies each segment of packed rows (module docstring).

    Example::

        model = PackedTextClassifier(vocab_size=2000, num_classes=8, sequence_length=128, max_segments=16)
        logits = model(rows)  # rows: int (batch, 3, 128) -> float (batch, 16, 8)

    Args:
        vocab_size: token ids are ``0 .. vocab_size - 1`` (0 is padding).
        num_classes: classes per segment.
        sequence_length: tokens per row (the largest position + 1).
        max_segments: segment slots per row (outputs per row); a row with more segments is the data's error
            (:func:`segment_examples` raises).
        d_model, num_heads, num_layers, dim_feedforward (default ``4 * d_model``), dropout: the encoder's sizes.

    Raises:
        ValueError: a size < 1, or ``d_model`` not a multiple of ``num_heads``.
    """

    slots: torch.Tensor  # the segment slots 1 .. max_segments (a buffer: register_buffer)

    def __init__(self, vocab_size: int, num_classes: int, *, sequence_length: int, max_segments: int,
                 d_model: int = 128, num_heads: int = 4, num_layers: int = 2, dim_feedforward: int | None = None,
                 dropout: float = 0.0) -> None:
        super().__init__()
        sizes = {"vocab_size": vocab_size, "num_classes": num_classes, "sequence_length": sequence_length,
                 "max_segments": max_segments, "d_model": d_model, "num_heads": num_heads, "num_layers": num_layers}
        for name, v in sizes.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"PackedTextClassifier: {name}={v!r} must be an int >= 1")
        if d_model % num_heads:
            raise ValueError(f"PackedTextClassifier: d_model={d_model} must be a multiple of num_heads={num_heads}")
        self.config = dict(sizes, dim_feedforward=dim_feedforward or 4 * d_model, dropout=dropout)
        self.tokens = nn.Embedding(vocab_size, d_model)
        self.positions = nn.Embedding(sequence_length, d_model)
        self.layers = nn.ModuleList(_EncoderLayer(d_model, num_heads, dim_feedforward or 4 * d_model, dropout)
                                    for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)
        self.classifier = nn.Linear(d_model, num_classes)
        self.register_buffer("slots", torch.arange(1, max_segments + 1), persistent=False)

    def forward(self, rows: Any) -> Any:
        tokens, segment_ids, positions = rows[:, 0], rows[:, 1], rows[:, 2]
        h = self.tokens(tokens) + self.positions(positions)
        allowed = segment_attention_mask(segment_ids)
        for layer in self.layers:
            h = layer(h, allowed)
        h = self.norm(h)
        member = (segment_ids[:, None, :] == self.slots.to(segment_ids.dtype)[None, :, None]).to(h.dtype)
        pooled = (member @ h) / member.sum(-1, keepdim=True).clamp(min=1.0)  # (batch, slots, d_model)
        return self.classifier(pooled)


def segment_cross_entropy(logits: Any, targets: Any) -> Any:
    """Mean cross-entropy over the labelled segment slots: ``logits`` float ``(batch, slots, classes)``,
    ``targets`` int ``(batch, slots)`` with ``IGNORE`` (-1) on unused slots."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1).long(),
                           ignore_index=IGNORE)


def segment_examples(max_segments: int) -> Callable[..., tuple[np.ndarray, np.ndarray]]:
    """The ``map`` function from ``pack``'s rows of ``(token ids, per-token labels)`` to ``fit``'s elements.

    Example::

        ds = lines.map(lambda ids, label: (ids, np.full(len(ids), label, np.int32)))
        ds = ds.pack(128).map(segment_examples(16))   # -> (rows int32 (3, 128), targets int64 (16,))

    Each input sequence carries its label on every token (so ``pack`` keeps it with its tokens); the label of
    segment ``s`` is read at its first token.

    Raises:
        ValueError: on iteration, a row with more than ``max_segments`` segments (names both counts and the fix).
    """
    if isinstance(max_segments, bool) or not isinstance(max_segments, int) or max_segments < 1:
        raise ValueError(f"segment_examples: max_segments={max_segments!r} must be an int >= 1")

    def to_example(packed: Any, segment_ids: Any, positions: Any) -> tuple[np.ndarray, np.ndarray]:
        tokens, labels = packed
        seg, pos = segment_ids[0], positions[0]
        starts = (pos == 0) & (seg > 0)
        found = int(starts.sum())
        if found > max_segments:
            raise ValueError(f"segment_examples: a packed row holds {found} segments, more than max_segments="
                             f"{max_segments}; raise max_segments or drop sequences shorter than "
                             f"{len(seg) // max_segments} tokens before pack")
        targets = np.full(max_segments, IGNORE, np.int64)
        targets[:found] = labels[starts]
        return np.stack([tokens, seg, pos]).astype(np.int32), targets

    return to_example


__all__ = ["IGNORE", "PackedTextClassifier", "segment_attention_mask", "segment_cross_entropy", "segment_examples"]
