"""Message classes for example.proto, built from a descriptor written in Python.

The ``FileDescriptorProto`` below mirrors example.proto field for field; it lives in a private
``DescriptorPool`` so that TensorFlow's own ``tensorflow.Example`` (if TensorFlow is imported in the
same process) never collides with it.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _field(msg: Any, name: str, number: int, ftype: int, label: int = _F.LABEL_OPTIONAL,
           type_name: str | None = None, oneof: int | None = None, packed: bool = False) -> None:
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = type_name
    if oneof is not None:
        f.oneof_index = oneof
    if packed:
        f.options.packed = True


def _map_entry(msg: Any, entry: str, value_type: str) -> None:
    e = msg.nested_type.add(name=entry)
    e.options.map_entry = True
    _field(e, "key", 1, _F.TYPE_STRING)
    _field(e, "value", 2, _F.TYPE_MESSAGE, type_name=value_type)


def _file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name="headrace/example.proto", package="tensorflow",
                                            syntax="proto3")
    rep = _F.LABEL_REPEATED
    _field(fd.message_type.add(name="BytesList"), "value", 1, _F.TYPE_BYTES, rep)
    _field(fd.message_type.add(name="FloatList"), "value", 1, _F.TYPE_FLOAT, rep, packed=True)
    _field(fd.message_type.add(name="Int64List"), "value", 1, _F.TYPE_INT64, rep, packed=True)
    feature = fd.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    _field(feature, "bytes_list", 1, _F.TYPE_MESSAGE, type_name=".tensorflow.BytesList", oneof=0)
    _field(feature, "float_list", 2, _F.TYPE_MESSAGE, type_name=".tensorflow.FloatList", oneof=0)
    _field(feature, "int64_list", 3, _F.TYPE_MESSAGE, type_name=".tensorflow.Int64List", oneof=0)
    features = fd.message_type.add(name="Features")
    _map_entry(features, "FeatureEntry", ".tensorflow.Feature")
    _field(features, "feature", 1, _F.TYPE_MESSAGE, rep, ".tensorflow.Features.FeatureEntry")
    _field(fd.message_type.add(name="FeatureList"), "feature", 1, _F.TYPE_MESSAGE, rep, ".tensorflow.Feature")
    lists = fd.message_type.add(name="FeatureLists")
    _map_entry(lists, "FeatureListEntry", ".tensorflow.FeatureList")
    _field(lists, "feature_list", 1, _F.TYPE_MESSAGE, rep, ".tensorflow.FeatureLists.FeatureListEntry")
    _field(fd.message_type.add(name="Example"), "features", 1, _F.TYPE_MESSAGE,
           type_name=".tensorflow.Features")
    seq = fd.message_type.add(name="SequenceExample")
    _field(seq, "context", 1, _F.TYPE_MESSAGE, type_name=".tensorflow.Features")
    _field(seq, "feature_lists", 2, _F.TYPE_MESSAGE, type_name=".tensorflow.FeatureLists")
    return fd


_POOL = descriptor_pool.DescriptorPool()
_POOL.AddSerializedFile(_file().SerializeToString())


def _cls(name: str) -> Any:
    desc = _POOL.FindMessageTypeByName(f"tensorflow.{name}")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(_POOL).GetPrototype(desc)  # protobuf < 4.22


BytesList = _cls("BytesList")
FloatList = _cls("FloatList")
Int64List = _cls("Int64List")
Feature = _cls("Feature")
Features = _cls("Features")
FeatureList = _cls("FeatureList")
FeatureLists = _cls("FeatureLists")
Example = _cls("Example")
SequenceExample = _cls("SequenceExample")
