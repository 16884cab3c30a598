"""``CsvDataset`` where reading goes wrong: a damaged compressed file (the records before the damage, one error,
then the next file), a state restored into a pipeline over other files, and a restore interrupted or closed
during its catch-up (nothing half-moved is read)."""

from __future__ import annotations

import gzip
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest

import headrace as hr
from headrace._budget.ledger import MemoryBudget
from headrace._files import streams as _streams
from headrace._memory import Cancelled, process_budget
from headrace.io import _text_reader
from headrace.io import csv as csv_module

_DEFAULTS = [[0], [b""]]


def _rows(n: int) -> bytes:
    return b"".join(b"%d,v%d\n" % (i, i) for i in range(n))


def _damaged_files(tmp_path: Path, nrows: int) -> tuple[list[str], int]:
    """A GZIP file cut in the middle and a good one after it; the whole records the cut file still holds."""
    gz = gzip.compress(_rows(nrows))
    cut = gz[: len(gz) // 2]
    (tmp_path / "cut.csv.gz").write_bytes(cut)
    (tmp_path / "next.csv.gz").write_bytes(gzip.compress(b"-1,next\n"))
    whole = zlib.decompressobj(31).decompress(cut).count(b"\n")
    assert 0 < whole < nrows
    return [str(tmp_path / "cut.csv.gz"), str(tmp_path / "next.csv.gz")], whole


@pytest.mark.parametrize("nrows", [5_000, 250_000])  # one chunk; several (the cut in the third MiB)
def test_damaged_gzip_yields_the_records_before_it_one_error_then_the_next_file(tmp_path: Path, nrows: int) -> None:
    files, whole = _damaged_files(tmp_path, nrows)
    ds = hr.io.CsvDataset(files, _DEFAULTS, compression_type="GZIP")
    with iter(ds) as it:
        got = []
        with pytest.raises(hr.DataLossError, match=r"cut\.csv\.gz.*uncompressed byte"):
            while True:
                got.append(int(next(it)[0]))
        assert got == list(range(whole))
        assert [int(r[0]) for r in it] == [-1]
    assert [int(r[0]) for r in ds.ignore_errors()] == [*range(whole), -1]
    assert [int(r[0][-1]) for r in ds.ignore_errors().batch(1000)][-1] == -1  # (the batch path: fill_columns)


def test_gzip_on_a_file_that_is_not_compressed(tmp_path: Path) -> None:
    (tmp_path / "plain.csv").write_bytes(_rows(10))
    (tmp_path / "next.csv.gz").write_bytes(gzip.compress(b"-1,next\n"))
    ds = hr.io.CsvDataset([str(tmp_path / "plain.csv"), str(tmp_path / "next.csv.gz")], _DEFAULTS,
                          compression_type="GZIP")
    with iter(ds) as it:
        with pytest.raises(hr.DataLossError, match=r"plain\.csv"):
            next(it)
        assert [int(r[0]) for r in it] == [-1]


def test_state_of_other_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x1.csv").write_bytes(b"1,a\n2,b\n3,c\n")
    (tmp_path / "x2.csv").write_bytes(b"10,a\n20,b\n30,c\n40,d\n")
    with iter(hr.io.CsvDataset(str(tmp_path / "x1.csv"), _DEFAULTS)) as it:
        next(it)
        state = it.get_state()
    with iter(hr.io.CsvDataset(str(tmp_path / "x2.csv"), _DEFAULTS)) as it, pytest.raises(
            hr.StateError, match=r"x2\.csv.*x1\.csv"):
        it.set_state(state)
    with iter(hr.io.CsvDataset(str(tmp_path / "x1.csv"), _DEFAULTS)) as it:
        it.set_state(state)
        assert [int(r[0]) for r in it] == [2, 3]


class _Stream:
    """A stream of ``open_input`` whose first ``read`` calls ``on_read`` (during a restore's catch-up); ``reads``
    counts the calls of ``read``."""

    reads = 0

    def __init__(self, inner: Any, on_read: Any) -> None:
        self._inner, self._on_read = inner, on_read

    def seekable(self) -> bool:
        return False

    def read(self, n: int = -1) -> bytes:
        _Stream.reads += 1
        hook, self._on_read = self._on_read, None
        if hook is not None:
            hook()
        return self._inner.read(n)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _restore_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_read: Any, text: bool = False
                  ) -> tuple[Any, Any]:
    """An iterator, a state 120,000 rows into a GZIP file (its second chunk), and ``on_read`` armed for the
    restore's first read (``text``: of a ``TextLineDataset``, whose catch-up shares ``seek_input``)."""
    path = tmp_path / "rows.csv.gz"
    path.write_bytes(gzip.compress(_rows(150_000)))
    ds = (hr.io.TextLineDataset(str(path), compression_type="GZIP") if text
          else hr.io.CsvDataset(str(path), _DEFAULTS, compression_type="GZIP"))
    with iter(ds) as it:
        for _ in range(120_000):
            next(it)
        state = it.get_state()
    assert state["pipeline"]["offset"] > 4 * 4096
    monkeypatch.setattr(_streams, "_SKIP_CHUNK", 4096)
    real = csv_module.open_input
    for module in (csv_module, _text_reader):
        monkeypatch.setattr(module, "open_input", lambda *a: _Stream(real(*a), on_read))
    return iter(ds), state


def test_interrupt_during_the_restore_catch_up_reads_nothing_half_moved(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    it, state = _restore_with(tmp_path, monkeypatch, interrupt)
    with pytest.raises(KeyboardInterrupt):
        it.set_state(state)
        next(it)
    with pytest.raises(hr.IteratorClosedError):  # (never a row read from a stream left half way)
        next(it)


def _close_during_the_catch_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: bool) -> None:
    """A restore whose catch-up meets a ``close()`` from another thread: ``next()`` says the iterator is closed."""
    holder: list[Any] = []

    def close_from_another_thread() -> None:
        t = threading.Thread(target=holder[0].close)
        t.start()
        t.join(30)

    it, state = _restore_with(tmp_path, monkeypatch, close_from_another_thread, text)
    holder.append(it)
    with pytest.raises(hr.IteratorClosedError):
        it.set_state(state)
        next(it)


@pytest.mark.parametrize("text", [False, True])
def test_close_during_the_restore_catch_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: bool) -> None:
    monkeypatch.setattr(_Stream, "reads", 0)
    _close_during_the_catch_up(tmp_path, monkeypatch, text)
    assert _Stream.reads == 1  # the catch-up (hundreds of 4 KiB chunks) stopped at the chunk close() met


def test_restore_goes_on_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    it, state = _restore_with(tmp_path, monkeypatch, lambda: None)
    with it:
        it.set_state(state)
        assert it.get_state()["pipeline"] == state["pipeline"]  # (before the catch-up: the state as restored)
        assert [int(r[0]) for r in it] == list(range(120_000, 150_000))


def test_seek_input_stops_between_chunks(tmp_path: Path) -> None:
    path = tmp_path / "a.gz"
    path.write_bytes(gzip.compress(b"x" * 3 * _streams._SKIP_CHUNK))
    flag = threading.Event()
    flag.set()
    with _streams.open_input(str(path), "GZIP") as stream:
        with pytest.raises(Cancelled):
            _streams.seek_input(stream, 2 * _streams._SKIP_CHUNK, str(path), flag)
        assert stream.tell() == 0


class _Ledger:
    """Every charge and release of the budget's accounts, watched: a release (or charge) on an account that is
    closed already (its bytes were all given back when it closed) and an account's bytes below zero are noted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.late: list[str] = []
        self.negative: list[str] = []
        real_charge, real_credit = MemoryBudget.charge, MemoryBudget.credit

        def charge(budget: MemoryBudget, acc: Any, nbytes: int) -> None:
            if acc.closed:
                self.late.append(f"charge of {nbytes} to closed {acc.stage}")
            real_charge(budget, acc, nbytes)

        def credit(budget: MemoryBudget, acc: Any, nbytes: int) -> None:
            if acc.closed:
                self.late.append(f"release of {nbytes} from closed {acc.stage}")
            real_credit(budget, acc, nbytes)
            if acc.held_bytes < 0:
                self.negative.append(f"{acc.stage}: {acc.held_bytes}")

        monkeypatch.setattr(MemoryBudget, "charge", charge)
        monkeypatch.setattr(MemoryBudget, "credit", credit)

    def check(self) -> None:
        assert self.late == [] and self.negative == []


@pytest.mark.parametrize("text", [False, True])
def test_the_readers_accounts_are_given_back_once_across_damage_restore_and_close(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: bool) -> None:
    """Each charge of the reader's accounts is released exactly once: never after the account closed (close() from
    another thread during a restore's catch-up used to release the read's reservation after the close), never below
    zero; the process budget is back where it was once the iterators are closed."""
    ledger = _Ledger(monkeypatch)
    before = process_budget().total_bytes
    files, whole = _damaged_files(tmp_path, 250_000)
    ds = (hr.io.TextLineDataset(files, compression_type="GZIP") if text
          else hr.io.CsvDataset(files, _DEFAULTS, compression_type="GZIP"))
    assert len(list(ds.ignore_errors())) == whole + 1
    assert sum(len(b if text else b[0]) for b in ds.ignore_errors().batch(1000)) == whole + 1
    with iter(ds) as it:
        for _ in range(whole // 2):
            next(it)
        state = it.get_state()
    with iter(ds) as it:  # restored into the damaged file: the rest of its records, the error, the next file
        it.set_state(state)
        got = 0
        with pytest.raises(hr.DataLossError):
            while True:
                next(it)
                got += 1
        assert got == whole - whole // 2 and len(list(it)) == 1
    _close_during_the_catch_up(tmp_path, monkeypatch, text)
    ledger.check()
    assert process_budget().total_bytes == before
