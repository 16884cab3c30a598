"""Text on the pipeline: train a Hugging Face ``tokenizers`` tokenizer on a ``Dataset`` of lines, and encode
batches of lines to ragged token ids inside a batched ``map``.

Example::

    import headrace as hr
    from headrace import text

    lines = hr.Dataset.from_tensor_slices([b"the cat sat", b"on the mat"] * 200)
    tok = text.train_tokenizer(lines, kind="bpe", vocab_size=300)
    rows = (lines.batch(256).map(text.Encoder(tok, eos="[EOS]"), num_parallel_calls=hr.AUTOTUNE)
                 .unbatch().pack(128))

A line is a ``bytes`` (UTF-8) or ``str`` scalar. The encoder maps a batch of lines (a 1-D array) to a 1-D object
array of 1-D ``int32`` id arrays, one per line: headrace's ragged form (``RaggedTensorSpec``, as
``ragged_batch`` gives), which ``unbatch`` splits back into one id array per line for ``pack``. Encoding runs
in ``tokenizers``' Rust code, which releases the GIL, so the map's threads encode in parallel (bench/tokenization.py
measures it). Nothing is downloaded. Requires ``pip install 'headrace[text]'``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._deps import require

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from ._dataset import Dataset

KINDS = ("bpe", "wordpiece", "unigram")
ERRORS = ("strict", "replace")
#: Special tokens a trained tokenizer starts with, ids 0, 1, 2, 3: ``[PAD]`` is id 0, the ``padding_value``
#: ``pack`` and ``padded_batch`` use by default.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]")
_TRAIN_CHUNK = 1024  # lines handed to the trainer at once


def _tokenizers() -> Any:
    return require("tokenizers", "headrace.text")


def _line(value: Any, where: str, errors: str) -> str:
    """One line as ``str``: ``bytes`` decoded as UTF-8 (``errors="replace"`` puts U+FFFD for bad bytes)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8", errors)
        except UnicodeDecodeError as exc:
            shown = value if len(value) <= 60 else value[:60] + b"..."
            raise ValueError(
                f"{where}: {shown!r} is not UTF-8 ({exc.reason} at byte offset {exc.start}); pass "
                "errors='replace' to put U+FFFD for bad bytes, or drop such lines with ignore_errors()") from None
    raise TypeError(f"{where}: a line must be bytes or str, got {type(value).__name__} {value!r:.60}; map the "
                    "element to its text first (e.g. lambda x: x['text'])")


def _check_errors(errors: str) -> None:
    if errors not in ERRORS:
        raise ValueError(f"errors={errors!r}: use 'strict' (raise on a line that is not UTF-8) or 'replace'")


def _lines_of(element: Any, index: int, errors: str) -> list[str]:
    """The lines of one dataset element: a scalar line or a 1-D batch of them."""
    if isinstance(element, np.ndarray) and element.ndim == 1:
        return [_line(v, f"train_tokenizer: element {index}, line {j}", errors) for j, v in enumerate(element)]
    if isinstance(element, np.ndarray) and element.ndim == 0:
        element = element.item()
    return [_line(element, f"train_tokenizer: element {index}", errors)]


def _stream(dataset: Dataset, errors: str) -> Iterator[list[str]]:
    """The dataset's lines in chunks of about ``_TRAIN_CHUNK``; the iterator is closed however it ends."""
    it = iter(dataset)
    try:
        chunk: list[str] = []
        for index, element in enumerate(it):
            chunk.extend(_lines_of(element, index, errors))
            if len(chunk) >= _TRAIN_CHUNK:
                yield chunk
                chunk = []
        if chunk:
            yield chunk
    finally:
        it.close()


def _build(kind: str, vocab_size: int, min_frequency: int, special_tokens: list[str], unk_token: str | None,
           show_progress: bool) -> tuple[Tokenizer, Any]:
    """An untrained tokenizer of ``kind`` and its trainer."""
    tk = _tokenizers()
    models, trainers, pre, decoders = tk.models, tk.trainers, tk.pre_tokenizers, tk.decoders
    if kind == "bpe":  # byte-level (GPT-2's): every string has an encoding and decodes back exactly
        tok = tk.Tokenizer(models.BPE())
        tok.pre_tokenizer = pre.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=special_tokens, initial_alphabet=pre.ByteLevel.alphabet(),
                                      show_progress=show_progress)
    elif kind == "wordpiece":  # BERT's: words and punctuation split apart, "##" continues a word
        tok = tk.Tokenizer(models.WordPiece(unk_token=unk_token))
        tok.pre_tokenizer = pre.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            special_tokens=special_tokens, show_progress=show_progress)
    else:  # unigram (SentencePiece's model): spaces kept as "▁"
        tok = tk.Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=special_tokens,
                                          unk_token=unk_token, show_progress=show_progress)
    return tok, trainer


def train_tokenizer(dataset: Dataset, kind: str = "bpe", vocab_size: int = 8000, *,
                    special_tokens: Sequence[str] = SPECIAL_TOKENS, unk_token: str = "[UNK]",
                    min_frequency: int = 2, errors: str = "strict", show_progress: bool = False) -> Tokenizer:
    """Train a ``tokenizers.Tokenizer`` on the lines of ``dataset``, offline.

    The dataset is iterated once, as any headrace iteration (its memory budget holds the pipeline's buffers;
    the trainer's own word counts, which grow with the distinct words rather than the corpus, live in
    ``tokenizers`` outside the budget). Train on the training split only.

    Example: ``tok = train_tokenizer(hr.Dataset.from_tensor_slices(lines), "unigram", 2000)``;
    ``tok.save("tok.json")`` writes it, ``tokenizers.Tokenizer.from_file("tok.json")`` reads it back.

    Args:
        dataset: elements are lines (``bytes`` as UTF-8, or ``str`` scalars) or 1-D batches of lines.
        kind: ``"bpe"`` (byte-level BPE as GPT-2: any text encodes, decode gives it back exactly),
            ``"wordpiece"`` (BERT's: splits words and punctuation; decode joins them with single spaces) or
            ``"unigram"`` (SentencePiece's model with its "▁" word boundaries).
        vocab_size: the vocabulary's size at most, special tokens and (for ``"bpe"``) the 256 byte tokens
            included.
        special_tokens: tokens added first, with ids ``0, 1, ...`` in this order; the default puts ``[PAD]`` at
            id 0 (the padding ``pack`` uses by default). Never split by the model.
        unk_token: the unknown token of ``"wordpiece"`` and ``"unigram"`` (appended to ``special_tokens`` if
            missing there); byte-level BPE needs none.
        min_frequency: how often a pair (``"bpe"``, ``"wordpiece"``) must occur to be merged (>= 1).
        errors: ``"strict"`` raises on a line that is not UTF-8; ``"replace"`` puts U+FFFD for its bad bytes.
        show_progress: ``tokenizers``' progress bars.

    Returns:
        The trained ``tokenizers.Tokenizer`` (``get_vocab_size()`` <= ``vocab_size``).

    Raises:
        ValueError: an unknown ``kind`` or ``errors``, ``vocab_size`` too small for the special tokens (and the
            256 byte tokens of ``"bpe"``), ``min_frequency < 1``, an empty dataset, or a line that is not
            UTF-8 (naming the element and byte offset).
        TypeError: an element that is not a line or a 1-D batch of lines (naming it).
        MissingDependencyError: ``tokenizers`` is not installed.
    """
    if kind not in KINDS:
        raise ValueError(f"train_tokenizer(kind={kind!r}): use one of {', '.join(KINDS)}")
    _check_errors(errors)
    special = list(special_tokens)
    if kind != "bpe" and unk_token not in special:
        special.append(unk_token)
    floor = len(special) + (256 if kind == "bpe" else 1)
    if not isinstance(vocab_size, int) or vocab_size < floor:
        raise ValueError(f"train_tokenizer(vocab_size={vocab_size!r}): a {kind} vocabulary needs at least {floor} "
                         f"tokens ({len(special)} special" + (" + 256 bytes)" if kind == "bpe" else " + 1)"))
    if not isinstance(min_frequency, int) or min_frequency < 1:
        raise ValueError(f"train_tokenizer(min_frequency={min_frequency!r}): use an integer >= 1")
    tok, trainer = _build(kind, vocab_size, min_frequency, special, unk_token, show_progress)
    seen = [0]

    def counted() -> Iterator[list[str]]:
        for chunk in _stream(dataset, errors):
            seen[0] += len(chunk)
            yield chunk

    tok.train_from_iterator(counted(), trainer=trainer)
    if not seen[0]:
        raise ValueError("train_tokenizer: the dataset has no lines; a tokenizer needs text to train on")
    return tok


class Encoder:
    """A callable for ``map``: a batch of lines to ragged token ids (or one line to its ids).

    Picklable (the tokenizer travels as its JSON), so it also runs under ``map(executor="process")``.

    Example::

        enc = Encoder(tok, bos="[BOS]", eos="[EOS]", max_length=512)
        ds = lines.batch(256).map(enc, num_parallel_calls=hr.AUTOTUNE).unbatch()  # one id array per line

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` (from :func:`train_tokenizer` or ``Tokenizer.from_file``).
        bos, eos: a token (``str``, looked up in the vocabulary) or an id (``int``) put before / after each
            line's ids; ``None`` (default) adds none. The tokenizer's own post-processor is not applied.
        max_length: keep at most this many ids per line, ``bos`` / ``eos`` included (the line's ids are cut at
            the end, ``eos`` kept); ``None``: no limit.
        errors: ``"strict"`` raises on a line that is not UTF-8; ``"replace"`` puts U+FFFD for its bad bytes.
        dtype: the ids' integer dtype (default ``int32``).

    Raises:
        ValueError: a ``bos`` / ``eos`` token not in the vocabulary or id out of range, ``max_length`` smaller
            than ``bos`` and ``eos`` plus one id, an unknown ``errors``, a non-integer ``dtype``.
    """

    def __init__(self, tokenizer: Tokenizer, *, bos: str | int | None = None, eos: str | int | None = None,
                 max_length: int | None = None, errors: str = "strict", dtype: Any = np.int32) -> None:
        _check_errors(errors)
        self.tokenizer = tokenizer
        self.head = self._special_id("bos", bos)
        self.tail = self._special_id("eos", eos)
        if max_length is not None and (not isinstance(max_length, int)
                                       or max_length < len(self.head) + len(self.tail) + 1):
            raise ValueError(f"Encoder(max_length={max_length!r}): use None or an integer >= "
                             f"{len(self.head) + len(self.tail) + 1} (bos / eos plus one id)")
        self.keep = None if max_length is None else max_length - len(self.head) - len(self.tail)
        self.errors = errors
        self.dtype = np.dtype(dtype)
        if self.dtype.kind not in "iu":
            raise ValueError(f"Encoder(dtype={dtype!r}): token ids need an integer dtype (int32, int64, uint16, ...)")
        if tokenizer.get_vocab_size(with_added_tokens=True) - 1 > np.iinfo(self.dtype).max:
            raise ValueError(f"Encoder(dtype={self.dtype}): the vocabulary's ids do not fit; use int32")

    def _special_id(self, name: str, token: str | int | None) -> list[int]:
        if token is None:
            return []
        size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        found = self.tokenizer.token_to_id(token) if isinstance(token, str) else token
        if not isinstance(found, int) or isinstance(found, bool) or not 0 <= found < size:
            raise ValueError(f"Encoder({name}={token!r}): not a token of the vocabulary nor an id in [0, {size}); "
                             "pass one of the tokenizer's special tokens (e.g. '[EOS]') or its id")
        return [found]

    def _ids(self, ids: list[int]) -> np.ndarray:
        if self.keep is not None:
            ids = ids[:self.keep]
        if self.head or self.tail:
            ids = self.head + ids + self.tail
        return np.array(ids, dtype=self.dtype)

    def __call__(self, lines: Any) -> np.ndarray:
        """Encode ``lines``: a 1-D array (or list) of lines -> a 1-D object array, shape ``(len(lines),)``, of
        1-D id arrays; one line (``bytes`` / ``str`` / 0-d array) -> its 1-D id array.

        Raises:
            ValueError: a line that is not UTF-8 with ``errors="strict"`` (naming its index, value and byte
                offset), an array of more than one dimension.
            TypeError: a line that is neither ``bytes`` nor ``str``.
        """
        if isinstance(lines, bytes | str) or (isinstance(lines, np.ndarray) and lines.ndim == 0):
            one = lines.item() if isinstance(lines, np.ndarray) else lines
            return self._ids(self.tokenizer.encode(_line(one, "encode", self.errors),
                                                   add_special_tokens=False).ids)
        if isinstance(lines, np.ndarray) and lines.ndim != 1:
            raise ValueError(f"encode: lines of shape {lines.shape}; pass one line or a 1-D batch of lines "
                             "(unbatch or reshape the element first)")
        texts = [_line(v, f"encode: line {i} of the batch", self.errors) for i, v in enumerate(lines)]
        out = np.empty(len(texts), dtype=object)
        for i, enc in enumerate(self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)):
            out[i] = self._ids(enc.ids)
        return out


def encode(tokenizer: Tokenizer, lines: Any, *, bos: str | int | None = None, eos: str | int | None = None,
           max_length: int | None = None, errors: str = "strict") -> np.ndarray:
    """``Encoder(tokenizer, bos=..., eos=..., max_length=..., errors=...)(lines)``: one call's worth.

    Example: ``encode(tok, np.array([b"a b", b"c"], dtype=object))`` -> ``array([array([..], dtype=int32),
    array([..], dtype=int32)], dtype=object)``. For a ``map`` build one :class:`Encoder` and pass it.

    Args, Returns, Raises: as :class:`Encoder` and its ``__call__``.
    """
    return Encoder(tokenizer, bos=bos, eos=eos, max_length=max_length, errors=errors)(lines)


__all__ = ["KINDS", "SPECIAL_TOKENS", "Encoder", "encode", "train_tokenizer"]
