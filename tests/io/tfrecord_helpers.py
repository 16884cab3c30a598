"""Helpers shared by the TFRecord / Example tests: fixture paths, writing small files, state round trips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import headrace as hr
from headrace.io import TFRecordWriter

REPO = Path(__file__).resolve().parents[2]
TF_FIXTURES = REPO / "tests" / "data" / "tfrecord"


def fixture(name: str) -> str:
    path = TF_FIXTURES / name
    if not path.exists():
        raise FileNotFoundError(f"missing test fixture {path} (tests/data/ is part of the repository: "
                                "see tests/data/README.md)")
    return str(path)


def load_json(name: str) -> Any:
    return json.loads(Path(fixture(name)).read_text())


def write_records(path: Path | str, records: list[bytes], options: Any = None) -> str:
    with TFRecordWriter(str(path), options) as w:
        for r in records:
            w.write(r)
    return str(path)


def make_records(n: int, tag: str = "r") -> list[bytes]:
    """Records of varied sizes (including empty ones) that name themselves."""
    return [(f"{tag}{i}:" + "x" * (i * 7 % 50)).encode() if i % 5 else b"" for i in range(n)]


def assert_restores_everywhere(ds: hr.Dataset) -> list[Any]:
    """At every position k: a fresh iterator restored to the (JSON round-tripped) state taken after k elements
    yields exactly the rest of the stream. Returns the full stream."""
    with iter(ds) as it:
        full = list(it)
    for k in range(len(full) + 1):
        with iter(ds) as it:
            for _ in range(k):
                next(it)
            state = json.loads(json.dumps(it.get_state()))
        with iter(ds) as it2:
            if k < len(full):
                next(it2)  # a used iterator must restore as well as a fresh one
            it2.set_state(state)
            rest = list(it2)
        assert rest == full[k:], f"restored at element {k}: {rest[:3]}... != {full[k:k + 3]}..."
    return full
