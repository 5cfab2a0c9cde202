#!/usr/bin/env python3
"""ONNX's side of tensorfmt's interop tests: what the real onnx package says about a model.

Run with the project's Python environment (scripts/pyenv.sh: the onnx and NumPy pinned in
tests/py/requirements.txt).

Subcommands
-----------
describe FILE [FILE...]
    One line of JSON per model, exactly what ``tensorfmt inspect --json --sha256 FILE`` must
    print (DESIGN.md section 5): ``{"format": "onnx", "tensors": [{"name", "dtype", "shape",
    "sha256"}, ...]}``: every ``graph.initializer`` in graph order, its values from
    ``onnx.numpy_helper.to_array`` (external data read relative to the model's folder).
    sha256 is over the elements in C order, little-endian, bool as one byte, bf16 and
    float8 as their raw element bytes; a string tensor hashes each element's length (u64,
    little-endian) then its bytes. Exits 2 on a data type tensorfmt has no name for.

check FILE [FILE...]
    ``onnx.checker.check_model(path, full_check=True)`` and ``onnx.load(path)`` for each;
    exits 1 naming the file on failure; prints ``ok FILE``.

make-random DIR SEED N
    Writes N models tensorfmt's tests have never seen into DIR (values, dtypes, shapes,
    raw or typed storage and external data drawn from SEED) and prints their paths.
"""

import hashlib
import json
import os
import sys

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# TensorProto.DataType numbers by tensorfmt dtype name.
CODES = {
    "f32": 1, "u8": 2, "i8": 3, "u16": 4, "i16": 5, "i32": 6, "i64": 7, "string": 8,
    "bool": 9, "f16": 10, "f64": 11, "u32": 12, "u64": 13, "c64": 14, "c128": 15,
    "bf16": 16, "f8e4m3fn": 17, "f8e5m2": 19,
}
NAMES = {v: k for k, v in CODES.items()}
NUMPY = {
    "f32": np.float32, "u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16,
    "i32": np.int32, "i64": np.int64, "bool": np.bool_, "f16": np.float16, "f64": np.float64,
    "u32": np.uint32, "u64": np.uint64, "c64": np.complex64, "c128": np.complex128,
    "bf16": ml_dtypes.bfloat16, "f8e4m3fn": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2,
}


def sha256(a, dtype):
    h = hashlib.sha256()
    if dtype == "string":
        for s in a.flatten():
            s = s if isinstance(s, bytes) else str(s).encode()
            h.update(len(s).to_bytes(8, "little"))
            h.update(s)
        return h.hexdigest()
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    h.update(a.tobytes())
    return h.hexdigest()


def describe(path):
    model = onnx.load(path, load_external_data=False)
    base = os.path.dirname(os.path.abspath(path))
    out = []
    for t in model.graph.initializer:
        dtype = NAMES.get(t.data_type)
        if dtype is None:
            print(f"{path}: tensor {t.name!r} has data type {t.data_type}, which has no tensorfmt name", file=sys.stderr)
            sys.exit(2)
        a = numpy_helper.to_array(t, base_dir=base)
        out.append({"name": t.name, "dtype": dtype, "shape": [int(d) for d in t.dims], "sha256": sha256(a, dtype)})
    return json.dumps({"format": "onnx", "tensors": out})


def check(path):
    try:
        onnx.checker.check_model(path, full_check=True)
        onnx.load(path)
    except Exception as e:  # noqa: BLE001 (the checker raises several kinds)
        print(f"{path}: {e}", file=sys.stderr)
        sys.exit(1)
    print(f"ok {path}")


def make_random(directory, seed, n):
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    names = list(CODES)
    paths = []
    for k in range(n):
        tensors = []
        for i in range(int(rng.integers(1, 6))):
            dtype = names[int(rng.integers(len(names)))]
            shape = tuple(int(x) for x in rng.integers(0, 5, size=int(rng.integers(0, 4))))
            name = f"t{k}_{i}"
            if dtype == "string":
                count = int(np.prod(shape, dtype=np.int64))
                # Text (numpy_helper decodes string tensors as UTF-8), non-ASCII included.
                alphabet = "abcXYZ 09_\u00e9\u4e2d\U0001f600"
                vals = ["".join(alphabet[int(j)] for j in rng.integers(0, len(alphabet), size=int(rng.integers(0, 6)))).encode()
                        for _ in range(count)]
                tensors.append(helper.make_tensor(name, TensorProto.STRING, shape, vals))
                continue
            a = rng.standard_normal(shape) * 50
            if dtype in ("c64", "c128"):
                a = a + 1j * rng.standard_normal(shape)
            if dtype == "bool":
                a = a > 0
            a = a.astype(NUMPY[dtype])
            if rng.random() < 0.5:
                tensors.append(numpy_helper.from_array(a, name=name))
            else:
                flat = a.flatten()
                if dtype in ("f16", "bf16", "f8e4m3fn", "f8e5m2"):
                    flat = flat.astype(np.float32)
                tensors.append(helper.make_tensor(name, CODES[dtype], shape, flat.tolist(), raw=False))
        g = helper.make_graph([], "g", [], [], initializer=tensors)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        path = os.path.join(directory, f"random_{k}.onnx")
        if rng.random() < 0.3:
            sub = os.path.join(directory, f"random_{k}")
            os.makedirs(sub, exist_ok=True)
            path = os.path.join(sub, "model.onnx")
            onnx.save_model(m, path, save_as_external_data=True,
                            all_tensors_to_one_file=bool(rng.random() < 0.5),
                            location="weights.data", size_threshold=int(rng.integers(0, 64)))
        else:
            onnx.save_model(m, path)
        onnx.checker.check_model(path, full_check=True)
        paths.append(path)
    return paths


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd, args = argv[1], argv[2:]
    if cmd == "describe":
        for p in args:
            print(describe(p))
    elif cmd == "check":
        for p in args:
            check(p)
    elif cmd == "make-random" and len(args) == 3:
        for p in make_random(args[0], int(args[1]), int(args[2])):
            print(p)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
