"""Caffe2's protobuf messages (caffe2.proto, final revision: package `caffe2`, proto2),
built at import time from descriptors, with no protoc: TensorProto (with its DataType
and SerializationFormat enums and Segment), TensorProtos, DeviceOption, QTensorProto,
BlobProto, DBReaderProto. Field numbers, labels, packing and defaults as in
caffe2/proto/caffe2.proto. Encoded by the real protobuf package, which
writes fields in field-number order, as C++ protobuf does.
"""

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
OPT, REQ, REP = F.LABEL_OPTIONAL, F.LABEL_REQUIRED, F.LABEL_REPEATED


def _field(msg, name, number, label, ftype, type_name=None, packed=None, default=None):
    f = msg.field.add(name=name, number=number, label=label, type=ftype)
    if type_name:
        f.type_name = type_name
    if packed is not None:
        f.options.packed = packed
    if default is not None:
        f.default_value = default
    return f


def _build():
    fd = descriptor_pb2.FileDescriptorProto(name="caffe2/proto/caffe2.proto", package="caffe2",
                                            syntax="proto2")
    dev = fd.message_type.add(name="DeviceOption")
    _field(dev, "device_type", 1, OPT, F.TYPE_INT32, default="0")
    _field(dev, "device_id", 2, OPT, F.TYPE_INT32)
    _field(dev, "random_seed", 3, OPT, F.TYPE_UINT32)
    _field(dev, "node_name", 4, OPT, F.TYPE_STRING)
    _field(dev, "numa_node_id", 5, OPT, F.TYPE_INT32)
    _field(dev, "extra_info", 6, REP, F.TYPE_STRING)

    t = fd.message_type.add(name="TensorProto")
    dt = t.enum_type.add(name="DataType")
    for name, n in [("UNDEFINED", 0), ("FLOAT", 1), ("INT32", 2), ("BYTE", 3), ("STRING", 4),
                    ("BOOL", 5), ("UINT8", 6), ("INT8", 7), ("UINT16", 8), ("INT16", 9),
                    ("INT64", 10), ("FLOAT16", 12), ("DOUBLE", 13), ("ZERO_COLLISION_HASH", 14),
                    ("REBATCHING_BUFFER", 15)]:
        dt.value.add(name=name, number=n)
    sf = t.enum_type.add(name="SerializationFormat")
    sf.value.add(name="FMT_PROTOBUF", number=0)
    sf.value.add(name="FMT_BFLOAT16", number=1)
    seg = t.nested_type.add(name="Segment")
    _field(seg, "begin", 1, REQ, F.TYPE_INT64)
    _field(seg, "end", 2, REQ, F.TYPE_INT64)
    _field(t, "dims", 1, REP, F.TYPE_INT64)
    _field(t, "data_type", 2, OPT, F.TYPE_ENUM, ".caffe2.TensorProto.DataType", default="FLOAT")
    _field(t, "data_format", 15, OPT, F.TYPE_UINT32, default="0")
    _field(t, "float_data", 3, REP, F.TYPE_FLOAT, packed=True)
    _field(t, "int32_data", 4, REP, F.TYPE_INT32, packed=True)
    _field(t, "byte_data", 5, OPT, F.TYPE_BYTES)
    _field(t, "string_data", 6, REP, F.TYPE_BYTES)
    _field(t, "double_data", 9, REP, F.TYPE_DOUBLE, packed=True)
    _field(t, "int64_data", 10, REP, F.TYPE_INT64, packed=True)
    _field(t, "raw_data", 13, OPT, F.TYPE_BYTES)
    _field(t, "name", 7, OPT, F.TYPE_STRING)
    _field(t, "device_detail", 8, OPT, F.TYPE_MESSAGE, ".caffe2.DeviceOption")
    _field(t, "segment", 11, OPT, F.TYPE_MESSAGE, ".caffe2.TensorProto.Segment")

    q = fd.message_type.add(name="QTensorProto")
    _field(q, "dims", 1, REP, F.TYPE_INT64)
    _field(q, "precision", 2, REQ, F.TYPE_INT32)
    _field(q, "scale", 3, REQ, F.TYPE_DOUBLE)
    _field(q, "bias", 4, REQ, F.TYPE_DOUBLE)
    _field(q, "is_signed", 5, REQ, F.TYPE_BOOL)
    _field(q, "data", 6, REP, F.TYPE_INT32, packed=True)
    _field(q, "name", 7, OPT, F.TYPE_STRING)
    _field(q, "data_type", 8, OPT, F.TYPE_ENUM, ".caffe2.TensorProto.DataType", default="INT32")
    _field(q, "scales", 9, REP, F.TYPE_DOUBLE)
    _field(q, "biases", 10, REP, F.TYPE_DOUBLE)
    _field(q, "axis", 11, OPT, F.TYPE_INT32)
    _field(q, "is_multiparam", 12, OPT, F.TYPE_BOOL, default="false")

    tp = fd.message_type.add(name="TensorProtos")
    _field(tp, "protos", 1, REP, F.TYPE_MESSAGE, ".caffe2.TensorProto")

    b = fd.message_type.add(name="BlobProto")
    _field(b, "name", 1, OPT, F.TYPE_STRING)
    _field(b, "type", 2, OPT, F.TYPE_STRING)
    _field(b, "tensor", 3, OPT, F.TYPE_MESSAGE, ".caffe2.TensorProto")
    _field(b, "content", 4, OPT, F.TYPE_BYTES)
    _field(b, "qtensor", 5, OPT, F.TYPE_MESSAGE, ".caffe2.QTensorProto")
    _field(b, "content_num_chunks", 6, OPT, F.TYPE_INT32)
    _field(b, "content_chunk_id", 7, OPT, F.TYPE_INT32)

    r = fd.message_type.add(name="DBReaderProto")
    _field(r, "name", 1, OPT, F.TYPE_STRING)
    _field(r, "source", 2, OPT, F.TYPE_STRING)
    _field(r, "db_type", 3, OPT, F.TYPE_STRING)
    _field(r, "key", 4, OPT, F.TYPE_STRING)

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    get = message_factory.GetMessageClass
    return {n: get(pool.FindMessageTypeByName(f"caffe2.{n}"))
            for n in ("DeviceOption", "TensorProto", "QTensorProto", "TensorProtos", "BlobProto",
                      "DBReaderProto")}


_M = _build()
DeviceOption = _M["DeviceOption"]
TensorProto = _M["TensorProto"]
QTensorProto = _M["QTensorProto"]
TensorProtos = _M["TensorProtos"]
BlobProto = _M["BlobProto"]
DBReaderProto = _M["DBReaderProto"]
