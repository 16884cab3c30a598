"""Damaged inputs, generated: HDF5 chunks (gzip, fletcher32, uncompressed) and JPEG files with garbage,
bit flips and truncations. Under ``ignore_errors()`` every read returns in time (a reader that re-reads a
bad block forever fails the test, it does not hang pytest), the good rows come back exact and the dropped
count is what was lost; without it the error names the file."""

from __future__ import annotations

import io
import random
import re
import threading
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import headrace as hr
from headrace import DataLossError, IgnoredErrorsWarning, ImageDecodeError
from headrace.io import HDF5Dataset

DEADLINE_S = 30.0
N, CHUNK = 60, 10


def _within(fn: Callable[[], Any], what: str) -> Any:
    """``fn()`` in a daemon thread; fail (not hang) if it does not return within ``DEADLINE_S``."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # re-raised below, in the test's thread
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(DEADLINE_S)
    if t.is_alive():
        pytest.fail(f"{what}: did not return within {DEADLINE_S:.0f} s (a reader looping on a bad block?)")
    if "error" in out:
        raise out["error"]
    return out["value"]


def _skipping(ds: hr.Dataset) -> tuple[list[Any], int]:
    """``(elements, dropped)`` of ``ds.ignore_errors()``; ``dropped`` read from the IgnoredErrorsWarning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ds.ignore_errors().as_numpy_iterator() as it:
            got = list(it)
    counts = [re.search(r"dropped (\d+) of (\d+) elements", str(w.message)) for w in caught
              if issubclass(w.category, IgnoredErrorsWarning)]
    assert len(counts) <= 1
    dropped = int(counts[0].group(1)) if counts else 0
    if counts:
        assert int(counts[0].group(2)) == len(got) + dropped  # "of" counts every element seen
    return got, dropped


def _read_all(ds: hr.Dataset) -> list[Any]:
    with iter(ds) as it:
        return list(it)


def _fletcher_sums(payload: bytes) -> tuple[int, int]:
    """HDF5's Fletcher-32 (big-endian 16-bit words) reduced mod 65535: two payloads with equal sums are
    indistinguishable by the checksum (e.g. a word 0x0000 overwritten with 0xFFFF)."""
    if len(payload) % 2:
        payload += b"\0"
    words = np.frombuffer(payload, dtype=">u2").astype(np.int64)
    weights = np.arange(len(words), 0, -1, dtype=np.int64)
    return int(words.sum() % 65535), int((words * weights).sum() % 65535)


def _damaged_h5(path: Path, rng: random.Random, filt: str) -> tuple[np.ndarray, int, str]:
    """Write ``x`` (N int64 rows, chunks of CHUNK), damage one chunk in place.

    Returns ``(data, damaged chunk, outcome)``: outcome ``"same"`` (the garbage equals what was there),
    ``"undetectable"`` (no filter, or a Fletcher-32 collision) or ``"detectable"``."""
    data = (np.arange(N, dtype=np.int64) * 1_000_003) % 97_001
    kw = {"gzip": {"compression": "gzip"}, "fletcher32": {"fletcher32": True}, "none": {}}[filt]
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=data, chunks=(CHUNK,), **kw)
        ci = rng.randrange(N // CHUNK)
        info = d.id.get_chunk_info(ci)
    pos = rng.randrange(info.size)
    n = min(rng.randint(1, 16), info.size - pos)
    garbage = bytes([0xFF] * n) if rng.random() < 0.3 else bytes(rng.randrange(256) for _ in range(n))
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset)
        before = fh.read(info.size)
        fh.seek(info.byte_offset + pos)
        fh.write(garbage)
    after = before[:pos] + garbage + before[pos + n:]
    if after == before:
        return data, ci, "same"
    if filt == "none":
        return data, ci, "undetectable"
    if filt == "fletcher32" and after[-4:] == before[-4:] and _fletcher_sums(after[:-4]) == _fletcher_sums(
            before[:-4]):
        return data, ci, "undetectable"
    return data, ci, "detectable"


def test_damaged_hdf5_chunks_are_skipped_and_counted_or_raise_naming_the_rows(tmp_path: Path) -> None:
    rng = random.Random(22)
    outcomes = []
    for case in range(36):
        filt = ("gzip", "fletcher32", "none")[case % 3]
        batch = 5 if case % 4 == 3 else None
        path = tmp_path / f"case{case}.h5"
        data, ci, outcome = _damaged_h5(path, rng, filt)
        outcomes.append(outcome)
        lo, hi = ci * CHUNK, (ci + 1) * CHUNK
        what = f"case {case} ({filt}, chunk {ci}, batch_size={batch}, {outcome})"
        got, dropped = _within(partial(_skipping, HDF5Dataset(path, "x", batch_size=batch)), what)
        rows = np.concatenate(got) if batch else np.array(got, dtype=np.int64)
        keep = np.r_[0:lo, hi:N]
        if outcome == "detectable":
            np.testing.assert_array_equal(rows, data[keep], err_msg=what)
            assert dropped == (CHUNK // batch if batch else CHUNK), what
            with pytest.raises(DataLossError, match=rf"rows {lo}\.\.{lo + (batch or CHUNK)} of \['x'\] in "
                                                    rf"{re.escape(str(path))}"):
                _within(partial(_read_all, HDF5Dataset(path, "x", batch_size=batch)), what)
        elif outcome == "same":
            np.testing.assert_array_equal(rows, data, err_msg=what)
            assert dropped == 0, what
        else:  # no checksum to catch it: every row comes back, the rows outside the chunk exact
            assert len(rows) == N and dropped == 0, what
            np.testing.assert_array_equal(rows[keep], data[keep], err_msg=what)
    assert outcomes.count("detectable") >= 20  # the loop does test detection, not only the blind spots


def test_fletcher32_damage_is_caught_unless_the_checksum_collides(tmp_path: Path) -> None:
    """A flipped bit in a fletcher32 chunk raises, naming file, dataset and rows; a word 0x0000 -> 0xFFFF
    is a Fletcher-32 collision (one's-complement sums) that no reader can see: the docstring says so."""
    data = np.arange(N, dtype=np.int64)
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        info = f.create_dataset("x", data=data, chunks=(CHUNK,), fletcher32=True).id.get_chunk_info(2)
    raw = bytearray(path.read_bytes())
    raw[info.byte_offset + 3 * 8] ^= 0x01  # row 23's low byte
    path.write_bytes(bytes(raw))
    with pytest.raises(DataLossError, match=rf"rows 20\.\.30 of \['x'\] in {re.escape(str(path))}"):
        _within(partial(_read_all, HDF5Dataset(path, "x")), "fletcher32 bit flip")
    got, dropped = _within(partial(_skipping, HDF5Dataset(path, "x")), "fletcher32 bit flip, skipping")
    assert dropped == CHUNK and np.array_equal(np.array(got), np.r_[0:20, 30:N])
    assert "Fletcher-32" in (HDF5Dataset.__doc__ or "")


def test_a_damaged_chunk_loses_only_its_rows_when_blocks_are_cut_across_chunks(tmp_path: Path) -> None:
    """Under a budget that cuts row-mode blocks below the chunk length (15 rows of 64 KiB; chunks of 16), a
    block starts in one chunk and ends in the next: a damaged chunk must lose its own 16 rows, not the good
    rows its blocks share with the neighbours (sweep seed 500: the next chunk's first rows were lost)."""
    n, chunk, row = 64, 16, 1 << 16
    data = np.repeat((np.arange(n) % 251).astype(np.uint8)[:, None], row, axis=1)
    path = tmp_path / "cut.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=data, chunks=(chunk, row), compression="gzip")
        infos = [d.id.get_chunk_info(ci) for ci in (0, 2)]
    raw = bytearray(path.read_bytes())
    for info in infos:
        raw[info.byte_offset + info.size // 2: info.byte_offset + info.size // 2 + 16] = b"\xa5" * 16
    path.write_bytes(bytes(raw))
    ds = HDF5Dataset(path, "x").with_options(hr.Options(memory_budget=15 * row * 16))
    got, dropped = _within(partial(_skipping, ds), "blocks cut across chunks")
    assert [int(r[0]) for r in got] == [*range(16, 32), *range(48, 64)] and dropped == 2 * chunk


def _jpeg(seed: int) -> bytes:
    from PIL import Image

    arr = np.random.default_rng(seed).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(arr).save(out, "JPEG", quality=85)
    return out.getvalue()


def _corrupt(good: bytes, rng: random.Random, case: int) -> bytes:
    data = bytearray(good)
    kind = case % 3
    if kind == 0:  # truncated anywhere, header included
        return bytes(data[:rng.randrange(0, len(good))])
    if kind == 1:  # bit flips
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        return bytes(data)
    i = rng.randrange(len(data))  # a run of garbage in the body
    data[i:i + rng.randint(1, 200)] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
    return bytes(data)


def test_corrupt_jpegs_in_image_folder_are_skipped_and_counted(tmp_path: Path) -> None:
    rng = random.Random(8)
    good = _jpeg(0)
    size = (12, 16)
    want = hr.image.decode_and_resize(good, size)
    for case in range(24):
        root = tmp_path / f"case{case}"
        (root / "a").mkdir(parents=True)
        bad = _corrupt(good, rng, case)
        for i in range(4):
            (root / "a" / f"{i}.jpg").write_bytes(bad if i == 2 else good)
        try:
            hr.image.decode_and_resize(bad, size, name="bad")
            decodable = True
        except ImageDecodeError:
            decodable = False
        what = f"case {case} ({len(bad)} of {len(good)} bytes)"
        ds = hr.io.image_folder(root, image_size=size, shuffle=False, num_parallel_calls=2)
        got, dropped = _within(partial(_skipping, ds), what)
        assert dropped == (0 if decodable else 1), what
        assert len(got) == (4 if decodable else 3), what
        for j, (img, label) in enumerate(got):
            if decodable and j == 2:
                continue
            np.testing.assert_array_equal(img, want, err_msg=what)
            assert label == 0
        if not decodable:
            with pytest.raises(ImageDecodeError, match=re.escape(str(root / "a" / "2.jpg"))):
                _within(partial(_read_all, ds), what)


@pytest.mark.parametrize("batch_size", [None, 30])
def test_damaged_parquet_row_group_is_skipped_and_its_rows_counted(tmp_path: Path, batch_size: int | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "d.parquet"
    data = np.arange(300, dtype=np.int64) * 7919 % 10007
    pq.write_table(pa.table({"x": data}), path, row_group_size=100, compression="gzip")
    page = pq.ParquetFile(path).metadata.row_group(1).column(0).data_page_offset
    raw = bytearray(path.read_bytes())
    raw[page + 30:page + 60] = b"\xab" * 30
    path.write_bytes(bytes(raw))
    ds = hr.io.ParquetDataset(path, batch_size=batch_size)
    with pytest.raises(DataLossError, match=rf"{re.escape(str(path))} \(row group 1\)"):
        _within(partial(_read_all, ds), "parquet")
    got, dropped = _within(partial(_skipping, ds), "parquet, skipping")
    rows = np.concatenate([b["x"] for b in got]) if batch_size else np.array([r["x"] for r in got])
    np.testing.assert_array_equal(rows, np.r_[data[:100], data[200:]])
    assert dropped == (4 if batch_size else 100)  # the row group's 100 rows: 4 batches of <= 30


class _Stuck(hr.DatasetIterator):
    """A user source that raises the same error forever without moving past it."""

    def __next__(self) -> Any:
        raise DataLossError("stuck.bin: bad record at offset 8", path="stuck.bin", offset=8)


def test_a_source_that_repeats_the_same_error_stops_ignore_errors_instead_of_spinning() -> None:
    ds = hr.Dataset.from_source(_Stuck)
    with pytest.raises(hr.TooManyErrorsError, match=r"same error .* times in a row.*stuck\.bin"):
        _within(partial(_skipping, ds), "stuck source")
