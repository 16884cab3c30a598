"""``headrace.text``: tokenizers trained on a Dataset of lines, and batched encoding on the pipeline."""

from __future__ import annotations

import json
import pickle
from collections import Counter

import numpy as np
import pytest

import headrace as hr

pytest.importorskip("tokenizers")
from headrace import text

WORDS = ["alpha", "beta", "gamma", "delta", "naïve", "über", "日本", "x", "(1,", "2)", "--", "é"]


def generated_lines(seed: int, n: int = 400) -> list[bytes]:
    """Lines of random words, with punctuation, non-ASCII text, runs of spaces and empty lines."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = rng.choice(WORDS, rng.integers(0, 12))
        sep = "  " if rng.random() < 0.1 else " "
        out.append(sep.join(words).encode())
    return out


LINES = generated_lines(0)


@pytest.fixture(scope="module")
def bpe():
    return text.train_tokenizer(hr.Dataset.from_tensor_slices(LINES), "bpe", 400)


def unpack(rows) -> list[list[int]]:
    """Every sequence of packed rows, by segment_ids."""
    out = []
    for packed, seg, _ in rows:
        out += [packed[seg == k].tolist() for k in range(1, int(seg.max(initial=0)) + 1)]
    return out


def test_bpe_round_trips_any_text_exactly(bpe):
    other = [*generated_lines(1, 100), "tab\there, ünïcode ✓ and 🚀".encode(), b" leading and trailing "]
    for line in other:
        ids = text.encode(bpe, line)
        assert ids.dtype == np.int32 and ids.ndim == 1
        assert bpe.decode(ids.tolist()) == line.decode()
    assert bpe.get_vocab_size() <= 400
    assert [bpe.token_to_id(t) for t in text.SPECIAL_TOKENS] == [0, 1, 2, 3]  # [PAD] is pack's padding 0


def test_unigram_and_wordpiece_train_and_decode():
    single = [b" ".join(line.split()) for line in LINES]  # one space between words
    ds = hr.Dataset.from_tensor_slices(single)
    uni = text.train_tokenizer(ds, "unigram", 120)
    for line in single[:50]:
        assert uni.decode(text.encode(uni, line).tolist()) == line.decode()
    wp = text.train_tokenizer(ds, "wordpiece", 120)
    for line in single[:50]:
        decoded = wp.decode(text.encode(wp, line).tolist())
        assert "".join(decoded.split()) == "".join(line.decode().split())  # every character kept; spacing not
    assert uni.token_to_id("[UNK]") == wp.token_to_id("[UNK]") == 1


def test_training_on_batches_equals_training_on_lines_and_on_str():
    by_line = text.train_tokenizer(hr.Dataset.from_tensor_slices(LINES), "bpe", 350)
    by_batch = text.train_tokenizer(hr.Dataset.from_tensor_slices(LINES).batch(37), "bpe", 350)
    by_str = text.train_tokenizer(hr.Dataset.from_tensor_slices([x.decode() for x in LINES]), "bpe", 350)
    assert by_line.get_vocab() == by_batch.get_vocab() == by_str.get_vocab()


def test_the_batched_map_gives_the_ids_of_per_line_encoding(bpe):
    enc = text.Encoder(bpe)
    ds = hr.Dataset.from_tensor_slices(LINES)
    batched = ds.batch(64).map(enc)
    assert isinstance(batched.element_spec, hr.RaggedTensorSpec) and batched.element_spec.dtype == np.int32
    per_line = [bpe.encode(x.decode(), add_special_tokens=False).ids for x in LINES]
    assert [a.tolist() for a in batched.unbatch()] == per_line
    assert [a.tolist() for a in ds.map(enc)] == per_line


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_the_map_under_autotune_gives_the_same_ids(bpe, executor):
    enc = text.Encoder(bpe, eos="[EOS]")
    ds = hr.Dataset.from_tensor_slices(LINES).batch(16)
    if executor == "process":
        ds = ds.take(4)  # a few batches: worker processes start slowly on a loaded machine
    want = [[a.tolist() for a in batch] for batch in ds.map(enc)]
    got = [[a.tolist() for a in batch] for batch in
           ds.map(enc, num_parallel_calls=hr.AUTOTUNE, executor=executor).prefetch(2)]
    assert got == want and sum(map(len, want)) > 0


def test_encoder_pickles_and_encodes_the_same(bpe):
    enc = text.Encoder(bpe, bos="[BOS]", max_length=6)
    batch = np.array(LINES[:20], dtype=object)
    assert [a.tolist() for a in pickle.loads(pickle.dumps(enc))(batch)] == [a.tolist() for a in enc(batch)]


def test_bos_eos_and_truncation(bpe):
    line = "alpha beta gamma delta alpha beta zeta omega"
    plain = bpe.encode(line, add_special_tokens=False).ids
    assert len(plain) > 6
    assert text.encode(bpe, line, bos="[BOS]", eos="[EOS]").tolist() == [2, *plain, 3]
    assert text.encode(bpe, line, bos=2, eos="[EOS]", max_length=6).tolist() == [2, *plain[:4], 3]
    assert text.encode(bpe, line, max_length=3).tolist() == plain[:3]
    assert text.encode(bpe, b"").tolist() == []
    assert text.encode(bpe, b"", eos="[EOS]").tolist() == [3]


@pytest.mark.parametrize("seed", range(3))
def test_pipeline_packs_every_token_exactly_once(bpe, seed):
    lines = generated_lines(seed + 10, 300)
    enc = text.Encoder(bpe, eos="[EOS]")
    ds = (hr.Dataset.from_tensor_slices(lines).batch(64)
          .map(enc, num_parallel_calls=hr.AUTOTUNE, executor="thread").unbatch().pack(128))
    want = [[*bpe.encode(x.decode(), add_special_tokens=False).ids, 3] for x in lines]
    rows = list(ds)
    assert all(r[0].shape == (128,) for r in rows)
    assert Counter(map(tuple, unpack(rows))) == Counter(map(tuple, want))


@pytest.mark.parametrize("cut", [0, 1, 3, 7])
def test_get_state_set_state_through_the_tokenizing_pipeline(bpe, cut):
    enc = text.Encoder(bpe, eos="[EOS]")
    ds = (hr.Dataset.from_tensor_slices(LINES).batch(32)
          .map(enc, num_parallel_calls=2, executor="thread").unbatch().pack(64).batch(2))
    full = [[p.tolist() for p in row[0]] for row in ds]
    it = iter(ds)
    head = [[p.tolist() for p in next(it)[0]] for _ in range(cut)]
    state = json.loads(json.dumps(it.get_state()))
    it.close()
    it = iter(ds)
    it.set_state(state)
    rest = [[p.tolist() for p in row[0]] for row in it]
    it.close()
    assert head + rest == full and len(full) > cut


def one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert "\n" not in msg
    return msg


def test_a_line_that_is_not_utf8_raises_naming_it_or_is_replaced(bpe):
    bad = [b"alpha beta", b"caf\xe9 au lait"]
    ds = hr.Dataset.from_tensor_slices(bad).batch(2).map(text.Encoder(bpe))
    with pytest.raises(ValueError) as info:
        list(ds)
    msg = one_line(info.value)
    assert "line 1 of the batch" in msg and "caf\\xe9 au lait" in msg and "offset 3" in msg and "replace" in msg
    replaced = next(iter(hr.Dataset.from_tensor_slices(bad).batch(2).map(text.Encoder(bpe, errors="replace"))))
    assert bpe.decode(replaced[1].tolist()) == "caf\ufffd au lait"
    with pytest.raises(ValueError, match=r"element 1: b'caf\\xe9 au lait' is not UTF-8"):
        text.train_tokenizer(hr.Dataset.from_tensor_slices(bad), "bpe", 300)
    replacing = text.train_tokenizer(hr.Dataset.from_tensor_slices(bad * 3), "bpe", 300, errors="replace")
    assert replacing.decode(text.encode(replacing, bad[1], errors="replace").tolist()) == "caf\ufffd au lait"
    with pytest.warns(hr.IgnoredErrorsWarning, match="dropped 1 of 2"):
        kept = list(hr.Dataset.from_tensor_slices(bad).map(text.Encoder(bpe)).ignore_errors())
    assert [a.tolist() for a in kept] == [bpe.encode("alpha beta", add_special_tokens=False).ids]


def test_bad_elements_and_arguments_raise_one_line_errors(bpe):
    with pytest.raises(TypeError, match=r"line 1 of the batch: a line must be bytes or str, got int 7"):
        text.encode(bpe, [b"a", 7])
    with pytest.raises(ValueError, match=r"lines of shape \(2, 1\)"):
        text.encode(bpe, np.array([[b"a"], [b"b"]], dtype=object))
    with pytest.raises(TypeError, match=r"element 0: a line must be bytes or str, got int"):
        text.train_tokenizer(hr.Dataset.range(3), "bpe", 300)
    with pytest.raises(ValueError, match="no lines"):
        text.train_tokenizer(hr.Dataset.from_tensor_slices(LINES).take(0), "bpe", 300)
    with pytest.raises(ValueError, match=r"kind='bbpe'.*bpe, wordpiece, unigram"):
        text.train_tokenizer(hr.Dataset.from_tensor_slices(LINES), "bbpe")
    with pytest.raises(ValueError, match=r"vocab_size=100.*at least 260"):
        text.train_tokenizer(hr.Dataset.from_tensor_slices(LINES), "bpe", 100)
    with pytest.raises(ValueError, match=r"eos='</s>'\): not a token"):
        text.Encoder(bpe, eos="</s>")
    size = bpe.get_vocab_size()
    with pytest.raises(ValueError, match=rf"bos={size}\): .*\[0, {size}\)"):
        text.Encoder(bpe, bos=size)
    with pytest.raises(ValueError, match=r"max_length=2\): .*>= 3"):
        text.Encoder(bpe, bos="[BOS]", eos="[EOS]", max_length=2)
    with pytest.raises(ValueError, match=r"errors='ignore'"):
        text.Encoder(bpe, errors="ignore")
    with pytest.raises(ValueError, match="dtype"):
        text.Encoder(bpe, dtype=np.float32)
    for exc_type, call in [(TypeError, lambda: text.encode(bpe, [b"a", 7])),
                           (ValueError, lambda: text.Encoder(bpe, eos="</s>"))]:
        with pytest.raises(exc_type) as info:
            call()
        one_line(info.value)


def test_headrace_text_resolves_after_import_headrace():
    assert hr.text is text
