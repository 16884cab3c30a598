"""Sources without Beam: every row once with its source ID, bad rows reported with location and reason."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from headrace.convert.schema import INT64, STRING, TEXT
from headrace.convert.sources import Rejected, detect_format, open_source

from .convert_helpers import CSV_IDS, csv_file, image_folder, jsonl_file


def _read_all(source):
    rows, rejected = {}, []
    for unit in source.units():
        for item in source.read(unit):
            if isinstance(item, Rejected):
                rejected.append(item)
            else:
                assert item[0] not in rows, f"duplicate source id {item[0]}"
                rows[item[0]] = item[1]
    return rows, rejected


def test_csv_rows_line_numbers_and_malformed_line(tmp_path):
    src = open_source(str(csv_file(tmp_path / "t.csv")))
    assert src.kind == "csv"
    rows, rejected = _read_all(src)
    assert sorted(rows) == sorted(f"t.csv:{n}" for n in CSV_IDS)
    assert rows["t.csv:6"]["name"] == (TEXT, ["two\nlines"])
    assert "tags" not in rows["t.csv:3"]  # an empty cell is a missing value
    assert [r.id for r in rejected] == ["t.csv:5"]
    assert rejected[0].location.endswith("t.csv:5") and "2 fields but the header has 4" in rejected[0].reason


@pytest.mark.parametrize("ext, compress", [(".csv.gz", "gzip"), (".csv.zz", "zlib")])
def test_compressed_csv_reads_as_the_plain_file(tmp_path, ext, compress):
    import gzip
    import zlib

    plain = csv_file(tmp_path / "t.csv").read_bytes()
    packed = gzip.compress(plain) if compress == "gzip" else zlib.compress(plain)
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / f"t{ext}").write_bytes(packed)
    src = open_source(str(tmp_path / "z"))
    assert src.kind == "csv" and detect_format(str(tmp_path / "z")) == "csv"
    rows, rejected = _read_all(src)
    want_rows, want_rejected = _read_all(open_source(str(tmp_path / "t.csv")))
    assert {k.replace(ext, ".csv"): v for k, v in rows.items()} == want_rows
    assert [r.reason for r in rejected] == [r.reason for r in want_rejected]


def test_csv_bad_header_and_bad_encoding_are_reported(tmp_path):
    (tmp_path / "h.csv").write_text("a,,a\n1,2,3\n")
    rows, rejected = _read_all(open_source(str(tmp_path / "h.csv")))
    assert rows == {} and "empty or repeated column names" in rejected[0].reason
    (tmp_path / "h.csv").write_bytes(b"a,b\n1,2\n\xff\xfe,3\n")
    rows, rejected = _read_all(open_source(str(tmp_path / "h.csv")))
    assert list(rows) == ["h.csv:2"] and "UnicodeDecodeError" in rejected[0].reason


def test_jsonl_rows_and_rejections(tmp_path):
    rows, rejected = _read_all(open_source(str(jsonl_file(tmp_path / "d.jsonl"))))
    assert sorted(rows) == ["d.jsonl:1", "d.jsonl:2", "d.jsonl:7"]
    assert "name" not in rows["d.jsonl:2"]  # null is missing
    assert rows["d.jsonl:2"]["x"] == (INT64, [3, 4])
    reasons = {r.id: r.reason for r in rejected}
    assert set(reasons) == {"d.jsonl:3", "d.jsonl:5", "d.jsonl:6"}
    assert "JSONDecodeError" in reasons["d.jsonl:3"] and "nested objects" in reasons["d.jsonl:5"]
    assert "not an object" in reasons["d.jsonl:6"]


def test_parquet_row_groups_nulls_lists_and_timestamps(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({"k": pa.array([1, 2, None, 4, 5]), "v": pa.array([[1.0], [], [2.0, 3.0], None, [4.0]]),
                      "t": pa.array(np.array([0, 1, 2, 3, 4], dtype="datetime64[s]")),
                      "s": pa.array(["a", "b", "c", "d", None]).dictionary_encode()})
    pq.write_table(table, tmp_path / "p.parquet", row_group_size=2)
    src = open_source(str(tmp_path))
    assert src.kind == "parquet" and src.units() == [("p.parquet", 0, 0), ("p.parquet", 1, 2), ("p.parquet", 2, 4)]
    rows, rejected = _read_all(src)
    assert rejected == [] and sorted(rows) == [f"p.parquet:{i}" for i in range(5)]
    assert "k" not in rows["p.parquet:2"] and "v" not in rows["p.parquet:3"] and "s" not in rows["p.parquet:4"]
    assert rows["p.parquet:2"]["v"] == ("float32", [2.0, 3.0]) and rows["p.parquet:1"]["v"] == (None, [])
    # Parquet stores second timestamps in milliseconds: the int64 is in the unit the file holds
    assert rows["p.parquet:3"]["t"] == (INT64, [3000]) and rows["p.parquet:3"]["s"] == (STRING, [b"d"])


def test_tfrecord_source_rejects_non_examples_and_stops_at_corruption(tmp_path):
    from headrace.io.example import encode
    from headrace.io.tfrecord_writer import TFRecordWriter

    with TFRecordWriter(str(tmp_path / "a.tfrecord")) as w:
        for i in range(4):
            w.write(encode({"i": i, "f": [0.5 * i, 1.0]}) if i != 1 else b"\x07not an example")
    data = bytearray((tmp_path / "a.tfrecord").read_bytes())
    (tmp_path / "b.tfrecord").write_bytes(bytes(data))
    data[-3] ^= 0xFF  # corrupt the data CRC of the last record of b
    (tmp_path / "b.tfrecord").write_bytes(bytes(data))
    rows, rejected = _read_all(open_source(str(tmp_path)))
    assert sorted(rows) == ["a.tfrecord:0", "a.tfrecord:2", "a.tfrecord:3", "b.tfrecord:0", "b.tfrecord:2"]
    assert rows["a.tfrecord:3"] == {"f": ("float32", [1.5, 1.0]), "i": (INT64, [3])}
    reasons = {r.id: r for r in rejected}
    assert set(reasons) == {"a.tfrecord:1", "b.tfrecord:1", "b.tfrecord:3"}
    assert "not a serialized" in reasons["a.tfrecord:1"].reason
    assert "byte" in reasons["b.tfrecord:3"].location and "not read" in reasons["b.tfrecord:3"].reason


def test_image_folder_source_rows_and_broken_image(tmp_path):
    good = image_folder(tmp_path / "imgs", n=14)
    src = open_source(str(tmp_path / "imgs"))
    assert src.kind == "image_folder"
    units = src.units()
    shipped = pickle.loads(pickle.dumps(src))  # what a worker gets: settings, not the file list
    assert shipped._files is None and len(pickle.dumps(src)) < 1000
    assert [it[0] for u in units for it in shipped.read(u) if not isinstance(it, Rejected)] == [
        it[0] for u in units for it in src.read(u) if not isinstance(it, Rejected)]
    rows, rejected = _read_all(src)
    assert set(rows) == set(good)
    assert [r.id for r in rejected] == ["camera/broken.jpg"] and "ImageDecodeError" in rejected[0].reason
    row = rows["coins/extra.png"]
    assert row["image/format"] == (STRING, [b"png"]) and row["image/height"] == (INT64, [20])
    assert row["image/class/label"] == (INT64, [good["coins/extra.png"]])
    assert row["image/encoded"][1][0] == (tmp_path / "imgs" / "coins" / "extra.png").read_bytes()


def test_image_folder_resize_reencodes_jpeg(tmp_path):
    from headrace.image import decode

    image_folder(tmp_path / "imgs", n=12, broken=False)
    rows, _ = _read_all(open_source(str(tmp_path / "imgs"), image_size=(20, 10), quality=90))
    for row in rows.values():
        assert row["image/format"] == (STRING, [b"jpeg"])
        assert decode(row["image/encoded"][1][0]).shape == (10, 20, 3)


def test_detection_and_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        detect_format(str(tmp_path / "nope"))
    (tmp_path / "x.dat").write_text("hi")  # (.txt is a text source)
    with pytest.raises(ValueError, match="cannot tell the format"):
        detect_format(str(tmp_path))
    csv_file(tmp_path / "a.csv")
    jsonl_file(tmp_path / "b.jsonl")
    with pytest.raises(ValueError, match="several formats"):
        detect_format(str(tmp_path))
    assert detect_format(str(tmp_path / "*.csv")) == "csv"
    with pytest.raises(ValueError, match="image_size cannot be used with a csv source"):
        open_source(str(tmp_path / "a.csv"), image_size=(8, 8))
    with pytest.raises(ValueError, match="source_format='xml'"):
        open_source(str(tmp_path / "a.csv"), "xml")
    assert Path(tmp_path / "a.csv").exists()
