#!/usr/bin/env python3
"""Caffe2's side of tensorfmt's interop tests: Caffe2 databases read and written with the
real Python `lmdb` and `plyvel` (LevelDB) packages and protobuf, and MiniDB files as
Caffe2's C++ writes them (two little-endian int32 lengths, the key, the value; there is
no other writer of them).

Run with the project's Python environment (scripts/pyenv.sh).

Subcommands
-----------
describe DB_TYPE PATH [PATH...]
    Prints one line of JSON per database, what ``tensorfmt inspect --json --sha256 PATH``
    must print: {"format": "caffe2-<db_type>", "tensors": [{"name", "dtype", "shape",
    "sha256"}, ...]}. Records in the backend's order (MiniDB: file order; LMDB and
    LevelDB: bytewise key order). A record whose key has the form ``<name>#%<chunk>``
    holds a BlobProto: when its ``type`` is Tensor (TensorCPU, TensorCUDA) its tensor is
    one part of blob ``<name>`` (elements ``segment.begin`` to ``segment.end`` of the whole
    tensor, all of it without a segment); the parts of one blob are joined in element
    order wherever they are, as Caffe2's Load joins them, and the blob is listed where its
    first part is. Any other record whose value holds field 1 only is a TensorProtos: its
    tensors are named ``<key>/<index>``. Other records (strings, DB readers) are skipped.
    Elements as Caffe2's deserializer reads them: FLOAT in ``float_data`` (or, with
    ``data_format`` FMT_BFLOAT16, bfloat16 in ``raw_data``: dtype bf16), DOUBLE, INT64,
    STRING in their fields; BOOL, UINT8, INT8, UINT16, INT16, FLOAT16 in ``byte_data`` when
    present, else ``int32_data`` (FLOAT16 as its bit pattern); INT32 in ``int32_data``;
    BYTE in ``byte_data``. sha256 as DESIGN.md §5. Keys are decoded as UTF-8 (invalid
    bytes become U+FFFD).
make-random DIR SEED N
    Writes N databases no test has seen into DIR and prints ``DB_TYPE PATH`` per line:
    minidb, lmdb or leveldb at random; each a weight DB as Save writes it (random dtypes
    and shapes, 0-d and empty included, strings too; some tensors split in random-sized
    chunks, written in shuffled order in MiniDB; the small types in int32_data or
    byte_data, float sometimes as FMT_BFLOAT16; a string blob among them) or a dataset of
    TensorProtos records. The same SEED gives the same databases.
"""

import hashlib
import json
import os
import re
import shutil
import struct
import sys

import lmdb
import ml_dtypes
import numpy as np
import plyvel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import caffe2_pb as pb  # noqa: E402

T = pb.TensorProto
# DataType -> (canonical dtype, numpy dtype).
TYPES = {
    T.FLOAT: ("f32", np.float32), T.INT32: ("i32", np.int32), T.BYTE: ("u8", np.uint8),
    T.STRING: ("string", None), T.BOOL: ("bool", np.bool_), T.UINT8: ("u8", np.uint8),
    T.INT8: ("i8", np.int8), T.UINT16: ("u16", np.uint16), T.INT16: ("i16", np.int16),
    T.INT64: ("i64", np.int64), T.FLOAT16: ("f16", np.float16), T.DOUBLE: ("f64", np.float64),
}
SMALL = (T.BOOL, T.UINT8, T.INT8, T.UINT16, T.INT16, T.FLOAT16)
FORMATS = {"minidb": "caffe2-minidb", "lmdb": "caffe2-lmdb", "leveldb": "caffe2-leveldb"}
ALIASES = {"MiniDB": "minidb", "LMDB": "lmdb", "LevelDB": "leveldb"}


class Unsupported(Exception):
    pass


# ---------------------------------------------------------------- databases

def read_records(db_type, path):
    """[(key bytes, value bytes)] in the backend's order."""
    if db_type == "minidb":
        data = open(path, "rb").read()
        out, pos = [], 0
        while pos < len(data):
            klen, vlen = struct.unpack_from("<ii", data, pos)
            if klen <= 0 or vlen <= 0:
                raise ValueError(f"{path}: record at byte {pos} has lengths {klen}, {vlen}")
            pos += 8
            key, pos = data[pos:pos + klen], pos + klen
            val, pos = data[pos:pos + vlen], pos + vlen
            if len(val) != vlen:
                raise ValueError(f"{path}: truncated record")
            out.append((key, val))
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
    raise Unsupported(f"db_type {db_type}")


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
        raise Unsupported(f"db_type {db_type}")


# ---------------------------------------------------------------- Caffe2's serializer

def tensor_proto(a, name, begin, end, variant=""):
    """The TensorProto of elements [begin, end) of `a` as Caffe2's TensorSerializer writes
    it; `variant` "bytes" puts the small types in byte_data, "bf16" float as bfloat16."""
    t = T()
    t.dims.extend(a.shape)
    flat = a.reshape(-1)[begin:end]
    if a.dtype == object:
        t.data_type = T.STRING
        t.string_data.extend(list(flat))
    elif a.dtype == np.float32 and variant == "bf16":
        t.data_type = T.FLOAT
        t.data_format = T.FMT_BFLOAT16
        t.raw_data = flat.astype(ml_dtypes.bfloat16).tobytes()
    elif a.dtype == np.float32:
        t.data_type = T.FLOAT
        t.float_data.extend(flat.tolist())
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
            t.byte_data = np.ascontiguousarray(flat).tobytes()
        elif a.dtype == np.float16:
            t.int32_data.extend(flat.view(np.uint16).astype(np.int32).tolist())
        else:
            t.int32_data.extend(flat.astype(np.int32).tolist())
    t.name = name
    t.device_detail.device_type = 0
    t.segment.begin = begin
    t.segment.end = end
    return t


def serialize(name, a, chunk_size=1000000, variant=""):
    """[(key, BlobProto bytes)]: Caffe2's chunks of `a` (an empty tensor is one chunk)."""
    n = int(np.prod(a.shape, dtype=np.int64))
    out = []
    begin = 0
    while True:
        end = min(begin + chunk_size, n)
        b = pb.BlobProto(name=name, type="Tensor")
        b.tensor.CopyFrom(tensor_proto(a, name, begin, end, variant))
        out.append((f"{name}#%{begin // chunk_size}".encode(), b.SerializeToString()))
        begin = end
        if begin >= n:
            return out


def string_blob(name, text):
    return name.encode(), pb.BlobProto(name=name, type="std::string", content=text).SerializeToString()


def dataset_record(arrays, variant=""):
    """A TensorProtos of whole tensors (no segment); `variant` as `tensor_proto`'s."""
    tp = pb.TensorProtos()
    for a in arrays:
        t = tensor_proto(a, "", 0, int(np.prod(a.shape, dtype=np.int64)), variant)
        t.ClearField("segment")
        t.ClearField("name")
        t.ClearField("device_detail")
        tp.protos.add().CopyFrom(t)
    return tp.SerializeToString()


# ---------------------------------------------------------------- describe

def le_c_bytes(a):
    a = np.asarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        a = a.view(np.uint16)
    if a.dtype.kind == "b":
        return (a.view(np.uint8) != 0).astype(np.uint8).tobytes()
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def elements(t):
    """(dtype name, element bytes LE or a list of bytes for strings) of one TensorProto."""
    if not t.HasField("data_type"):
        raise Unsupported("a TensorProto without data_type")
    dt = t.data_type
    if dt == T.FLOAT and t.HasField("data_format") and t.data_format == T.FMT_BFLOAT16:
        return "bf16", t.raw_data
    if dt == T.FLOAT and t.HasField("data_format") and t.data_format != T.FMT_PROTOBUF:
        raise Unsupported(f"data_format {t.data_format}")
    if dt not in TYPES:
        raise Unsupported(f"DataType {dt}")
    name, npt = TYPES[dt]
    if dt == T.STRING:
        return name, list(t.string_data)
    if dt == T.BYTE or (dt in SMALL and t.HasField("byte_data")):
        return name, t.byte_data
    if dt == T.FLOAT:
        return name, np.array(t.float_data, np.float32).tobytes()
    if dt == T.DOUBLE:
        return name, np.array(t.double_data, np.float64).tobytes()
    if dt == T.INT64:
        return name, np.array(t.int64_data, np.int64).tobytes()
    vals = np.array(t.int32_data, np.int64)
    if dt == T.FLOAT16:
        return name, (vals & 0xFFFF).astype(np.uint16).tobytes()
    if dt == T.BOOL:
        return name, (vals & 0xFF != 0).astype(np.uint8).tobytes()
    width = np.dtype(npt).itemsize
    return name, (vals & ((1 << (8 * width)) - 1)).astype(np.dtype(f"<u{width}")).tobytes()


def only_field_1(value):
    """Whether the message's top-level fields are all field 1 (a TensorProtos)."""
    pos = 0
    try:
        while pos < len(value):
            tag, pos = _varint(value, pos)
            if tag >> 3 != 1:
                return False
            wire = tag & 7
            if wire == 0:
                _, pos = _varint(value, pos)
            elif wire == 1:
                pos += 8
            elif wire == 2:
                n, pos = _varint(value, pos)
                pos += n
            elif wire == 5:
                pos += 4
            else:
                return False
        return pos == len(value)
    except IndexError:
        return False


def _varint(b, pos):
    v = shift = 0
    while True:
        c = b[pos]
        pos += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, pos


BLOB_KEY = re.compile(rb"^(.+?)#%(.+)$", re.S)


def describe(db_type, path):
    parts = {}
    order = []
    for key, value in read_records(db_type, path):
        skey = key.decode("utf-8", errors="replace")
        if BLOB_KEY.match(key):
            name = skey[:skey.index("#%")]
            b = pb.BlobProto.FromString(value)
            if b.type not in ("Tensor", "TensorCPU", "TensorCUDA") or not b.HasField("tensor"):
                continue
            t = b.tensor
            seg = (t.segment.begin, t.segment.end) if t.HasField("segment") else None
            if name not in parts:
                order.append(name)
                parts[name] = []
            parts[name].append((t, seg))
        elif only_field_1(value):
            tp = pb.TensorProtos.FromString(value)
            for i, t in enumerate(tp.protos):
                n = f"{skey}/{i}"
                order.append(n)
                parts[n] = [(t, None)]
    tensors = []
    for name in order:
        ps = parts[name]
        first = ps[0][0]
        dims = list(first.dims)
        total = int(np.prod(dims, dtype=np.int64))
        dtype = None
        pieces = []
        for t, seg in ps:
            d, el = elements(t)
            if dtype is None:
                dtype = d
            if d != dtype or list(t.dims) != dims:
                raise ValueError(f"{path}: parts of {name} disagree")
            b, e = seg if seg else (0, total)
            pieces.append((b, e, el))
        pieces.sort(key=lambda p: p[0])
        at = 0
        h = hashlib.sha256()
        for b, e, el in pieces:
            if b != at:
                raise ValueError(f"{path}: parts of {name} do not tile it")
            if dtype == "string":
                if len(el) != e - b:
                    raise ValueError(f"{path}: {name}: {len(el)} strings for [{b}, {e})")
                for s in el:
                    h.update(len(s).to_bytes(8, "little"))
                    h.update(s)
            else:
                item = {"f32": 4, "i32": 4, "u8": 1, "bool": 1, "i8": 1, "u16": 2, "i16": 2,
                        "i64": 8, "f16": 2, "f64": 8, "bf16": 2}[dtype]
                if len(el) != (e - b) * item:
                    raise ValueError(f"{path}: {name}: {len(el)} bytes for [{b}, {e})")
                if dtype == "bool":
                    el = (np.frombuffer(el, np.uint8) != 0).astype(np.uint8).tobytes()
                h.update(el)
            at = e
        if at != total:
            raise ValueError(f"{path}: Data size mismatch for blob {name}. Expected: {total} Read: {at}")
        tensors.append({"name": name, "dtype": dtype, "shape": dims, "sha256": h.hexdigest()})
    return {"format": FORMATS[db_type], "tensors": tensors}


def cmd_describe(args):
    if len(args) < 2:
        usage()
    db_type = ALIASES.get(args[0], args[0])
    for p in args[1:]:
        print(json.dumps(describe(db_type, p)))
    return 0


# ---------------------------------------------------------------- make-random

def random_array(rng, allow_strings=True):
    kinds = ["f32", "f64", "i32", "i64", "bool", "u8", "i8", "u16", "i16", "f16"]
    if allow_strings:
        kinds.append("string")
    k = kinds[rng.integers(len(kinds))]
    ndim = int(rng.integers(0, 4))
    shape = tuple(int(rng.integers(0, 6)) for _ in range(ndim))
    if rng.random() < 0.2 and ndim:
        shape = shape[:-1] + (0,)
    n = int(np.prod(shape, dtype=np.int64))
    if k == "string":
        a = np.empty(n, dtype=object)
        for i in range(n):
            a[i] = bytes(rng.integers(0, 256, int(rng.integers(0, 8)), dtype=np.uint8))
        return a.reshape(shape)
    if k == "bool":
        return (rng.random(n) < 0.5).reshape(shape)
    npt = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "u8": np.uint8,
           "i8": np.int8, "u16": np.uint16, "i16": np.int16, "f16": np.float16}[k]
    if np.dtype(npt).kind == "f":
        return (rng.standard_normal(n) * 100).astype(npt).reshape(shape)
    info = np.iinfo(npt)
    return rng.integers(info.min, info.max, n, dtype=npt, endpoint=True).reshape(shape)


def cmd_make_random(args):
    if len(args) != 3:
        usage()
    out_dir, seed, n = args[0], int(args[1]), int(args[2])
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        db_type = ["minidb", "lmdb", "leveldb"][rng.integers(3)]
        path = os.path.join(out_dir, f"r{i:04d}.{db_type}")
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
        records = []
        if rng.random() < 0.7:
            for j in range(int(rng.integers(1, 6))):
                a = random_array(rng)
                name = f"blob_{j}." + ["w", "b", "layer/0", "x y"][rng.integers(4)]
                n_el = int(np.prod(a.shape, dtype=np.int64))
                chunk = int(rng.integers(1, max(n_el, 1) + 1)) if rng.random() < 0.5 else 1000000
                variant = ""
                if a.dtype == np.float32 and rng.random() < 0.3:
                    variant = "bf16"
                elif rng.random() < 0.4:
                    variant = "bytes"
                records += serialize(name, a, chunk, variant)
            records.append(string_blob("note", b"hello"))
            if db_type == "minidb":
                order = rng.permutation(len(records))
                records = [records[k] for k in order]
        else:
            slots = [random_array(rng, allow_strings=True) for _ in range(int(rng.integers(1, 4)))]
            for r in range(int(rng.integers(1, 8))):
                arrays = [random_array(rng) if rng.random() < 0.3 else s for s in slots]
                records.append((f"{r:08d}".encode(), dataset_record(arrays)))
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
    except (OSError, ValueError, lmdb.Error, plyvel.Error) as e:
        print(f"tfcheck_caffe2 {argv[0]}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
