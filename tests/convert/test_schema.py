"""Row values, kind inference over rows, feature spec, statistics and Example encoding."""

from __future__ import annotations

import math

import numpy as np
import pytest

from headrace.convert.schema import (
    FLOAT32,
    INT64,
    STRING,
    TEXT,
    SchemaAccumulator,
    SchemaConflictError,
    encode_row,
    text_kind,
    typed,
)
from headrace.io.example import decode


def test_typed_values():
    assert typed(None, "a") is None
    assert typed(True, "a") == (INT64, [1])
    assert typed(3, "a") == (INT64, [3])
    assert typed(2.5, "a") == (FLOAT32, [2.5])
    assert typed("é", "a") == (STRING, ["é".encode()])
    assert typed([1, 2.5], "a") == (FLOAT32, [1.0, 2.5])
    assert typed([], "a") == (None, [])
    assert typed(np.arange(4).reshape(2, 2), "a") == (INT64, [0, 1, 2, 3])
    assert typed(np.float32(1.5), "a") == (FLOAT32, [1.5])


@pytest.mark.parametrize("value, words", [
    ({"x": 1}, "nested objects"), ([[1], [2]], "flat lists"), ([1, None], "flat lists"),
    (["a", 1], "mixes strings and numbers"), (2**64, "does not fit int64"), (object(), "cannot store"),
])
def test_typed_rejects_with_the_feature_name(value, words):
    with pytest.raises(ValueError, match=words) as e:
        typed(value, "col7")
    assert "'col7'" in str(e.value)


def test_text_kind():
    assert [text_kind(s) for s in ("12", "-3", "1.5", "1e3", "abc", str(2**70))] == [
        INT64, INT64, FLOAT32, FLOAT32, STRING, FLOAT32]


def _acc(rows, labels=()):
    acc = SchemaAccumulator(labels)
    for r in rows:
        acc.add(r)
    return acc


def test_csv_text_widens_over_rows_and_encodes_with_the_final_kind():
    rows = [(f"f.csv:{i}", {"n": (TEXT, [n]), "x": (TEXT, [x])}) for i, (n, x) in
            enumerate([("1", "7"), ("2", "2.5"), ("3", "abc")], 2)]
    schema = _acc(rows).schema()
    assert schema.kinds == {"n": INT64, "x": STRING}
    assert schema.spec["n"] == {"type": "FixedLenFeature", "dtype": INT64, "shape": []}
    assert schema.stats["n"]["min"] == 1 and schema.stats["n"]["max"] == 3 and schema.stats["n"]["mean"] == 2.0
    assert "min" not in schema.stats["x"]  # a string feature has no numeric statistics
    feats = decode(encode_row(rows[0][1], schema.kinds))
    assert feats["n"].tolist() == [1] and feats["x"].tolist() == [b"7"]


def test_int_and_float_make_float_and_spec_shapes():
    rows = [("a", {"v": (INT64, [1]), "pair": (FLOAT32, [1.0, 2.0]), "tags": (STRING, [b"x"])}),
            ("b", {"v": (FLOAT32, [0.5]), "pair": (FLOAT32, [3.0, 4.0]), "tags": (STRING, [b"y", b"z"])}),
            ("c", {"v": (FLOAT32, [math.nan]), "pair": (FLOAT32, [5.0, 6.0])})]
    schema = _acc(rows).schema()
    assert schema.kinds["v"] == FLOAT32
    assert schema.spec["pair"] == {"type": "FixedLenFeature", "dtype": FLOAT32, "shape": [2]}
    assert schema.spec["tags"] == {"type": "VarLenFeature", "dtype": STRING}  # missing in row c, 1 or 2 values
    assert schema.stats["tags"]["missing"] == 1 and schema.stats["tags"]["max_values"] == 2
    assert schema.stats["v"]["nan"] == 1 and schema.stats["v"]["mean"] == 0.75
    assert decode(encode_row(rows[0][1], schema.kinds))["v"].dtype == np.float32


def test_strings_and_numbers_in_one_feature_is_a_conflict_naming_rows():
    rows = [("f.jsonl:1", {"v": (INT64, [1])}), ("f.jsonl:2", {"v": (STRING, [b"one"])})]
    with pytest.raises(SchemaConflictError, match=r"'v'.*f\.jsonl:2.*f\.jsonl:1"):
        _acc(rows).schema()


def test_merge_in_any_split_gives_the_same_schema_and_histogram():
    rng = np.random.default_rng(0)
    rows = [(f"r{i}", {"label": (INT64, [int(rng.integers(3))]), "x": (FLOAT32, [float(rng.normal())])})
            for i in range(50)]
    whole = _acc(rows, ["label"]).schema()
    left, right = _acc(rows[:17], ["label"]), _acc(rows[17:], ["label"])
    merged = right.merge(left).schema()
    assert merged.spec == whole.spec and merged.rows == 50
    assert merged.stats["label"]["histogram"] == whole.stats["label"]["histogram"]
    counts = {str(k): v for k, v in zip(*np.unique([r[1]["label"][1][0] for r in rows], return_counts=True))}
    assert whole.stats["label"]["histogram"] == counts
    assert math.isclose(merged.stats["x"]["mean"], whole.stats["x"]["mean"])
