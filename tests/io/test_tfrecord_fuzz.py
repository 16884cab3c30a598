"""Fuzz (hypothesis): over random and mutated files the reader only yields correct records or raises
headrace's errors; never another exception, never a hang (each example runs under a watchdog)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tfrecord_helpers import write_records

import headrace as hr
from headrace.io import TFRecordDataset
from headrace.io import example as ex

EXAMPLE_TIMEOUT_S = 5.0
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


class Hang(BaseException):  # BaseException: the code under test cannot swallow it
    pass


@contextmanager
def watchdog(seconds: float = EXAMPLE_TIMEOUT_S) -> Iterator[None]:
    """Fail the example (instead of hanging the suite) if it runs longer than ``seconds``."""
    if threading.current_thread() is not threading.main_thread():  # pragma: no cover - pytest runs in main
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"example ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def read_all(path: str, compression: str | None, policy: Callable[[TFRecordDataset], Any]) -> list[bytes]:
    """Every record the reader yields, continuing after each DataLossError (as ignore_errors does)."""
    out: list[bytes] = []
    with watchdog(), iter(policy(TFRecordDataset(path, compression))) as it:
        while True:
            try:
                out.append(next(it))
            except hr.DataLossError as e:
                assert e.path == path and e.offset is not None and e.reason
            except StopIteration:
                return out


def is_subsequence(xs: list[bytes], ys: list[bytes]) -> bool:
    it = iter(ys)
    return all(any(x == y for y in it) for x in xs)


records_st = st.lists(st.binary(max_size=300), max_size=12)
mutation_st = st.lists(st.tuples(st.sampled_from(["flip", "cut", "insert", "delete"]),
                                 st.integers(min_value=0, max_value=10**6), st.binary(min_size=1, max_size=8)),
                       min_size=1, max_size=4)


def mutate(data: bytes, mutations: list[tuple[str, int, bytes]]) -> bytes:
    buf = bytearray(data)
    for op, at, junk in mutations:
        i = at % (len(buf) + 1)
        if op == "flip" and buf:
            buf[min(i, len(buf) - 1)] ^= junk[0] or 1
        elif op == "cut":
            del buf[i:]
        elif op == "insert":
            buf[i:i] = junk
        elif op == "delete":
            del buf[i:i + len(junk)]
    return bytes(buf)


@FUZZ
@given(records=records_st, compression=st.sampled_from([None, "GZIP", "ZLIB"]))
def test_random_records_round_trip(tmp_path_factory, records, compression):
    path = write_records(tmp_path_factory.mktemp("rt") / "f", records, compression)
    assert read_all(path, compression, lambda ds: ds) == records


@FUZZ
@given(records=records_st, mutations=mutation_st, compression=st.sampled_from([None, "GZIP", "ZLIB"]))
def test_mutated_files_yield_only_correct_records_or_data_loss(tmp_path_factory, records, mutations, compression):
    directory = tmp_path_factory.mktemp("mut")
    clean = Path(write_records(directory / "clean", records, compression)).read_bytes()
    bad = directory / "bad"
    bad.write_bytes(mutate(clean, mutations))
    got = read_all(str(bad), compression, lambda ds: ds)
    assert is_subsequence(got, records), "the reader returned a record that was never written"
    skipped = read_all(str(bad), compression, lambda ds: ds.ignore_errors())
    assert skipped == got


@FUZZ
@given(data=st.binary(max_size=400), compression=st.sampled_from([None, "GZIP", "ZLIB"]))
def test_arbitrary_bytes_never_crash_the_reader(tmp_path_factory, data, compression):
    path = tmp_path_factory.mktemp("junk") / "junk"
    path.write_bytes(data)
    got = read_all(str(path), compression, lambda ds: ds)
    assert all(type(r) is bytes for r in got)


SPEC = {"a": ex.FixedLenFeature([], "int64", default_value=0), "b": ex.VarLenFeature("float32"),
        "c": ex.FixedLenFeature([], "string", default_value=b"")}


@FUZZ
@given(data=st.binary(max_size=200))
def test_parse_of_arbitrary_bytes_raises_only_value_error(data):
    with watchdog():
        try:
            single = ex.parse_single_example(data, SPEC)
        except ValueError:
            single = None
        try:
            batch = ex.parse_example([data], SPEC)
        except ValueError:
            batch = None
    assert (single is None) == (batch is None)
    if single is not None:
        assert batch["a"].tolist() == [single["a"]] and batch["b"].values.tolist() == single["b"].tolist()


@FUZZ
@given(ints=st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=5),
       floats=st.lists(st.floats(width=32, allow_nan=False), max_size=5), blob=st.binary(max_size=50))
def test_encode_parse_round_trip(ints, floats, blob):
    data = ex.encode({"i": ex.Int64List(ints), "f": ex.FloatList(floats), "s": blob})
    got = ex.parse_single_example(data, {"i": ex.VarLenFeature("int64"), "f": ex.VarLenFeature("float32"),
                                         "s": ex.FixedLenFeature([], "string")})
    assert got["i"].tolist() == ints and got["f"].tolist() == floats and got["s"] == blob


def test_watchdog_catches_a_hang():
    import time

    with pytest.raises(Hang), watchdog(0.2):
        time.sleep(5)
