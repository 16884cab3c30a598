"""tf.train.Example: TensorFlow's parse results on the fixtures, encode inference, specs, batches, errors."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from tfrecord_helpers import fixture, load_json

import headrace as hr
from headrace.io import TFRecordDataset
from headrace.io import example as ex
from headrace.io.example import (
    BytesList,
    FixedLenFeature,
    FixedLenSequenceFeature,
    FloatList,
    Int64List,
    VarLenBatch,
    VarLenFeature,
)

EXPECTED = load_json("examples.expected.json")
RECORDS = list(TFRecordDataset(fixture("examples.tfrecord")))


def _spec_from_json(text: str):
    parts = text.split()
    if parts[0] == "VarLen":
        return VarLenFeature(parts[1])
    shape = [int(d) for d in parts[1].strip("[]").split(",") if d]
    default = float(parts[4]) if len(parts) > 3 and parts[3] == "default" else None
    return FixedLenFeature(shape, parts[2], default_value=default)


SPEC = {key: _spec_from_json(text) for key, text in EXPECTED["spec"].items()}


def _expected_value(value, spec):
    if isinstance(value, dict) and "b64" in value:
        return base64.b64decode(value["b64"])
    if isinstance(value, dict):
        return value["sparse_values"]
    return value


def _as_python(x):
    return x.tolist() if isinstance(x, np.ndarray) else x.item() if isinstance(x, np.generic) else x


def test_spec_is_read_from_the_fixture():
    assert repr(SPEC["optional_score"]) == "FixedLenFeature(shape=[], dtype='float32', default_value=-1.0)"
    assert repr(SPEC["embedding"]) == "FixedLenFeature(shape=[4], dtype='float32')"


FILES = {"examples.tfrecord": None, "examples.tfrecord.gz": "GZIP", "examples.tfrecord.zlib": "ZLIB"}


@pytest.mark.parametrize("name", sorted(FILES))
@pytest.mark.parametrize("i", range(8))
def test_parse_single_example_matches_tensorflow_exactly(name, i):
    record = list(TFRecordDataset(fixture(name), FILES[name]))[i]
    got = ex.parse_single_example(record, SPEC, source=name, record_index=i)
    expected = EXPECTED["examples"][i]
    assert list(got) == list(SPEC)
    for key, spec in SPEC.items():
        want = _expected_value(expected[key], spec)
        assert _as_python(got[key]) == want, key  # float32 values compare exactly as TF printed them
    assert type(got["label"]) is np.int64 and type(got["optional_score"]) is np.float32
    assert type(got["image/encoded"]) is bytes
    assert got["embedding"].dtype == np.float32 and got["embedding"].shape == (4,)
    assert got["ids"].dtype == np.int64 and got["bbox/xmin"].dtype == np.float32


@pytest.mark.parametrize("batch", [np.array(RECORDS, dtype=object), RECORDS, tuple(RECORDS)])
def test_parse_example_batch_matches_single_records(batch):
    got = ex.parse_example(batch, SPEC)
    singles = [ex.parse_single_example(r, SPEC) for r in RECORDS]
    for key, spec in SPEC.items():
        if isinstance(spec, VarLenFeature):
            assert isinstance(got[key], VarLenBatch)
            assert got[key].row_lengths.dtype == np.int64
            assert [v.tolist() for v in got[key].to_list()] == [s[key].tolist() for s in singles]
            assert got[key].row_splits()[-1] == len(got[key].values)
        else:
            stacked = np.stack([np.asarray(s[key], dtype=got[key].dtype) for s in singles])
            assert got[key].shape == (8, *spec.shape) and np.array_equal(got[key], stacked), key
    assert got["image/encoded"].dtype == object
    assert got["optional_score"].tolist() == [0.0, -1.0, 1.0, -1.0, 2.0, -1.0, 3.0, -1.0]


def test_parse_after_batching_in_a_pipeline():
    ds = TFRecordDataset(fixture("examples.tfrecord.gz"), "GZIP").batch(3).map(lambda b: ex.parse_example(b, SPEC))
    labels = np.concatenate([b["label"] for b in ds])
    assert labels.tolist() == [e["label"] for e in EXPECTED["examples"]]


def test_sequence_example_fixture():
    record = next(iter(TFRecordDataset(fixture("sequence_examples.tfrecord"))))
    context, seqs = ex.parse_single_sequence_example(
        record,
        context_features={"video_id": FixedLenFeature([], "string"), "fps": FixedLenFeature([], np.float32)},
        sequence_features={"frame_label": FixedLenSequenceFeature([], np.int64),
                           "frame_score": FixedLenSequenceFeature([2], "float32"),
                           "frame_label_ragged": VarLenFeature("int64")})
    assert context["video_id"] == b"v1" and context["fps"] == np.float32(29.97)
    assert seqs["frame_label"].tolist() == [1, 2, 3] and seqs["frame_label"].dtype == np.int64
    assert seqs["frame_score"].shape == (3, 2)
    assert seqs["frame_score"].tolist() == np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], np.float32).tolist()
    assert seqs["frame_label_ragged"].values.tolist() == [] and len(seqs["frame_label_ragged"].row_lengths) == 0
    ragged = ex.parse_single_sequence_example(record, sequence_features={"frame_score": VarLenFeature("float32")})[1]
    assert ragged["frame_score"].row_lengths.tolist() == [2, 2, 2]
    with pytest.raises(ValueError, match="'missing' is missing in record 0"):
        ex.parse_single_sequence_example(record, sequence_features={"missing": FixedLenSequenceFeature([], "int64")})
    with pytest.raises(TypeError, match="FixedLenSequenceFeature or VarLenFeature"):
        ex.parse_single_sequence_example(record, sequence_features={"frame_label": FixedLenFeature([], "int64")})
    with pytest.raises(ValueError, match="step has 2 values"):
        ex.parse_single_sequence_example(record,
                                         sequence_features={"frame_score": FixedLenSequenceFeature([3], "float32")})


def test_encode_sequence_example_round_trip():
    data = ex.encode_sequence_example({"id": b"a"}, {"tok": [[1, 2], [3, 4], [5, 6]], "w": [0.5, 1.5]})
    context, seqs = ex.parse_single_sequence_example(
        data, {"id": FixedLenFeature([], "string")},
        {"tok": FixedLenSequenceFeature([2], "int64"), "w": FixedLenSequenceFeature([], "float32"),
         "absent": FixedLenSequenceFeature([], "float32", allow_missing=True)})
    assert context == {"id": b"a"}
    assert seqs["tok"].tolist() == [[1, 2], [3, 4], [5, 6]] and seqs["w"].tolist() == [0.5, 1.5]
    assert seqs["absent"].shape == (0,)


def test_encode_infers_kinds_and_round_trips():
    value = {"b": b"\x00bytes\x00", "s": "text", "i": 7, "flag": True, "f": 0.25, "ints": np.arange(6).reshape(2, 3),
             "floats": np.array([1.5, -2.0], np.float64), "strs": ["a", b"b"], "mixed": [1, 2.5],
             "u8": np.array([255], np.uint8), "big": 2**63 - 1, "neg": [-(2**63)]}
    decoded = ex.decode(ex.encode(value))
    assert decoded["b"].tolist() == [b"\x00bytes\x00"] and decoded["s"].tolist() == [b"text"]
    assert decoded["i"].tolist() == [7] and decoded["flag"].tolist() == [1] and decoded["f"].tolist() == [0.25]
    assert decoded["ints"].tolist() == list(range(6)) and decoded["ints"].dtype == np.int64
    assert decoded["floats"].dtype == np.float32 and decoded["floats"].tolist() == [1.5, -2.0]
    assert decoded["strs"].tolist() == [b"a", b"b"] and decoded["mixed"].tolist() == [1.0, 2.5]
    assert decoded["u8"].tolist() == [255] and decoded["big"].tolist() == [2**63 - 1]
    assert decoded["neg"].tolist() == [-(2**63)]


def test_encode_is_deterministic_and_wrappers_are_explicit():
    assert ex.encode({"a": 1, "b": 2}) == ex.encode({"b": 2, "a": 1})
    decoded = ex.decode(ex.encode({"e": FloatList([]), "i": Int64List(np.array([1, 2])), "s": BytesList(["x"]),
                                   "f": FloatList([1, 2])}))
    assert decoded["e"].dtype == np.float32 and decoded["e"].size == 0
    assert decoded["i"].tolist() == [1, 2] and decoded["s"].tolist() == [b"x"]
    assert decoded["f"].dtype == np.float32 and decoded["f"].tolist() == [1.0, 2.0]
    parsed = ex.parse_single_example(ex.encode({"e": Int64List([])}), {"e": VarLenFeature("int64")})
    assert parsed["e"].dtype == np.int64 and parsed["e"].size == 0


@pytest.mark.parametrize(("value", "error", "match"), [
    ([], ValueError, "empty list has no kind"),
    ([1, "a"], TypeError, "mixes kinds"),
    (None, TypeError, "cannot store NoneType"),
    (np.array([1 + 2j]), TypeError, "complex128"),
    (2**64, ValueError, "int64"),
    ({"nested": 1}, TypeError, "cannot store dict"),
])
def test_encode_errors_name_the_feature(value, error, match):
    with pytest.raises(error, match=match) as e:
        ex.encode({"feat": value})
    assert "'feat'" in str(e.value)


def test_missing_wrong_kind_wrong_shape_name_feature_record_and_file():
    with pytest.raises(ValueError) as e:
        ex.parse_example(RECORDS, {"optional_score": FixedLenFeature([], "float32")}, source="x.tfrecord",
                         first_index=100)
    assert str(e.value).startswith("feature 'optional_score' is missing in record 101 of x.tfrecord")
    with pytest.raises(ValueError, match=r"feature 'label' in record 3 of f\.tfrecord is a int64_list"):
        ex.parse_single_example(RECORDS[0], {"label": FixedLenFeature([], "float32")}, source="f.tfrecord",
                                record_index=3)
    with pytest.raises(ValueError, match=r"'embedding' in record 0 has 4 float32 values .* needs exactly 3"):
        ex.parse_example(RECORDS, {"embedding": FixedLenFeature([3], "float32")})
    with pytest.raises(ValueError, match="'label' in record 0 is a int64_list"):
        ex.parse_example(RECORDS, {"label": VarLenFeature("string")})
    with pytest.raises(ValueError, match=r"'ids' in record 1 has 1 int64 values .* multiple of 3"):
        ex.parse_example(RECORDS, {"ids": FixedLenSequenceFeature([3], "int64", allow_missing=True)})
    with pytest.raises(ValueError, match=r"'nope' is missing in record 0 .* allow_missing=True"):
        ex.parse_example(RECORDS, {"nope": FixedLenSequenceFeature([], "int64")})


def test_defaults_and_sequence_padding_in_batches():
    records = [ex.encode({"v": [1, 2, 3, 4]}), ex.encode({"other": 1}), ex.encode({"v": [5, 6]})]
    got = ex.parse_example(records, {
        "d": FixedLenFeature([2], "int64", default_value=[7, 8]),
        "s": FixedLenFeature([], "string", default_value="none"),
        "seq": FixedLenSequenceFeature([2], "int64", allow_missing=True, default_value=-1),
        "v": VarLenFeature("int64"),
    })
    assert got["d"].tolist() == [[7, 8]] * 3 and got["s"].tolist() == [b"none"] * 3
    assert got["seq"].shape == (3, 0, 2)
    padded = ex.parse_example(records, {"v": FixedLenSequenceFeature([2], "int64", allow_missing=True,
                                                                     default_value=-1)})["v"]
    assert padded.tolist() == [[[1, 2], [3, 4]], [[-1, -1], [-1, -1]], [[5, 6], [-1, -1]]]
    assert ex.parse_single_example(records[0], {"v": FixedLenSequenceFeature([2], "int64")})["v"].tolist() == [
        [1, 2], [3, 4]]
    single = ex.parse_single_example(records[1], {"d": FixedLenFeature([2], "int64", default_value=[7, 8])})
    assert single["d"].tolist() == [7, 8]


def test_feature_with_no_kind_counts_as_missing():
    from headrace.io._proto import messages as pb

    msg = pb.Example()
    msg.features.feature["k"].SetInParent()
    data = msg.SerializeToString()
    assert ex.parse_single_example(data, {"k": FixedLenFeature([], "int64", default_value=5)})["k"] == 5
    assert ex.parse_example([data], {"k": VarLenFeature("float32")})["k"].row_lengths.tolist() == [0]


@pytest.mark.parametrize("dtype", ["string", "int64", "float32", np.int64, np.float32, np.dtype("float32"), bytes,
                                   str, object])
def test_dtype_spellings(dtype):
    assert FixedLenFeature([], dtype).dtype in ("string", "int64", "float32")


@pytest.mark.parametrize(("make", "match"), [
    (lambda: FixedLenFeature([], "float64"), "float64"),
    (lambda: VarLenFeature(np.int32), "int32"),
    (lambda: FixedLenFeature([-1], "int64"), "ints >= 0"),
    (lambda: FixedLenFeature([2], "int64", default_value=[1, 2, 3]), "3 values but shape"),
    (lambda: FixedLenFeature([], "int64", default_value=1.5), "cannot be int64"),
    (lambda: FixedLenSequenceFeature([0], "int64"), "at least one value"),
])
def test_bad_specs(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"record 1: 3 bytes that are not a serialized tf.train.Example"):
        ex.parse_example([RECORDS[0], b"\xff\xff\xff"], SPEC)
    with pytest.raises(TypeError, match="record 0: expected serialized bytes, got int"):
        ex.parse_single_example(5, SPEC)
    with pytest.raises(ValueError, match="dtype S"):
        ex.parse_example(np.array(RECORDS, dtype="S"), SPEC)
    with pytest.raises(TypeError, match="single record"):
        ex.parse_example(RECORDS[0], SPEC)
    with pytest.raises(ValueError, match="1-D batch"):
        ex.parse_example(np.array(RECORDS, dtype=object).reshape(2, 4), SPEC)
    with pytest.raises(TypeError, match="features must be a dict"):
        ex.parse_single_example(RECORDS[0], [("label", FixedLenFeature([], "int64"))])
    with pytest.raises(TypeError, match=r"features\['label'\]"):
        ex.parse_single_example(RECORDS[0], {"label": "int64"})


def test_empty_batch():
    got = ex.parse_example([], {"a": FixedLenFeature([2], "float32"), "b": VarLenFeature("string")})
    assert got["a"].shape == (0, 2) and got["b"].values.shape == (0,)


def test_public_names_from_headrace_io():
    assert hr.io.FixedLenFeature is FixedLenFeature and hr.io.parse_example is ex.parse_example


def test_empty_list_of_another_kind_is_caught_in_batches():
    records = [ex.encode({"v": FloatList([1.0])}), ex.encode({"v": Int64List([])}), ex.encode({"w": 1})]
    with pytest.raises(ValueError, match=r"'v' in record 1 is a int64_list"):
        ex.parse_example(records, {"v": VarLenFeature("float32")})
    ok = ex.parse_example([records[0], records[2], ex.encode({"v": FloatList([])})], {"v": VarLenFeature("float32")})
    assert ok["v"].values.tolist() == [1.0] and ok["v"].row_lengths.tolist() == [1, 0, 0]


def _proto_text(fd) -> str:
    """A FileDescriptorProto in .proto syntax (the subset the Example schema uses)."""
    from google.protobuf import descriptor_pb2

    F = descriptor_pb2.FieldDescriptorProto
    scalar = {F.TYPE_BYTES: "bytes", F.TYPE_FLOAT: "float", F.TYPE_INT64: "int64", F.TYPE_STRING: "string"}
    lines = [f'syntax = "{fd.syntax}";', f"package {fd.package};", ""]
    for msg in fd.message_type:
        maps = {n.name: n for n in msg.nested_type if n.options.map_entry}

        def kind(f):
            return f.type_name.rsplit(".", 1)[-1] if f.type == F.TYPE_MESSAGE else scalar[f.type]

        lines.append(f"message {msg.name} {{")
        for i, field in enumerate(msg.field):
            entry = maps.get(field.type_name.rsplit(".", 1)[-1])
            if entry is not None:
                decl = f"map<{kind(entry.field[0])}, {kind(entry.field[1])}> {field.name} = {field.number}"
            else:
                decl = ("repeated " if field.label == F.LABEL_REPEATED else "") + f"{kind(field)} {field.name} = " \
                       f"{field.number}" + (" [packed = true]" if field.options.packed else "")
            if field.HasField("oneof_index"):
                if i == 0 or not msg.field[i - 1].HasField("oneof_index"):
                    lines.append(f"  oneof {msg.oneof_decl[field.oneof_index].name} {{")
                lines.append(f"    {decl};")
                if i == len(msg.field) - 1 or not msg.field[i + 1].HasField("oneof_index"):
                    lines.append("  }")
            else:
                lines.append(f"  {decl};")
        lines.append("}")
    return "\n".join(lines)


def test_the_descriptor_is_the_schema_its_docstring_shows():
    """messages.py is the one definition of the Example schema; its docstring's .proto block is the
    descriptor rendered (so the documentation cannot drift from what the bytes are parsed with)."""
    import textwrap

    from google.protobuf import descriptor_pool

    from headrace.io._proto import messages as pb

    block = pb.__doc__.split("::\n\n", 1)[1].split("\n\nThe descriptor", 1)[0]
    assert _proto_text(pb.file_descriptor()) == textwrap.dedent(block)
    assert pb.Example.DESCRIPTOR.full_name == "tensorflow.Example"
    # a private pool: TensorFlow's own registration of tensorflow.Example cannot collide with it
    assert pb.Example.DESCRIPTOR.file.pool is not descriptor_pool.Default()
