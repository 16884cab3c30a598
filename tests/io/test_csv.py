"""``CsvDataset``: state round trips (plain, GZIP, many chunks, bad rows, restores of restores), bad records as
one-line errors naming file / line / column / value, ``ignore_errors`` keeping the good rows of a bad chunk, the
record larger than the budget, runs into ``batch`` and ``map``, argument checks. (tf.data's results:
``test_csv_differential.py``.)"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import headrace as hr
from tests.io.io_reader_checks import assert_state_roundtrip, assert_streams_equal

pytestmark = pytest.mark.filterwarnings("ignore::headrace.IgnoredErrorsWarning")
DEFAULTS = [np.int32, [0.5], [b"-"], np.int64]


def _rows(n: int, bad: set[int] = frozenset(), quoted: bool = True) -> tuple[bytes, list[tuple]]:
    lines, want = [], []
    for i in range(n):
        tag = f'"t,{i}"' if quoted and i % 7 == 0 else f"t{i}"
        score = "" if i % 5 == 0 else f"{i / 4}"
        if i in bad:
            lines.append(f"{i},{score},{tag},notanumber")
            continue
        lines.append(f"{i},{score},{tag},{i * 1000}")
        value = f"t,{i}" if quoted and i % 7 == 0 else f"t{i}"
        want.append((np.int32(i), np.float32(0.5 if i % 5 == 0 else i / 4), value.encode(), np.int64(i * 1000)))
    return ("\n".join(lines) + "\n").encode(), want


def _write(path: Path, data: bytes, gz: bool = False) -> str:
    path.write_bytes(gzip.compress(data) if gz else data)
    return str(path)


def test_rows_values_and_spec(tmp_path: Path) -> None:
    data, want = _rows(50)
    ds = hr.io.CsvDataset(_write(tmp_path / "a.csv", data), DEFAULTS)
    assert [s.dtype for s in ds.element_spec] == [np.int32, np.float32, object, np.int64]
    assert_streams_equal(list(ds), want)
    batches = list(ds.batch(16))  # rows reach batch in runs (fill)
    assert [len(b[0]) for b in batches] == [16, 16, 16, 2]
    assert batches[0][2].dtype == object and batches[0][0].dtype == np.int32
    assert [tuple(x) for x in zip(*[np.concatenate([b[k] for b in batches]) for k in range(4)])] == want
    mapped = list(ds.map(lambda a, b, c, d: a + 1).batch(8))  # through map's fill (elements_ready)
    assert np.concatenate(mapped).tolist() == [int(r[0]) + 1 for r in want]


@pytest.mark.parametrize("gz", [False, True])
def test_state_roundtrip_many_chunks(tmp_path: Path, gz: bool) -> None:
    data, want = _rows(700, bad={5, 400, 699})
    files = [_write(tmp_path / f"a{i}.csv{'.gz' if gz else ''}", data, gz) for i in range(2)]
    ds = (hr.io.CsvDataset(files, DEFAULTS, compression_type="GZIP" if gz else None).ignore_errors()
          .with_options(hr.Options(memory_budget=256 << 10)))  # 8 KiB chunks: 3 per file
    n = assert_state_roundtrip(ds, [0, 1, 5, 399, 696, 697, 1100, 1394])
    assert n == 2 * len(want)
    assert_state_roundtrip(ds.batch(100), [0, 7, 13, 14])


def test_restore_of_restores(tmp_path: Path) -> None:
    data, want = _rows(1200, bad={10, 11, 900})
    ds = hr.io.CsvDataset([_write(tmp_path / "a.csv", data)], DEFAULTS).ignore_errors().with_options(
        hr.Options(memory_budget=1 << 20))
    got, state = [], None
    for take in (7, 300, 1, 600, 5000):
        with iter(ds) as it:
            if state is not None:
                it.set_state(json.loads(state))
            for _ in range(take):
                x = next(it, None)
                if x is None:
                    break
                got.append(x)
            state = json.dumps(it.get_state())
            assert len(state) < 2000  # positions, not data
    assert_streams_equal(got, want)


def test_bad_record_errors_name_file_line_column_value(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.csv", b'1,2.0,a,3\n2,x,b,4\n3,1.0,c\n"4,1.0,d,5\n')
    it = iter(hr.io.CsvDataset(path, DEFAULTS))
    assert next(it)[0] == 1
    with pytest.raises(hr.RecordParseError) as e:
        next(it)
    msg = str(e.value)
    assert "\n" not in msg and path in msg and "line 2" in msg and "column 1" in msg and "b'x'" in msg
    assert "float32" in msg and "ignore_errors" in msg
    with pytest.raises(hr.RecordParseError, match=r"line 3 .*3 of the 4 columns"):
        next(it)
    with pytest.raises(hr.RecordParseError, match=r"line 4 .*not closed before the end of the file"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def test_required_field_missing(tmp_path: Path) -> None:
    path = _write(tmp_path / "req.csv", b"1,,a,3\n")
    with pytest.raises(hr.RecordParseError, match=r"req.csv line 1 .*column 1 is required but the field is empty"):
        list(hr.io.CsvDataset(path, [np.int32, np.int32, bytes, np.int32], select_cols=None)
             .map(lambda *x: x))
    path2 = _write(tmp_path / "req2.csv", b",1\n")
    with pytest.raises(hr.RecordParseError, match="column 0 is required"):
        list(hr.io.CsvDataset(path2, [np.int32, np.int32]))


def test_ignore_errors_keeps_the_good_rows_of_a_bad_chunk(tmp_path: Path) -> None:
    bad = {3, 900, 901, 1800}
    data, want = _rows(2000, bad=bad)
    ds = hr.io.CsvDataset(_write(tmp_path / "a.csv", data), DEFAULTS).ignore_errors()
    with pytest.warns(hr.IgnoredErrorsWarning, match="dropped 4 of 2000"):
        got = list(ds)
    assert_streams_equal(got, want)


def test_header_error_and_empty_file(tmp_path: Path) -> None:
    empty = _write(tmp_path / "empty.csv", b"")
    good = _write(tmp_path / "good.csv", b"h1,h2\n1,2\n")
    ds = hr.io.CsvDataset([empty, good], [np.int32, np.int32], header=True)
    it = iter(ds)
    with pytest.raises(ValueError, match=r"header line of .*empty.csv: the file is empty"):
        next(it)
    assert next(it) == (1, 2)
    assert list(hr.io.CsvDataset([empty, good], [np.int32, np.int32], header=True).ignore_errors()) == [(1, 2)]


def test_record_larger_than_the_budget_is_refused(tmp_path: Path) -> None:
    big = _write(tmp_path / "big.csv", b"1,2\n" + b"3," + b"9" * (3 << 20) + b"\n5,6\n")
    after = _write(tmp_path / "after.csv", b"7,8\n")
    ds = hr.io.CsvDataset([big, after], [np.int32, [b""]]).with_options(hr.Options(memory_budget=4 << 20))
    it = iter(ds)
    assert next(it)[0] == 1
    with pytest.raises(hr.MemoryBudgetError) as e:
        next(it)
    msg = str(e.value)
    assert "\n" not in msg and "line 2" in msg and "big.csv" in msg and "memory_budget" in msg
    assert next(it) == (7, b"8")  # the rest of that file is skipped, the next one read


def test_select_and_exclude_cols(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.csv", b"1,a,2.5,x\n3,b,4.5,y\n")
    assert list(hr.io.CsvDataset(path, [np.int64, np.float64], select_cols=[0, 2])) == [(1, 2.5), (3, 4.5)]
    assert list(hr.io.CsvDataset(path, [bytes, bytes], exclude_cols=[0, 2])) == [(b"a", b"x"), (b"b", b"y")]


@pytest.mark.parametrize("kwargs, match", [
    ({"select_cols": [1, 0]}, "strictly increasing"),
    ({"select_cols": [0], "exclude_cols": [1]}, "not both"),
    ({"field_delim": "::"}, "one byte"),
    ({"compression_type": "BZIP2"}, "not supported"),
    ({"buffer_size": 0}, "buffer_size"),
])
def test_bad_arguments(tmp_path: Path, kwargs: dict, match: str) -> None:
    path = _write(tmp_path / "x.csv", b"1,2\n")
    with pytest.raises((ValueError, TypeError), match=match):
        hr.io.CsvDataset(path, [np.int32, np.int32] if "select_cols" not in kwargs else [np.int32], **kwargs)


def test_bad_record_defaults(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.csv", b"1\n")
    with pytest.raises(ValueError, match="float16 is not a CSV column type"):
        hr.io.CsvDataset(path, [np.float16])
    with pytest.raises(ValueError, match="one default per column"):
        hr.io.CsvDataset(path, [[1, 2]])
    ds = hr.io.CsvDataset(path, [[7]])
    assert ds.element_spec[0].dtype == np.int32 and list(ds) == [(1,)]


def _outcomes(ds: hr.Dataset) -> list:
    out = []
    with iter(ds) as it:
        while True:
            try:
                out.append(next(it))
            except StopIteration:
                return out
            except ValueError as e:
                out.append(("error", str(e)))


def test_batch_of_column_runs_equals_the_row_path(tmp_path: Path) -> None:
    """``batch`` right after the reader concatenates column runs (``runs.ColumnRuns``); across a bad record,
    blocks and the end it gives what the row-by-row path gives (a map in between), state included."""
    data, _ = _rows(700, bad={5, 333, 699})
    ds = hr.io.CsvDataset(_write(tmp_path / "a.csv", data), DEFAULTS).with_options(
        hr.Options(memory_budget=256 << 10))
    columnar, rows = _outcomes(ds.batch(64)), _outcomes(ds.map(lambda *x: x).batch(64))
    assert len(columnar) == len(rows) == 11 + 3
    errors = [i for i, a in enumerate(columnar) if isinstance(a[0], str)]
    assert errors == [i for i, b in enumerate(rows) if isinstance(b[0], str)] and len(errors) == 3
    assert [columnar[i] for i in errors] == [rows[i] for i in errors]
    keep = [i for i in range(len(rows)) if i not in errors]
    assert_streams_equal([columnar[i] for i in keep], [rows[i] for i in keep])
    assert_state_roundtrip(ds.ignore_errors().batch(64), [0, 1, 5, 10])
    clean, _ = _rows(700)
    runs = hr.io.CsvDataset(_write(tmp_path / "c.csv", clean), DEFAULTS).with_options(
        hr.Options(memory_budget=256 << 10)).batch(64)  # the column-run path, restored between batches
    assert_state_roundtrip(runs, [0, 1, 5, 10, 11])


def test_make_csv_dataset_state_roundtrip(tmp_path: Path) -> None:
    files = []
    for j in range(3):
        rows = "".join(f"{j * 100 + i},{i / 8},w{i}\n" for i in range(40))
        files.append(_write(tmp_path / f"m{j}.csv", f"a,b,label\n{rows}".encode()))
    ds = hr.io.make_csv_dataset(str(tmp_path / "m*.csv"), batch_size=7, label_name="label", num_epochs=2,
                                shuffle=False, num_parallel_reads=2)
    first = next(iter(ds))
    assert list(first[0]) == ["a", "b"] and first[0]["a"].dtype == np.int32 and first[1].dtype == object
    n = assert_state_roundtrip(ds, [0, 3, 17, 34])
    assert n == 2 * 120 // 7 + 1  # 240 rows, the last batch partial (num_epochs is not None)


def test_make_csv_dataset_inference_errors_name_the_file_and_line(tmp_path: Path) -> None:
    long = tmp_path / "long.csv"
    long.write_text("a,b\n1," + "y" * 200_000 + "\n2,z\n")
    with pytest.raises(ValueError, match=r"line 2 of .*long\.csv.*field larger than field limit.*column_defaults"):
        hr.io.make_csv_dataset(str(long), batch_size=2, num_epochs=1, shuffle=False)
    got = hr.io.make_csv_dataset(str(long), batch_size=2, num_epochs=1, shuffle=False, column_names=["a", "b"],
                                 column_defaults=[[0], [b""]])
    assert [len(b) for b in next(iter(got))["b"]] == [200_000, 1]
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"a,caf\xe9\n1,2\n")
    with pytest.raises(ValueError, match=r"latin\.csv has bytes that are not utf-8 text at line 1.*encoding="):
        hr.io.make_csv_dataset(str(latin), batch_size=2, num_epochs=1)
    assert list(hr.io.make_csv_dataset(str(latin), batch_size=2, num_epochs=1, encoding="latin-1"))
