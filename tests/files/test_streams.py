"""headrace._files.streams: the one opener of input files (uncompressed / GZIP / ZLIB / AUTO), the uncompressed
offset, seek-or-skip, and truncated or damaged compressed streams as DataLossError naming file and offset."""

from __future__ import annotations

import gzip
import zlib

import pytest

from headrace import DataLossError
from headrace._files.streams import buffer_bytes, normalize_compression, open_input, seek_input

DATA = bytes(range(256)) * 4000  # 1 MB


def _write(tmp_path, name, payload):
    p = tmp_path / name
    p.write_bytes(payload)
    return str(p)


@pytest.mark.parametrize("kind", ["", "GZIP", "ZLIB"])
def test_reads_decompressed_bytes_with_uncompressed_offset_and_seeks(tmp_path, kind):
    payload = {"": DATA, "GZIP": gzip.compress(DATA), "ZLIB": zlib.compress(DATA)}[kind]
    path = _write(tmp_path, "f.bin", payload)
    with open_input(path, kind or None, 4096) as f:
        assert f.read(1000) == DATA[:1000]
        assert f.tell() == 1000
        assert f.read() == DATA[1000:]
        assert f.tell() == len(DATA)
    with open_input(path, kind, 4096) as f:
        seek_input(f, 700_001, path)
        assert f.tell() == 700_001
        assert f.read(10) == DATA[700_001:700_011]
    with open_input(path, kind, 4096) as f, pytest.raises(DataLossError, match=r"f\.bin.*2000000"):
        seek_input(f, 2_000_000, path)


def test_concatenated_gzip_members_are_read_one_after_another(tmp_path):
    path = _write(tmp_path, "m.gz", gzip.compress(b"ab\n") + gzip.compress(b"cd\n"))
    with open_input(path, "GZIP") as f:
        assert f.read() == b"ab\ncd\n"


@pytest.mark.parametrize("kind", ["GZIP", "ZLIB"])
def test_truncated_stream_is_data_loss_naming_file_and_offset(tmp_path, kind):
    whole = gzip.compress(DATA) if kind == "GZIP" else zlib.compress(DATA)
    path = _write(tmp_path, "cut.bin", whole[: len(whole) // 2])
    pattern = rf"truncated {kind} stream in .*cut\.bin at uncompressed byte \d+"
    with open_input(path, kind, 8192) as f, pytest.raises(DataLossError, match=pattern) as e:
        while f.read(65536):
            pass
    assert e.value.path == path and 0 < e.value.offset < len(DATA)
    assert "\n" not in str(e.value)


def test_damaged_stream_is_data_loss(tmp_path):
    whole = bytearray(gzip.compress(DATA))
    whole[200:260] = b"\xff" * 60
    path = _write(tmp_path, "bad.gz", bytes(whole))
    with open_input(path, "GZIP") as f, pytest.raises(DataLossError, match=r"damaged GZIP stream in .*bad\.gz"):
        f.read()


def test_auto_picks_by_extension_and_none_never_infers(tmp_path):
    gz = _write(tmp_path, "a.txt.gz", gzip.compress(b"hello\n"))
    zz = _write(tmp_path, "a.zz", zlib.compress(b"hi\n"))
    plain = _write(tmp_path, "a.txt", b"plain\n")
    assert open_input(gz, "AUTO").read() == b"hello\n"
    assert open_input(zz, "auto").read() == b"hi\n"
    assert open_input(plain, "AUTO").read() == b"plain\n"
    assert open_input(gz, None).read() == gzip.compress(b"hello\n")  # tf.data: no inference


def test_bad_compression_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match=r"compression_type='BZ2'.*'GZIP' or 'ZLIB'"):
        normalize_compression("BZ2")
    with pytest.raises(ValueError, match="AUTO"):
        normalize_compression("x", allow_auto=True)
    with pytest.raises(FileNotFoundError):
        open_input(str(tmp_path / "missing.txt"), None)
    assert buffer_bytes("GZIP", 1000) > buffer_bytes("", 1000) == 1000


def test_empty_compressed_file_has_no_bytes(tmp_path):
    path = _write(tmp_path, "e.gz", b"")
    assert open_input(path, "GZIP").read() == b""
