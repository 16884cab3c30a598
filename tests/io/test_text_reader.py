"""TextLineDataset and FixedLengthRecordDataset: elements (against a reference cut written here; the
differential tests against tf.data are in test_text_tfdata.py), exactly-once state at every position,
batches in slices, bad input and the budget's refusal of an over-long line."""

from __future__ import annotations

import gzip
import random
import warnings
import zlib

import numpy as np
import pytest
from rss_child import cap, reader_child, run_child

import headrace as hr
from headrace.io import FixedLengthRecordDataset, TextLineDataset

KiB, MiB = 1024, 1024**2
SMALL = hr.Options(memory_budget=256 * KiB)  # 4 KiB reads: many chunks per file


def _compress(data: bytes, kind: str) -> bytes:
    return {"": data, "GZIP": gzip.compress(data), "ZLIB": zlib.compress(data)}[kind]


def _lines(data: bytes) -> list[bytes]:
    """tf.data's lines, cut the slow obvious way: every \\r dropped, split at \\n, a last part kept if not empty."""
    text = data.replace(b"\r", b"")
    parts = text.split(b"\n")
    return parts[:-1] + ([parts[-1]] if parts[-1] else [])


def _text(rng: random.Random, n: int) -> bytes:
    out = []
    for _ in range(n):
        line = bytes(rng.randrange(256) for _ in range(rng.choice([0, 0, 1, 5, 40, 300])))
        out.append(line.replace(b"\n", b"x").replace(b"\r", b"y") + rng.choice([b"\n", b"\r\n"]))
    return b"".join(out)[: -rng.choice([0, 1])]  # with or without a final newline


@pytest.fixture(scope="module", params=["", "GZIP", "ZLIB"])
def text_files(request, tmp_path_factory):
    kind = request.param
    d = tmp_path_factory.mktemp(f"text{kind}")
    rng = random.Random(7)
    paths, lines = [], []
    for i, n in enumerate([300, 0, 1, 120]):
        data = _text(rng, n)
        p = d / f"f{i}.txt"
        p.write_bytes(_compress(data, kind))
        paths.append(str(p))
        lines.append(_lines(data))
    return kind, paths, lines


def _interleave(per_file: list[list[bytes]], n: int) -> list[bytes]:
    """tf.data's interleave(cycle_length=n, block_length=1) of the files' elements (its InterleaveDataset loop:
    an exhausted slot moves on to the next slot; an empty slot opens the next file when the cycle reaches it)."""
    out: list[bytes] = []
    slots: list = [None] * n
    pending = [iter(f) for f in per_file]
    i = 0
    while pending or any(s is not None for s in slots):
        if slots[i] is None:
            if pending:
                slots[i] = pending.pop(0)
                continue
            i = (i + 1) % n
            continue
        x = next(slots[i], None)
        if x is None:
            slots[i] = None
        else:
            out.append(x)
        i = (i + 1) % n
    return out


@pytest.mark.parametrize("reads", [1, 3])
def test_lines_every_state_restores_exactly_the_rest(text_files, reads):
    kind, paths, lines = text_files
    ds = TextLineDataset(paths, compression_type=kind, num_parallel_reads=reads).with_options(SMALL)
    want = _interleave(lines, reads) if reads > 1 else [x for f in lines for x in f]
    assert list(ds) == want
    states, it = [], iter(ds)
    for _ in range(len(want) + 1):
        states.append(it.get_state())
        next(it, None)
    for k in [*range(0, len(want) + 1, 37), len(want) - 1, len(want)]:
        it = iter(ds)
        it.set_state(states[k])
        got = [next(it) for _ in range(min(5, len(want) - k))]
        again = iter(ds)
        again.set_state(it.get_state())  # a restore of a restore
        assert got + list(again) == want[k:], k


def test_records_every_state_restores_exactly_the_rest(tmp_path):
    for kind in ["", "GZIP"]:
        paths, records = [], []
        for i, n in enumerate([40, 0, 7]):
            body = bytes(random.Random(i).randrange(256) for _ in range(n * 9))
            p = tmp_path / f"r{i}{kind}.bin"
            p.write_bytes(_compress(b"HEAD" + body + b"FT", kind))
            paths.append(str(p))
            records.append([body[j:j + 9] for j in range(0, len(body), 9)])
        for reads in [1, 2]:
            ds = FixedLengthRecordDataset(paths, 9, header_bytes=4, footer_bytes=2, compression_type=kind,
                                          num_parallel_reads=reads).with_options(SMALL)
            want = _interleave(records, reads) if reads > 1 else [x for f in records for x in f]
            assert list(ds) == want
            it = iter(ds)
            for k in range(len(want) + 1):
                state = it.get_state()
                fresh = iter(ds)
                fresh.set_state(state)
                assert list(fresh) == want[k:], (kind, reads, k)
                next(it, None)


def test_a_record_state_is_one_offset(tmp_path):
    p = tmp_path / "r.bin"
    p.write_bytes(b"HH" + bytes(range(30)))
    it = iter(FixedLengthRecordDataset(str(p), 3, header_bytes=2))
    for _ in range(4):
        next(it)
    state = it.get_state()["pipeline"]
    assert (state["offset"], state["skip"], state["file_index"]) == (2 + 4 * 3, 0, 0)


def test_batches_are_filled_in_slices_with_the_same_elements(text_files):
    kind, paths, lines = text_files
    flat = [x for f in lines for x in f]
    ds = TextLineDataset(paths, compression_type=kind)
    got = [x for b in ds.batch(64) for x in b.tolist()]
    assert got == flat
    it = iter(ds.batch(50))
    next(it)
    state = it.get_state()
    rest = iter(ds.batch(50))
    rest.set_state(state)
    assert [x for b in rest for x in b.tolist()] == flat[50:]


def test_map_batch_runs_and_a_tokenizing_map(tmp_path):
    p = tmp_path / "t.txt"
    p.write_bytes(b"".join(b"w%d x y\n" % i for i in range(3000)))
    ds = TextLineDataset(str(p)).map(lambda line: np.int64(len(line.split()))).batch(1000)
    assert [b.tolist() for b in ds] == [[3] * 1000] * 3


def test_truncated_gzip_is_data_loss_naming_file_and_offset_then_next_file(tmp_path):
    whole = gzip.compress(b"".join(b"line %d\n" % i for i in range(50000)))
    cut, good = tmp_path / "cut.txt.gz", tmp_path / "good.txt.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    good.write_bytes(gzip.compress(b"after\n"))
    it = iter(TextLineDataset([str(cut), str(good)], compression_type="GZIP"))
    n = 0
    with pytest.raises(hr.DataLossError, match=r"truncated GZIP stream in .*cut\.txt\.gz at uncompressed byte \d+"):
        for _ in it:
            n += 1
    assert 0 < n < 50000
    assert list(it) == [b"after"]  # the rest of the damaged file is lost, reading goes on (ignore_errors)
    ds = TextLineDataset([str(cut), str(good)], compression_type="GZIP").ignore_errors()
    with pytest.warns(hr.IgnoredErrorsWarning):
        assert list(ds)[-1] == b"after"


def test_auto_compression_and_none_does_not_infer(tmp_path):
    gz, plain = tmp_path / "a.txt.gz", tmp_path / "b.txt"
    gz.write_bytes(gzip.compress(b"x\ny\n"))
    plain.write_bytes(b"z\n")
    assert list(TextLineDataset([str(gz), str(plain)], compression_type="AUTO")) == [b"x", b"y", b"z"]
    assert list(TextLineDataset(str(gz))) != [b"x", b"y"]  # as tf.data: the compressed bytes


def test_filenames_from_a_dataset_and_state(tmp_path):
    for i in range(3):
        (tmp_path / f"{i}.txt").write_bytes(b"%d-a\n%d-b\n" % (i, i))
    names = hr.Dataset.list_files(str(tmp_path / "*.txt"), shuffle=False)
    ds = TextLineDataset(names)
    want = [b"0-a", b"0-b", b"1-a", b"1-b", b"2-a", b"2-b"]
    assert list(ds) == want
    it = iter(ds)
    for _ in range(3):
        next(it)
    again = iter(ds)
    again.set_state(it.get_state())
    assert list(again) == want[3:]
    assert ds.element_spec == hr.TensorSpec([], "string")
    assert ds.cardinality() == hr.UNKNOWN_CARDINALITY


def test_bad_arguments_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match=r"compression_type='BZ2'"):
        TextLineDataset("x.txt", compression_type="BZ2")
    with pytest.raises(ValueError, match=r"record_bytes=0 must be >= 1"):
        FixedLengthRecordDataset("x.bin", 0)
    with pytest.raises(ValueError, match=r"num_parallel_reads=0"):
        TextLineDataset("x.txt", num_parallel_reads=0)
    with pytest.raises(FileNotFoundError):
        list(TextLineDataset(str(tmp_path / "missing.txt")))
    it = iter(FixedLengthRecordDataset("x.bin", 4))
    with pytest.raises(hr.StateError):
        it.set_state({"kind": "text_line", "file_index": 0, "offset": 0, "skip": 0})


def test_partial_record_is_refused_as_tf_data_does(tmp_path):
    p = tmp_path / "odd.bin"
    p.write_bytes(b"h" + b"x" * 10)
    with pytest.raises(hr.DataLossError, match=r"odd\.bin \(11 bytes\).*body is 10 bytes.*records of 4 bytes"):
        next(iter(FixedLengthRecordDataset(str(p), 4, header_bytes=1)))
    z = tmp_path / "odd.gz"
    z.write_bytes(gzip.compress(b"h" + b"x" * 10))
    it = iter(FixedLengthRecordDataset(str(z), 4, header_bytes=1, compression_type="GZIP"))
    assert [next(it), next(it)] == [b"xxxx", b"xxxx"]
    with pytest.raises(hr.DataLossError, match=r"odd\.gz at uncompressed byte 9: the file ends inside a record"):
        next(it)
    with pytest.raises(hr.DataLossError, match=r"odd\.gz: its uncompressed bytes end before the end of its header "
                                               r"\(header_bytes=30\)"):
        next(iter(FixedLengthRecordDataset(str(z), 4, header_bytes=30, compression_type="GZIP")))


def test_a_line_longer_than_the_budget_is_refused_in_one_line(tmp_path):
    p = tmp_path / "long.txt"
    p.write_bytes(b"short\n" * 10 + b"y" * (3 * MiB) + b"\nend\n")
    ds = TextLineDataset(str(p)).with_options(hr.Options(memory_budget=2 * MiB))
    it = iter(ds)
    assert [next(it) for _ in range(10)] == [b"short"] * 10
    with pytest.raises(hr.MemoryBudgetError) as e:
        next(it)
    msg = str(e.value)
    assert "\n" not in msg.split("\nin ")[0]
    assert "line 11 of" in msg and "long.txt" in msg and "at least" in msg and "memory budget of 2.0 MiB" in msg
    with pytest.raises(hr.MemoryBudgetError):
        next(it)  # raised again, never a silent skip


HUGE_LINE_CHILD = reader_child("TextLineDataset", "TextLineDataset(path).batch(batch_size)", "el")
"""The child of the huge-line checks (also ``bench/text_huge_line.py``'s): batches of 1024 lines under a budget."""


def test_a_huge_line_is_refused_within_the_budget_as_the_os_sees_it(tmp_path):
    """The acceptance shape (1 GB, one 64 MiB line, 32 MiB budget) is bench/text_huge_line.py; here 46 MiB of
    text holding one 16 MiB line under a 4 MiB budget."""
    p = tmp_path / "big.txt"
    budget = 4 * MiB
    with open(p, "wb") as f:
        block = b"".join(b"line %07d of text\n" % i for i in range(50000))
        for _ in range(16):
            f.write(block)
        f.write(b"z" * (16 * MiB) + b"\n")
        for _ in range(16):
            f.write(block)
    out, growth = run_child(HUGE_LINE_CHILD, str(p), str(budget), "1024")
    assert out["error"] is not None and "line 800001 of" in out["error"] and "big.txt" in out["error"], out
    assert "memory budget of 4.0 MiB" in out["error"] and "\n" not in out["error"], out
    assert out["rows"] >= 799000, out
    assert growth <= cap(budget), (growth, cap(budget))


def test_fsspec_urls_compressed_and_restored():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/text-test/a.txt", b"one\ntwo\nthree\n")
    fs.pipe("/text-test/b.txt.gz", gzip.compress(b"four\nfive\n"))
    ds = TextLineDataset(["memory://text-test/a.txt", "memory://text-test/b.txt.gz"], compression_type="AUTO")
    assert list(ds) == [b"one", b"two", b"three", b"four", b"five"]
    for k in range(6):
        it = iter(ds)
        for _ in range(k):
            next(it)
        again = iter(ds)
        again.set_state(it.get_state())
        assert list(again) == [b"one", b"two", b"three", b"four", b"five"][k:]


def test_close_stops_the_read_ahead_threads(tmp_path):
    import threading

    for i in range(4):
        (tmp_path / f"{i}.txt.gz").write_bytes(gzip.compress(b"x\n" * 2_000_000))
    for reads in [1, 2]:
        ds = TextLineDataset([str(tmp_path / f"{i}.txt.gz") for i in range(4)], compression_type="GZIP",
                             num_parallel_reads=reads).with_options(hr.Options(memory_budget=4 * MiB))
        it = iter(ds)
        next(it)
        it.close()  # (a stopped read-ahead is never taken for the end of a file: the next one is not opened)
        alive = [t.name for t in threading.enumerate() if t.name.startswith("headrace-")]
        assert not alive, alive


def test_a_readers_buffers_are_not_taken_for_the_size_of_elements(tmp_path):
    """The reader's buffers (a few MiB under a 64 MiB budget: 1 MiB reads, read ahead, decompression) are not
    elements: a stage that has not seen its own yet must not assume elements that large, which gave a later
    batch a share over the whole budget and shrank a parallel map's window to one element (warned)."""
    files = []
    for i in range(4):
        path = tmp_path / f"part-{i}.txt.gz"
        path.write_bytes(gzip.compress(b"".join(b"%d\tline %d of file %d\n" % (j % 8, j, i) for j in range(3000))))
        files.append(str(path))
    ds = (TextLineDataset(files, compression_type="GZIP", num_parallel_reads=4).shuffle(512, seed=0).batch(64)
          .map(lambda b: b, num_parallel_calls=2, executor="thread").unbatch().shuffle(64, seed=0).batch(16)
          .prefetch(2).with_options(hr.Options(memory_budget=64 * MiB)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", hr.MemoryBudgetWarning)
        assert sum(len(b) for b in ds) == 12_000
