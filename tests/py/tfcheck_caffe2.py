#!/usr/bin/env python3
"""Caffe2's side of tensorfmt's interop tests: Caffe2 databases read and written with the
real Python `lmdb` and `plyvel` (LevelDB) packages and protobuf (caffe2.proto's messages
from tests/py/caffe2_pb.py), and MiniDB files as Caffe2's C++ writes them (two
little-endian int32 lengths, the key, the value; there is no other writer of them).

Run with the project's Python environment (scripts/pyenv.sh: the lmdb, plyvel, protobuf
and NumPy pinned in tests/py/requirements.txt).

Subcommands
-----------
describe DB_TYPE PATH [PATH...]
    Prints one line of JSON per database, exactly what ``tensorfmt inspect --json
    --sha256 PATH`` must print (the README's `inspect --json` contract)::

        {"format": F, "tensors": [{"name", "dtype", "shape", "sha256"}, ...]}

    DB_TYPE is minidb, lmdb or leveldb (Caffe2's aliases MiniDB, LMDB and LevelDB too);
    F is caffe2-minidb, caffe2-lmdb or caffe2-leveldb. Records are taken in the
    backend's order: MiniDB file order, LMDB and LevelDB bytewise key order.

    A record whose value has a top-level field 2 (``BlobProto.type``) is a BlobProto, as
    Caffe2's Load reads every record; any other record is a TensorProtos (a dataset
    record, as TensorProtosDBInput reads it). A BlobProto of type Tensor (TensorCPU,
    TensorCUDA) is a part of the tensor named by its key cut at the first ``#%`` (the
    blob name): elements ``segment.begin`` to ``segment.end`` of the whole tensor, all of
    it without a segment. The parts of one blob are joined by their segments in any
    order, wherever they are among the other records, into the ``dims`` they all carry;
    the tensor is listed where its first part is. Parts that overlap (a chunk repeated),
    leave elements out or disagree in dims or dtype exit 2, as does a Tensor blob
    without a tensor. BlobProtos of other types (std::string, DBReader,
    Int8TensorCPU...) are not tensors and are skipped. A TensorProtos record with key K
    lists ``K/<i>`` for each ``protos[i]``, a whole tensor (a segment there must cover
    it all). Keys are decoded as UTF-8; bytes that are not UTF-8 become U+FFFD, one per
    maximal invalid subsequence (Python's ``errors="replace"``, Rust's
    ``String::from_utf8_lossy``); a name listed twice exits 2.

    dtype from ``data_type``: FLOAT f32 (with ``data_format`` 1, FMT_BFLOAT16, its
    elements ``raw_data``'s bfloat16 values widened to float32, as Caffe2's Load reads
    them), INT32 i32, BYTE u8, STRING string,
    BOOL bool, UINT8 u8, INT8 i8, UINT16 u16, INT16 i16, INT64 i64, FLOAT16 f16, DOUBLE
    f64. UNDEFINED, ZERO_COLLISION_HASH, REBATCHING_BUFFER, numbers caffe2.proto does
    not define, a missing ``data_type`` and any other ``data_format`` exit 2, naming
    it. Elements as Caffe2's deserializer reads them: ``float_data``, ``double_data``,
    ``int64_data``, ``string_data`` (bytes as stored); INT32 from ``int32_data``; BOOL,
    UINT8, INT8, UINT16, INT16 and FLOAT16 from ``byte_data`` (raw little-endian) when
    present, else ``int32_data`` cast to the type (the low bits; FLOAT16 the 16-bit
    pattern; BOOL 1 for any non-zero value); BYTE from ``byte_data``. The element count
    of each part must be its segment's (or the whole tensor's), else exit 2. shape is
    ``dims``; sha256 is over the elements in C order, little-endian, bool as one byte
    0/1, a string tensor as each element's u64-LE length then its bytes.

make-random DIR SEED N
    Writes N databases no test has seen into DIR and prints ``DB_TYPE PATH`` per line
    (``r<i>.minidb`` a file, ``r<i>.lmdb`` and ``r<i>.leveldb`` folders; ones of these
    names already in DIR are replaced). Each is, at random, a MiniDB, an LMDB or a
    LevelDB, holding one of:

    * a weight database as Caffe2's Save writes it: one to six tensors of random dtypes
      (strings included) and shapes (0-d and empty included), each under
      ``<name>#%<i>`` keys, one chunk (Save's default size) or, one time in two, chunks
      of a random small size, each with its segment, the whole tensor's dims,
      ``device_detail`` (CPU, now and then a CUDA device) and the tensor's name;
      float in ``float_data`` with ``data_format`` 0 as the latest writer sets it (now
      and then without it, as older writers did, or as FMT_BFLOAT16 in ``raw_data``,
      bfloat16 rounded as Caffe2's fbgemm rounds); bool, u8, i8, u16, i16 and f16 in
      ``int32_data`` or ``byte_data`` at random. Non-tensor blobs beside them at random
      (a std::string, a DBReader), keyed by their names. In a MiniDB all records are
      shuffled, so chunks come out of order and interleaved with other blobs.
    * a dataset of TensorProtos records: one to eight records of one to three tensors
      each (the same dtype per position, its shape the same as a rule), keyed by random
      printable ASCII (``#%`` inside some of them), each tensor encoded as above at
      random, without a segment.

    The same SEED gives the same databases (their records; LevelDB's files also name a
    sequence and a log).
"""

import hashlib
import json
import os
import shutil
import struct
import sys

import google.protobuf.message
import lmdb
import numpy as np
import plyvel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import caffe2_pb as pb  # noqa: E402

T = pb.TensorProto
# DataType -> (canonical dtype, item size in bytes; None for strings).
TYPES = {
    T.FLOAT: ("f32", 4), T.INT32: ("i32", 4), T.BYTE: ("u8", 1), T.STRING: ("string", None),
    T.BOOL: ("bool", 1), T.UINT8: ("u8", 1), T.INT8: ("i8", 1), T.UINT16: ("u16", 2),
    T.INT16: ("i16", 2), T.INT64: ("i64", 8), T.FLOAT16: ("f16", 2), T.DOUBLE: ("f64", 8),
}
# The types Caffe2 reads from byte_data when present, else from int32_data.
SMALL = (T.BOOL, T.UINT8, T.INT8, T.UINT16, T.INT16, T.FLOAT16)
TENSOR_TYPES = ("Tensor", "TensorCPU", "TensorCUDA")
FORMATS = {"minidb": "caffe2-minidb", "lmdb": "caffe2-lmdb", "leveldb": "caffe2-leveldb"}
ALIASES = {"MiniDB": "minidb", "LMDB": "lmdb", "LevelDB": "leveldb"}
CHUNK_SEPARATOR = b"#%"
DEFAULT_CHUNK_SIZE = 1000000  # caffe2_tensor_chunk_size, in elements


class Unsupported(Exception):
    pass


class Invalid(Exception):
    pass


# ---------------------------------------------------------------- databases

def read_records(db_type, path):
    """[(key bytes, value bytes)] in the backend's order."""
    if db_type == "minidb":
        with open(path, "rb") as f:
            data = f.read()
        out, pos = [], 0
        while pos < len(data):
            if pos + 8 > len(data):
                raise Invalid(f"{path}: truncated record lengths at byte {pos}")
            klen, vlen = struct.unpack_from("<ii", data, pos)
            if klen <= 0 or vlen <= 0:
                raise Invalid(f"{path}: record at byte {pos} has lengths {klen}, {vlen}")
            start = pos + 8
            pos = start + klen + vlen
            if pos > len(data):
                raise Invalid(f"{path}: truncated record at byte {start - 8}")
            out.append((data[start:start + klen], data[start + klen:pos]))
        return out
    if db_type == "lmdb":
        env = lmdb.open(path, readonly=True, lock=False, subdir=True)
        try:
            with env.begin() as txn:
                return [(bytes(k), bytes(v)) for k, v in txn.cursor()]
        finally:
            env.close()
    if db_type == "leveldb":
        db = plyvel.DB(path, create_if_missing=False)
        try:
            return [(bytes(k), bytes(v)) for k, v in db.iterator()]
        finally:
            db.close()
    raise Unsupported(f"db_type {db_type!r} (minidb, lmdb or leveldb)")


def write_records(db_type, path, records):
    """A new database at `path` holding `records` (key, value) as the backend keeps them."""
    if db_type == "minidb":
        with open(path, "wb") as f:
            for k, v in records:
                f.write(struct.pack("<ii", len(k), len(v)))
                f.write(k)
                f.write(v)
    elif db_type == "lmdb":
        env = lmdb.open(path, map_size=1 << 34, subdir=True)
        with env.begin(write=True) as txn:
            for k, v in records:
                txn.put(k, v)
        env.close()
    elif db_type == "leveldb":
        db = plyvel.DB(path, create_if_missing=True, error_if_exists=True)
        with db.write_batch() as wb:
            for k, v in records:
                wb.put(k, v)
        db.close()
    else:
        raise Unsupported(f"db_type {db_type!r} (minidb, lmdb or leveldb)")


# ---------------------------------------------------------------- Caffe2's serializer

def bf16_bits(flat):
    """float32 -> bfloat16 bit patterns as fbgemm's FloatToBfloat16_ref rounds them:
    (bits + 0x8000) >> 16."""
    bits = np.ascontiguousarray(flat, np.float32).view(np.uint32).astype(np.uint64)
    return (((bits + 0x8000) >> 16) & 0xFFFF).astype("<u2")


def tensor_proto(a, name, begin, end, variant="", device=(0, None)):
    """The TensorProto of elements [begin, end) of `a` as Caffe2's TensorSerializer writes
    it. `variant`: "bytes" puts the small types in byte_data (the
    caffe2_serialize_using_bytes_as_holder flag), "bf16" float as FMT_BFLOAT16 in
    raw_data, "old" float without data_format (writers before it existed). `device`:
    (device_type, device_id or None)."""
    t = T()
    t.dims.extend(a.shape)
    flat = a.reshape(-1)[begin:end]
    if a.dtype == object:
        t.data_type = T.STRING
        t.string_data.extend(list(flat))
    elif a.dtype == np.float32 and variant == "bf16":
        t.data_type = T.FLOAT
        t.data_format = T.FMT_BFLOAT16
        t.raw_data = bf16_bits(flat).tobytes()
    elif a.dtype == np.float32:
        t.data_type = T.FLOAT
        t.float_data.extend(flat.tolist())
        if variant != "old":
            t.data_format = T.FMT_PROTOBUF
    elif a.dtype == np.float64:
        t.data_type = T.DOUBLE
        t.double_data.extend(flat.tolist())
    elif a.dtype == np.int64:
        t.data_type = T.INT64
        t.int64_data.extend(flat.tolist())
    elif a.dtype == np.int32:
        t.data_type = T.INT32
        t.int32_data.extend(flat.tolist())
    else:
        code = {np.dtype(np.bool_): T.BOOL, np.dtype(np.uint8): T.UINT8, np.dtype(np.int8): T.INT8,
                np.dtype(np.uint16): T.UINT16, np.dtype(np.int16): T.INT16,
                np.dtype(np.float16): T.FLOAT16}[a.dtype]
        t.data_type = code
        if variant == "bytes":
            t.byte_data = np.ascontiguousarray(flat).astype(flat.dtype.newbyteorder("<")).tobytes()
        elif a.dtype == np.float16:
            t.int32_data.extend(flat.view(np.uint16).astype(np.int32).tolist())
        else:
            t.int32_data.extend(flat.astype(np.int32).tolist())
    t.name = name
    t.device_detail.device_type = device[0]
    if device[1] is not None:
        t.device_detail.device_id = device[1]
    t.segment.begin = begin
    t.segment.end = end
    return t


def serialize(name, a, chunk_size=DEFAULT_CHUNK_SIZE, variant="", device=(0, None)):
    """[(key, BlobProto bytes)]: Save's records of blob `name` holding `a`, chunks of
    `chunk_size` elements keyed `name#%<i>` (an empty tensor is one chunk, {0, 0})."""
    n = int(np.prod(a.shape, dtype=np.int64))
    out = []
    begin = 0
    while True:
        end = min(begin + chunk_size, n)
        b = pb.BlobProto(name=name, type="Tensor")
        b.tensor.CopyFrom(tensor_proto(a, name, begin, end, variant, device))
        out.append((f"{name}#%{begin // chunk_size}".encode(), b.SerializeToString()))
        begin = end
        if begin >= n:
            return out


def string_blob(name, text):
    """Save's record of a std::string blob: key `name`, the string in `content`."""
    return name.encode(), pb.BlobProto(name=name, type="std::string", content=text).SerializeToString()


def db_reader_blob(name, source, db_type, key=None):
    """Save's record of a DBReader blob: key `name`, a DBReaderProto in `content`."""
    r = pb.DBReaderProto(name=name, source=source, db_type=db_type)
    if key is not None:
        r.key = key
    content = r.SerializeToString()
    return name.encode(), pb.BlobProto(name=name, type="DBReader", content=content).SerializeToString()


def dataset_record(arrays, variant=""):
    """A TensorProtos of whole tensors (no segment, name or device); `variant` as
    `tensor_proto`'s, one for all the arrays or a list of one per array."""
    variants = variant if isinstance(variant, (list, tuple)) else [variant] * len(arrays)
    tp = pb.TensorProtos()
    for a, v in zip(arrays, variants):
        t = tensor_proto(a, "", 0, int(np.prod(a.shape, dtype=np.int64)), v)
        t.ClearField("segment")
        t.ClearField("name")
        t.ClearField("device_detail")
        tp.protos.add().CopyFrom(t)
    return tp.SerializeToString()


# ---------------------------------------------------------------- wire scanning

def _varint(b, pos):
    v = shift = 0
    while True:
        if pos >= len(b) or shift > 63:
            raise Invalid("a truncated or overlong varint")
        c = b[pos]
        pos += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, pos


def top_fields(value):
    """[(field number, wire type, varint value or None)] of a message's top level, in
    order; Invalid when the bytes are not a protobuf message."""
    out, pos = [], 0
    while pos < len(value):
        tag, pos = _varint(value, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise Invalid("field number 0")
        v = None
        if wire == 0:
            v, pos = _varint(value, pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            n, pos = _varint(value, pos)
            pos += n
        elif wire == 5:
            pos += 4
        else:
            raise Invalid(f"wire type {wire} (groups are not used by caffe2.proto)")
        if pos > len(value):
            raise Invalid("a field runs past the end of the message")
        out.append((number, wire, v))
    return out


# ---------------------------------------------------------------- describe

def data_type_of(t, what):
    """The TensorProto's DataType, which must be one tensorfmt lists."""
    if not t.HasField("data_type"):
        # proto2 keeps a number its enum lacks among the unknown fields.
        raw = [v for n, w, v in top_fields(t.SerializeToString()) if n == 2 and w == 0]
        if raw:
            raise Unsupported(f"{what}: DataType {raw[-1]}, which caffe2.proto does not define")
        raise Unsupported(f"{what}: a TensorProto without data_type "
                          "(Caffe2: unrecognized data type)")
    dt = t.data_type
    if dt not in TYPES:
        raise Unsupported(f"{what}: DataType {T.DataType.Name(dt)} ({dt})")
    return dt


def elements(t, what):
    """(dtype name, element count, element bytes LE or, for strings, a list of bytes)
    of one TensorProto, from the fields Caffe2's deserializer reads."""
    dt = data_type_of(t, what)
    fmt = t.data_format if t.HasField("data_format") else T.FMT_PROTOBUF
    if dt == T.FLOAT and fmt == T.FMT_BFLOAT16:
        if len(t.raw_data) % 2:
            raise Invalid(f"{what}: bfloat16 raw_data of {len(t.raw_data)} bytes")
        # Caffe2's Load (fbgemm's Bfloat16ToFloat): each bfloat16 is the high half of the
        # float32 it becomes.
        bits = np.frombuffer(t.raw_data, "<u2").astype("<u4") << 16
        return "f32", len(t.raw_data) // 2, bits.tobytes()
    if fmt != T.FMT_PROTOBUF:
        raise Unsupported(f"{what}: data_format {fmt} for DataType {T.DataType.Name(dt)} "
                          "(Caffe2: unsupported serialization format)")
    name, item = TYPES[dt]
    if dt == T.STRING:
        return name, len(t.string_data), list(t.string_data)
    if dt == T.BYTE or (dt in SMALL and t.HasField("byte_data")):
        b = t.byte_data
        if len(b) % item:
            raise Invalid(f"{what}: byte_data of {len(b)} bytes for {name}")
        if dt == T.BOOL:
            b = (np.frombuffer(b, np.uint8) != 0).astype(np.uint8).tobytes()
        return name, len(b) // item, b
    if dt == T.FLOAT:
        return name, len(t.float_data), np.array(t.float_data, "<f4").tobytes()
    if dt == T.DOUBLE:
        return name, len(t.double_data), np.array(t.double_data, "<f8").tobytes()
    if dt == T.INT64:
        return name, len(t.int64_data), np.array(t.int64_data, "<i8").tobytes()
    vals = np.array(t.int32_data, np.int64)
    if dt == T.BOOL:  # static_cast<bool>
        return name, len(vals), (vals != 0).astype(np.uint8).tobytes()
    # static_cast to the narrower type (FLOAT16: the uint16 bit pattern): the low bits.
    mask = (1 << (8 * item)) - 1
    return name, len(vals), (vals & mask).astype(f"<u{item}").tobytes()


def parse(cls, value, what):
    try:
        return cls.FromString(value)
    except google.protobuf.message.DecodeError as e:
        raise Invalid(f"{what}: not a {cls.DESCRIPTOR.name}: {e}") from None


def key_text(key):
    return key.decode("utf-8", errors="replace")


def describe(db_type, path):
    db_type = ALIASES.get(db_type, db_type)
    parts = {}  # tensor name -> [(TensorProto, segment or None, what)]
    order = []
    datasets = set()
    for key, value in read_records(db_type, path):
        what = f"{path}: record {key!r}"
        try:
            fields = top_fields(value)
        except Invalid as e:
            raise Invalid(f"{what}: not a protobuf message: {e}") from None
        if any(n == 2 for n, _, _ in fields):
            b = parse(pb.BlobProto, value, what)
            if b.type not in TENSOR_TYPES:
                continue
            if not b.HasField("tensor"):
                raise Invalid(f"{what}: a {b.type} blob without a tensor")
            name = key_text(key.split(CHUNK_SEPARATOR, 1)[0])
            if name in datasets:
                raise Invalid(f"{what}: tensor {name!r} is also a dataset tensor")
            t = b.tensor
            if name not in parts:
                order.append(name)
                parts[name] = []
            parts[name].append((t, (t.segment.begin, t.segment.end) if t.HasField("segment") else None,
                                what))
        else:
            tp = parse(pb.TensorProtos, value, what)
            k = key_text(key)
            for i, t in enumerate(tp.protos):
                name = f"{k}/{i}"
                if name in parts:
                    raise Invalid(f"{what}: tensor {name!r} listed twice")
                order.append(name)
                datasets.add(name)
                seg = (t.segment.begin, t.segment.end) if t.HasField("segment") else None
                parts[name] = [(t, seg, f"{what} protos[{i}]")]
    return {"format": FORMATS[db_type],
            "tensors": [join(path, name, parts[name]) for name in order]}


def join(path, name, ps):
    """The JSON entry of tensor `name` from its parts, checked as Caffe2's Load checks
    them (and more: no overlap, no gap)."""
    first, _, what0 = ps[0]
    dims = list(first.dims)
    if any(d < 0 for d in dims):
        raise Invalid(f"{what0}: negative dims {dims}")
    total = int(np.prod(dims, dtype=np.int64))
    dtype = None
    pieces = []
    for t, seg, what in ps:
        d, count, el = elements(t, what)
        if dtype is None:
            dtype = d
        if d != dtype or list(t.dims) != dims:
            raise Invalid(f"{what}: a part of {name!r} of {d} {list(t.dims)}, another of {dtype} {dims}")
        b, e = seg if seg is not None else (0, total)
        if not 0 <= b <= e <= total:
            raise Invalid(f"{what}: segment [{b}, {e}) outside {name!r}'s {total} elements")
        if count != e - b:
            raise Invalid(f"{what}: {count} elements for [{b}, {e}) of {name!r}")
        pieces.append((b, e, el, what))
    pieces.sort(key=lambda p: (p[0], p[1]))
    at = 0
    h = hashlib.sha256()
    for b, e, el, what in pieces:
        if b < at:
            raise Invalid(f"{what}: elements [{b}, {e}) of {name!r} are in another part too "
                          "(a repeated chunk?)")
        if b > at:
            raise Invalid(f"{path}: {name!r}: no part holds elements [{at}, {b})")
        if dtype == "string":
            for s in el:
                h.update(len(s).to_bytes(8, "little"))
                h.update(s)
        else:
            h.update(el)
        at = e
    if at != total:
        raise Invalid(f"{path}: Data size mismatch for blob {name!r}. Expected: {total} Read: {at}")
    return {"name": name, "dtype": dtype, "shape": dims, "sha256": h.hexdigest()}


def cmd_describe(args):
    if len(args) < 2:
        usage()
    db_type = ALIASES.get(args[0], args[0])
    if db_type not in FORMATS:
        raise Unsupported(f"db_type {args[0]!r} (minidb, lmdb or leveldb)")
    for p in args[1:]:
        print(json.dumps(describe(db_type, p)))
    return 0


# ---------------------------------------------------------------- make-random

KINDS = ["f32", "f64", "i32", "i64", "bool", "u8", "i8", "u16", "i16", "f16", "string"]
NUMPY = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "u8": np.uint8,
         "i8": np.int8, "u16": np.uint16, "i16": np.int16, "f16": np.float16}


def random_shape(rng):
    shape = tuple(int(rng.integers(1, 6)) for _ in range(int(rng.integers(0, 4))))
    if shape and rng.random() < 0.15:
        at = int(rng.integers(len(shape)))
        shape = shape[:at] + (0,) + shape[at + 1:]
    return shape


def random_values(rng, kind, shape):
    n = int(np.prod(shape, dtype=np.int64))
    if kind == "string":
        a = np.empty(n, dtype=object)
        for i in range(n):
            a[i] = bytes(rng.integers(0, 256, int(rng.integers(0, 8)), dtype=np.uint8))
        return a.reshape(shape)
    if kind == "bool":
        return (rng.random(n) < 0.5).reshape(shape)
    npt = NUMPY[kind]
    if np.dtype(npt).kind == "f":
        a = (rng.standard_normal(n) * 100).astype(npt)
        if n and rng.random() < 0.3:
            special = np.array([np.nan, np.inf, -np.inf, -0.0, np.finfo(npt).smallest_subnormal,
                                np.finfo(npt).max], npt)
            at = rng.integers(0, n, int(rng.integers(1, n + 1)))
            a[at] = special[rng.integers(0, len(special), len(at))]
        return a.reshape(shape)
    info = np.iinfo(npt)
    return rng.integers(info.min, info.max, n, dtype=npt, endpoint=True).reshape(shape)


def random_array(rng):
    return random_values(rng, KINDS[rng.integers(len(KINDS))], random_shape(rng))


def random_variant(rng, a, bf16=0.25):
    """How `a` is stored: float as bfloat16 with probability `bf16`, else with or without
    data_format; the small types in byte_data or int32_data."""
    if a.dtype == np.float32:
        r = rng.random()
        return "bf16" if r < bf16 else "old" if r < bf16 + 0.15 else ""
    if a.dtype in (np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.float16):
        return "bytes" if rng.random() < 0.5 else ""
    return ""


BLOB_NAMES = ["w", "b", "layer/0", "x y", "poids_\u00e9t\u00e9", "a.b:c", "conv1_w"]


def weight_db(rng):
    records = []
    for j in range(int(rng.integers(1, 7))):
        a = random_array(rng)
        name = f"{BLOB_NAMES[rng.integers(len(BLOB_NAMES))]}_{j}"
        n = int(np.prod(a.shape, dtype=np.int64))
        chunk = int(rng.integers(1, max(n, 1) + 1)) if rng.random() < 0.5 else DEFAULT_CHUNK_SIZE
        device = (1, int(rng.integers(0, 4))) if rng.random() < 0.1 else (0, None)
        records += serialize(name, a, chunk, random_variant(rng, a), device)
    if rng.random() < 0.6:
        records.append(string_blob("note", bytes(rng.integers(0, 256, 12, dtype=np.uint8))))
    if rng.random() < 0.3:
        records.append(db_reader_blob("reader", "/data/train.lmdb", "lmdb",
                                      "00000003" if rng.random() < 0.5 else None))
    return records


def random_key(rng, taken):
    while True:
        key = bytes(rng.integers(0x20, 0x7F, int(rng.integers(1, 17)), dtype=np.uint8))
        if rng.random() < 0.15:
            at = int(rng.integers(0, len(key) + 1))
            key = key[:at] + CHUNK_SEPARATOR + key[at:]
        if key not in taken:
            taken.add(key)
            return key


def dataset_db(rng):
    slots = []
    for _ in range(int(rng.integers(1, 4))):
        kind = KINDS[rng.integers(len(KINDS))]
        slots.append((kind, random_shape(rng), kind == "f32" and rng.random() < 0.25))
    taken = set()
    records = []
    for _ in range(int(rng.integers(1, 9))):
        arrays, variants = [], []
        for kind, shape, bf16 in slots:
            a = random_values(rng, kind, shape if rng.random() < 0.8 else random_shape(rng))
            arrays.append(a)
            variants.append("bf16" if bf16 else random_variant(rng, a, bf16=0))
        records.append((random_key(rng, taken), dataset_record(arrays, variants)))
    return records


def cmd_make_random(args):
    if len(args) != 3:
        usage()
    try:
        out_dir, seed, n = args[0], int(args[1]), int(args[2])
    except ValueError:
        usage()
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        db_type = ["minidb", "lmdb", "leveldb"][rng.integers(3)]
        path = os.path.join(out_dir, f"r{i:04d}.{db_type}")
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
        if rng.random() < 0.6:
            records = weight_db(rng)
            if db_type == "minidb":
                records = [records[k] for k in rng.permutation(len(records))]
        else:
            records = dataset_db(rng)
        write_records(db_type, path, records)
        print(f"{db_type} {os.path.abspath(path)}")
    return 0


def usage():
    print(__doc__, file=sys.stderr)
    sys.exit(2)


def main(argv):
    if not argv:
        usage()
    cmds = {"describe": cmd_describe, "make-random": cmd_make_random}
    if argv[0] not in cmds:
        print(f"tfcheck_caffe2: unknown subcommand {argv[0]!r}", file=sys.stderr)
        usage()
    try:
        return cmds[argv[0]](argv[1:])
    except Unsupported as e:
        print(f"tfcheck_caffe2 {argv[0]}: unsupported: {e}", file=sys.stderr)
        return 2
    except Invalid as e:
        print(f"tfcheck_caffe2 {argv[0]}: invalid: {e}", file=sys.stderr)
        return 2
    except (OSError, lmdb.Error, plyvel.Error) as e:
        print(f"tfcheck_caffe2 {argv[0]}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
