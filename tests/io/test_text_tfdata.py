"""Differential tests: TextLineDataset and FixedLengthRecordDataset against tf.data 2.21 over generated files
(LF and CRLF, lone CR, no final newline, empty lines and empty files, a line of several hundred KB, bytes that are
not UTF-8, unicode, GZIP and ZLIB, many files with num_parallel_reads 1 and > 1; records with header and footer
bytes, compressed or not, and a partial last record). Same elements, same order, an error where tf.data raises one.

TensorFlow runs once, in its own environment (``tests/tf_env.py``), for every case: the cases go to it as JSON.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from headrace.io import FixedLengthRecordDataset, TextLineDataset
from tests.tf_env import tf_python

pytestmark = [pytest.mark.slow]

_RUNNER = r"""
import json, sys
import tensorflow as tf
cases = json.load(open(sys.argv[1]))
out = {"tensorflow": tf.__version__, "results": {}}
for name, c in cases.items():
    if c["kind"] == "text":
        ds = tf.data.TextLineDataset(c["files"], compression_type=c["compression"] or None,
                                     num_parallel_reads=c["reads"])
    else:
        ds = tf.data.FixedLengthRecordDataset(c["files"], c["record_bytes"], c["header"], c["footer"],
                                              compression_type=c["compression"] or None,
                                              num_parallel_reads=c["reads"])
    got, error = [], None
    try:
        for x in ds:
            got.append(x.numpy().hex())
    except Exception as e:
        error = type(e).__name__
    out["results"][name] = {"elements": got, "error": error}
json.dump(out, open(sys.argv[2], "w"))
"""


def _compress(data: bytes, kind: str) -> bytes:
    return {"": data, "GZIP": gzip.compress(data), "ZLIB": zlib.compress(data)}[kind]


def _texts(rng: random.Random) -> dict[str, bytes]:
    words = ["alpha", "beta", "grüße", "日本語", "emoji 🚀", ""]
    return {
        "lf": b"".join(f"{rng.choice(words)} {i}\n".encode() for i in range(200)),
        "crlf": b"".join(f"{rng.choice(words)} {i}\r\n".encode() for i in range(150)),
        "mixed": b"a\r\nb\n\nc\rd\r\n\r\nlast\r",
        "no_final_newline": b"one\ntwo\nthree",
        "empty_lines": b"\n\n\nx\n\n",
        "empty": b"",
        "only_cr": b"\r",
        "long_line": b"start\n" + bytes(rng.randrange(32, 127) for _ in range(300_000)) + b"\nend\n",
        "not_utf8": bytes(rng.choice([0x80, 0xff, 0xc3, 0x00, 0x41, 0x0a, 0x0d]) for _ in range(5000)),
    }


def _cases(d: Path) -> dict[str, dict]:
    rng = random.Random(38)
    cases: dict[str, dict] = {}
    texts = _texts(rng)
    for kind in ["", "GZIP", "ZLIB"]:
        names = []
        for key, data in texts.items():
            p = d / f"{key}.{kind or 'raw'}.txt"
            p.write_bytes(_compress(data, kind))
            names.append(str(p))
            cases[f"text-{key}-{kind or 'raw'}"] = {"kind": "text", "files": [str(p)], "compression": kind,
                                                    "reads": 1}
        for reads in [1, 2, 4, 16]:
            cases[f"text-all-{kind or 'raw'}-reads{reads}"] = {"kind": "text", "files": names, "compression": kind,
                                                             "reads": reads}
    for kind in ["", "GZIP"]:
        for rb, header, footer, total in [(7, 0, 0, 70), (7, 5, 3, 5 + 3 + 7 * 20), (1, 2, 2, 10),
                                          (16, 4, 0, 4 + 16 * 9 + 5), (4, 0, 0, 0)]:
            names = []
            for i in range(3):
                p = d / f"rec-{rb}-{header}-{footer}-{total}-{i}.{kind or 'raw'}.bin"
                p.write_bytes(_compress(bytes(rng.randrange(256) for _ in range(total + i * rb)), kind))
                names.append(str(p))
            for reads in [1, 2]:
                cases[f"rec-{rb}-{header}-{footer}-{total}-{kind or 'raw'}-reads{reads}"] = {
                    "kind": "records", "files": names, "compression": kind, "reads": reads, "record_bytes": rb,
                    "header": header, "footer": footer}
    return cases


def _headrace(c: dict) -> dict:
    if c["kind"] == "text":
        ds = TextLineDataset(c["files"], compression_type=c["compression"], num_parallel_reads=c["reads"])
    else:
        ds = FixedLengthRecordDataset(c["files"], c["record_bytes"], c["header"], c["footer"],
                                      compression_type=c["compression"], num_parallel_reads=c["reads"])
    got, error = [], None
    try:
        for x in ds:
            got.append(x.hex())
    except Exception as e:
        error = type(e).__name__
    return {"elements": got, "error": error}


def test_text_and_records_match_tf_data(tmp_path):
    cases = _cases(tmp_path)
    spec, out, runner = tmp_path / "cases.json", tmp_path / "tf.json", tmp_path / "runner.py"
    spec.write_text(json.dumps(cases))
    runner.write_text(_RUNNER)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run([tf_python(), str(runner), str(spec), str(out)], env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"the TensorFlow runner failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    tf = json.loads(out.read_text())
    assert tf["tensorflow"].startswith("2.21"), tf["tensorflow"]
    mismatches = []
    for name, c in cases.items():
        want, got = tf["results"][name], _headrace(c)
        if got["elements"] != want["elements"] or (got["error"] is None) != (want["error"] is None):
            mismatches.append(f"{name}: tf {len(want['elements'])} elements, error {want['error']}; headrace "
                              f"{len(got['elements'])}, error {got['error']}")
    assert not mismatches, "\n".join(mismatches)
    assert sum(len(tf["results"][n]["elements"]) for n in cases) > 5000  # the comparison saw real data
    print(f"{len(cases)} cases match tf.data {tf['tensorflow']}", file=sys.stderr)
