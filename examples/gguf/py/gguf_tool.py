#!/usr/bin/env python3
"""The GGUF example's truth, from llama.cpp's `gguf` package (gguf-py, pinned in
examples/gguf/requirements.txt):

  gguf_tool.py make DIR SEED     writes GGUF files with GGUFWriter: key/values of every
                                 value type (arrays of numbers, of strings, of arrays), a
                                 custom alignment, tensors of every plain dtype, and one
                                 file with a quantized (Q8_0) tensor; prints their paths
  gguf_tool.py describe FILE     prints, read by GGUFReader, the JSON that
                                 `tensorfmt-gguf inspect --json --sha256 FILE` must print
  gguf_tool.py metadata FILE     prints the key/values as JSON
  gguf_tool.py types FILE        prints each key's stored value type as JSON (an array's
                                 item types after `ARRAY`)
  gguf_tool.py check FILE NPZ    loads FILE with GGUFReader and checks every tensor equal
                                 to the NPZ's array of that name (exit 1 if not)
"""

import hashlib
import json
import sys

import numpy as np
import gguf

# GGML types this example maps, to tensorfmt's canonical dtype names.
CANON = {
    gguf.GGMLQuantizationType.F32: "f32",
    gguf.GGMLQuantizationType.F16: "f16",
    gguf.GGMLQuantizationType.BF16: "bf16",
    gguf.GGMLQuantizationType.F64: "f64",
    gguf.GGMLQuantizationType.I8: "i8",
    gguf.GGMLQuantizationType.I16: "i16",
    gguf.GGMLQuantizationType.I32: "i32",
    gguf.GGMLQuantizationType.I64: "i64",
}


def numpy_shape(t):
    # GGUF stores dimensions fastest first (ggml's ne[0]); NumPy's shape is the reverse.
    return [int(d) for d in reversed(list(t.shape))]


def tensor_bytes(t):
    data = np.asarray(t.data)
    return np.ascontiguousarray(data).view(np.uint8).tobytes()


def describe(path):
    r = gguf.GGUFReader(path)
    tensors = []
    for t in r.tensors:
        if t.tensor_type not in CANON:
            raise SystemExit(f"{path}: tensor {t.name}: type {t.tensor_type.name} not mapped")
        tensors.append({
            "name": t.name,
            "dtype": CANON[t.tensor_type],
            "shape": numpy_shape(t),
            "sha256": hashlib.sha256(tensor_bytes(t)).hexdigest(),
        })
    return {"format": "gguf", "tensors": tensors}


def metadata(path):
    r = gguf.GGUFReader(path)
    out = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        out[k] = f.contents()
    return out


def types(path):
    r = gguf.GGUFReader(path)
    out = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        names = [t.name for t in f.types]
        if names == ["ARRAY"]:
            # An empty array: its item type is stored all the same (the part after the
            # value type), though `types` lists none.
            names.append(gguf.GGUFValueType(int(f.parts[3][0])).name)
        out[k] = names
    return out


def make(d, seed):
    rng = np.random.default_rng(seed)
    files = []
    # 1. Every value type, the default alignment, tensors of every mapped dtype.
    p = f"{d}/all_types.gguf"
    w = gguf.GGUFWriter(p, "llama")
    w.add_uint8("t.u8", 7)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 700)
    w.add_int16("t.i16", -700)
    w.add_uint32("t.u32", 70000)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 0.5)
    w.add_bool("t.bool", True)
    w.add_string("general.name", "all types")
    w.add_uint64("t.u64", 2**40)
    w.add_int64("t.i64", -(2**40))
    w.add_float64("t.f64", 0.25)
    w.add_array("t.strings", ["a", "bb", "ccc"])
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.floats", [0.5, 1.5])
    w.add_array("t.nested", [[1, 2], [3]])
    for name, dt in [("f32", np.float32), ("f16", np.float16), ("f64", np.float64),
                     ("i8", np.int8), ("i16", np.int16), ("i32", np.int32), ("i64", np.int64)]:
        shape = tuple(int(x) for x in rng.integers(1, 5, size=int(rng.integers(1, 4))))
        a = (rng.standard_normal(shape) * 50).astype(dt)
        w.add_tensor(f"w.{name}", a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    files.append(p)
    # 2. A custom alignment, stored among the key/values, and random tensors.
    p = f"{d}/aligned_{seed}.gguf"
    w = gguf.GGUFWriter(p, "llama")
    w.add_custom_alignment(int(rng.choice([64, 128, 256])))
    w.add_string("general.name", f"random {seed}")
    for i in range(int(rng.integers(1, 6))):
        shape = tuple(int(x) for x in rng.integers(1, 9, size=int(rng.integers(1, 4))))
        w.add_tensor(f"blk.{i}.weight", rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    files.append(p)
    # 3. A quantized tensor (Q8_0) beside a plain one: this example reads plain elements
    # only, and must refuse it by name.
    p = f"{d}/quantized.gguf"
    w = gguf.GGUFWriter(p, "llama")
    a = rng.standard_normal((4, 64)).astype(np.float32)
    q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("q.weight", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("f", np.ones(3, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    files.append(p)
    return files


def check(path, npz):
    r = gguf.GGUFReader(path)
    want = np.load(npz)
    got = {t.name: t for t in r.tensors}
    if sorted(got) != sorted(want.files):
        print(f"names differ: {sorted(got)} vs {sorted(want.files)}")
        return 1
    for name in want.files:
        t = got[name]
        a = np.asarray(t.data).reshape(numpy_shape(t))
        b = want[name]
        if a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(a, b):
            print(f"{name}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}")
            return 1
    return 0


def main(argv):
    if len(argv) >= 1 and argv[0] == "make" and len(argv) == 3:
        print(json.dumps(make(argv[1], int(argv[2]))))
        return 0
    if len(argv) == 2 and argv[0] == "describe":
        print(json.dumps(describe(argv[1])))
        return 0
    if len(argv) == 2 and argv[0] == "metadata":
        print(json.dumps(metadata(argv[1]), default=str))
        return 0
    if len(argv) == 2 and argv[0] == "types":
        print(json.dumps(types(argv[1])))
        return 0
    if len(argv) == 3 and argv[0] == "check":
        return check(argv[1], argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
