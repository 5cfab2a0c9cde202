#!/usr/bin/env python3
"""ONNX's side of tensorfmt's interop tests: what the real onnx package says about a model.

Run with the project's Python environment (scripts/pyenv.sh: the onnx, onnxruntime and
NumPy pinned in tests/py/requirements.txt).

Subcommands
-----------
describe FILE [FILE...]
    Prints one line of JSON per model, exactly what ``tensorfmt inspect --json --sha256
    FILE`` must print (DESIGN.md section 5)::

        {"format": "onnx", "tensors": [{"name", "dtype", "shape", "sha256"}, ...]}

    The model is loaded with ``onnx.load(FILE, load_external_data=False)``. Tensors: first
    every ``graph.initializer`` in graph order, named by the initializer's name; then, for
    every node of the top-level graph with ``op_type == "Constant"`` and an attribute
    ``value`` (a TensorProto), in node order, that tensor, named by the node's
    ``output[0]`` (Constant nodes holding ``value_float``, ``value_ints``... or
    ``sparse_value`` are skipped). Values come from
    ``onnx.numpy_helper.to_array(tensor, base_dir=<the model's folder>)``: raw_data, the
    typed fields, or external data read relative to the model's folder. A string
    tensor's elements are the bytes of ``string_data`` as stored (to_array would decode
    them as UTF-8, and NumPy drops trailing NULs). dtype is the canonical name (f16 bf16
    f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool c64 c128 f8e4m3fn f8e5m2 string); shape
    is ``dims``. sha256 is over the elements in C order, little-endian (the raw element
    bytes for bf16 and float8), bool as one byte 0/1 (any non-zero byte is 1); a string
    tensor hashes, for each element in C order, its length as a u64 little-endian then
    its bytes. Exits 2 with a message on any other data type (int4, float8 *fnuz,
    float4...), naming it, or on a tensor whose element count does not match its dims.

check FILE [FILE...]
    For each model: ``onnx.checker.check_model(FILE, full_check=True)`` (by path, so
    external data is found and checked) and ``onnx.load(FILE)`` (external data loaded).
    Prints ``ok FILE`` per model; exits 1 naming the model and the checker's message on
    the first failure.

make-random DIR SEED N
    Writes N models no test has seen into DIR and prints each model's absolute path on
    its own line. Each holds one to five initializers of random dtypes from the list
    above (string included) and random shapes (0-d, zero-sized, up to 4 dims); numeric
    elements are mostly random bit patterns (NaN payloads, infinities, subnormals; bool
    0/1), else ordinary values; strings random UTF-8 (non-ASCII, embedded and trailing
    NULs, empty). Each tensor is stored at random in ``raw_data``
    (``numpy_helper.from_array`` or ``helper.make_tensor(..., raw=True)``) or in the
    typed field onnx uses for its dtype (``helper.make_tensor(..., raw=False)``). Names
    are random (dots, slashes, spaces, colons). About half the models also hold one to
    three Constant nodes whose ``value`` tensors (any dtype, raw or typed) are graph
    outputs. About 40% are saved with external data, each in a folder of its own: one
    file or one file per tensor (then with names safe as file names), a random
    ``size_threshold``, the Constant tensors too one time in two
    (``convert_attribute``). Every model passes ``onnx.checker.check_model(full_check=
    True)``. The same SEED gives the same models, byte for byte; a fresh SEED each run
    is the caller's job. Files and folders of this command's names already in DIR are
    replaced.

run MODEL INPUTS_NPZ OUTPUTS_NPZ
    Runs MODEL with onnxruntime (CPUExecutionProvider) on the arrays of INPUTS_NPZ (one
    per graph input, by input name; a missing or an extra array is an error) and writes
    every graph output, by output name, to OUTPUTS_NPZ (``numpy.savez``). Prints one line
    per output: name, dtype, shape. Exits 1 with onnxruntime's message on failure.
"""

import hashlib
import json
import os
import shutil
import sys

import ml_dtypes
import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper, numpy_helper

# TensorProto.DataType numbers by tensorfmt's canonical dtype name.
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
    "bf16": ml_dtypes.bfloat16, "f8e4m3fn": ml_dtypes.float8_e4m3fn,
    "f8e5m2": ml_dtypes.float8_e5m2,
}
# ml_dtypes' types have no byte order of their own: hashed as their raw element bits.
BITS = {np.dtype(ml_dtypes.bfloat16): np.uint16, np.dtype(ml_dtypes.float8_e4m3fn): np.uint8,
        np.dtype(ml_dtypes.float8_e5m2): np.uint8}
# The opset and IR version of the models made here and by tests/fixtures/onnx/generate.py:
# float8 needs IR 9 and Constant of float8 opset 19; onnxruntime 1.31 runs opset 21.
OPSET = 21
IR_VERSION = 10

assert sys.byteorder == "little", "tfcheck_onnx assumes a little-endian host"


class Unsupported(Exception):
    pass


def le_c_bytes(a):
    """The elements in C order, little-endian; bool as one byte 0/1 (as tfcheck.py)."""
    a = np.asarray(a)
    if a.dtype in BITS:
        a = a.view(BITS[a.dtype])
    if a.dtype.kind == "b":
        return (np.ascontiguousarray(a).view(np.uint8) != 0).astype(np.uint8).tobytes()
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def strings_sha256(elements):
    h = hashlib.sha256()
    for s in elements:
        h.update(len(s).to_bytes(8, "little"))
        h.update(s)
    return h.hexdigest()


# ---------------------------------------------------------------- describe

def model_tensors(model):
    """[(name, TensorProto)]: the initializers in graph order, then the `value` tensor of
    each Constant node of the top-level graph, named by its first output."""
    out = [(t.name, t) for t in model.graph.initializer]
    for node in model.graph.node:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
            continue
        for attr in node.attribute:
            if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                out.append((node.output[0], attr.t))
    return out


def describe_tensor(path, base, name, t):
    dtype = NAMES.get(t.data_type)
    if dtype is None:
        known = t.data_type in TensorProto.DataType.values()
        kind = TensorProto.DataType.Name(t.data_type) if known else "unknown"
        raise Unsupported(f"{path}: tensor {name!r} has data type {t.data_type} ({kind}), "
                          f"which has no tensorfmt name ({' '.join(CODES)})")
    shape = [int(d) for d in t.dims]
    count = int(np.prod(shape, dtype=np.int64))
    if dtype == "string":
        if len(t.string_data) != count:
            raise Unsupported(f"{path}: string tensor {name!r} has {len(t.string_data)} "
                              f"elements for dims {shape}")
        digest = strings_sha256(t.string_data)
    else:
        a = numpy_helper.to_array(t, base_dir=base)
        if list(a.shape) != shape:
            raise Unsupported(f"{path}: tensor {name!r}: to_array gave shape {list(a.shape)} "
                              f"for dims {shape}")
        digest = hashlib.sha256(le_c_bytes(a)).hexdigest()
    return {"name": name, "dtype": dtype, "shape": shape, "sha256": digest}


def describe(path):
    """The JSON line `tensorfmt inspect --json --sha256 path` must print."""
    model = onnx.load(path, load_external_data=False)
    base = os.path.dirname(os.path.abspath(path))
    out = [describe_tensor(path, base, n, t) for n, t in model_tensors(model)]
    return json.dumps({"format": "onnx", "tensors": out})


def cmd_describe(args):
    if not args:
        usage()
    for p in args:
        print(describe(p))
    return 0


# ---------------------------------------------------------------- check

def cmd_check(args):
    if not args:
        usage()
    for p in args:
        try:
            onnx.checker.check_model(p, full_check=True)
            onnx.load(p)
        except Exception as e:  # noqa: BLE001 (the checker raises several kinds)
            print(f"tfcheck_onnx check: {p}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        print(f"ok {p}")
    return 0


# ---------------------------------------------------------------- make-random

NAME_PARTS = ["layer", "w", "bias", "0", "1", "12", "conv.weight", "bn", "running_mean", "x",
              "encoder", "attn.q_proj", "MatMul_output_0", "B"]
# Separators safe in a file name (one external file per tensor is named after it), and
# the others.
SAFE_SEPS = [".", "_", "-"]
SEPS = SAFE_SEPS + ["/", " ", ":"]
STEMS = ["model", "m.v2", "weights-final", "a", "net"]
ALPHABET = "abcXYZ 09_\u00e9\u4e2d\U0001f600\x00"


def random_name(rng, taken, safe):
    seps = SAFE_SEPS if safe else SEPS
    while True:
        n = int(rng.integers(1, 4))
        parts = [NAME_PARTS[int(rng.integers(len(NAME_PARTS)))] for _ in range(n)]
        name = parts[0]
        for p in parts[1:]:
            name += seps[int(rng.integers(len(seps)))] + p
        if not safe and rng.random() < 0.2:
            name = "/" + name
        if name not in taken and not name.endswith((".onnx", ".data")):
            taken.add(name)
            return name


def random_shape(rng):
    ndim = int(rng.integers(0, 5))
    return tuple(int(rng.integers(0, 4)) if rng.random() < 0.12 else int(rng.integers(1, 6))
                 for _ in range(ndim))


def random_array(rng, dtype, shape):
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == "string":
        vals = []
        for _ in range(n):
            k = int(rng.integers(0, 7))
            vals.append("".join(ALPHABET[int(j)] for j in rng.integers(0, len(ALPHABET), size=k)).encode())
        a = np.empty(n, dtype=object)
        a[:] = vals
        return a.reshape(shape)
    dt = np.dtype(NUMPY[dtype])
    if dtype == "bool":
        return rng.integers(0, 2, size=n, dtype=np.uint8).view(np.bool_).reshape(shape)
    if rng.random() < 0.7:  # random bit patterns
        raw = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8)
        return np.frombuffer(raw.tobytes(), dtype=dt).reshape(shape).copy()
    a = rng.standard_normal(shape) * 100  # ordinary values
    if dtype in ("c64", "c128"):
        a = a + 1j * rng.standard_normal(shape)
    if dt.kind in "iu":
        a = np.clip(a, np.iinfo(dt).min, np.iinfo(dt).max)
    return np.asarray(a).astype(dt)


def random_tensor(rng, name, dtype, shape):
    a = random_array(rng, dtype, shape)
    if dtype == "string":
        # from_array keeps each bytes object as it is (make_tensor goes through a NumPy
        # bytes array, which drops trailing NULs).
        return numpy_helper.from_array(a, name=name)
    r = rng.random()
    if r < 0.35:
        return numpy_helper.from_array(a, name=name)
    if r < 0.5:
        return helper.make_tensor(name, CODES[dtype], shape, a, raw=True)
    return helper.make_tensor(name, CODES[dtype], shape, a, raw=False)


def random_model(rng, safe_names):
    taken = set()
    inits = []
    for _ in range(int(rng.integers(1, 6))):
        dtype = list(CODES)[int(rng.integers(len(CODES)))]
        inits.append(random_tensor(rng, random_name(rng, taken, safe_names), dtype, random_shape(rng)))
    nodes, outputs = [], []
    if rng.random() < 0.5:
        for _ in range(int(rng.integers(1, 4))):
            dtype = list(CODES)[int(rng.integers(len(CODES)))]
            shape = random_shape(rng)
            out = random_name(rng, taken, safe_names)
            # Named like its output: with one external file per tensor, the file's name.
            t = random_tensor(rng, out, dtype, shape)
            nodes.append(helper.make_node("Constant", [], [out], value=t))
            outputs.append(helper.make_tensor_value_info(out, CODES[dtype], shape))
    g = helper.make_graph(nodes, "random", [], outputs, initializer=inits)
    m = helper.make_model(g, producer_name="tfcheck_onnx", opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = IR_VERSION
    return m


def cmd_make_random(args):
    if len(args) != 3:
        usage()
    outdir, seed, count = args[0], int(args[1]), int(args[2])
    os.makedirs(outdir, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        external = rng.random() < 0.4
        one_file = bool(rng.random() < 0.5)
        m = random_model(rng, safe_names=external and not one_file)
        stem = STEMS[int(rng.integers(len(STEMS)))]
        if external:
            # A folder per model: onnx appends to an external file that exists already.
            folder = os.path.join(outdir, f"r{i:04d}")
            if os.path.lexists(folder):
                shutil.rmtree(folder)
            os.makedirs(folder)
            path = os.path.join(folder, f"{stem}.onnx")
            onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=one_file,
                            location=f"{stem}.data" if one_file else None,
                            # onnx compares sys.getsizeof(raw_data), 33 + its length.
                            size_threshold=0 if rng.random() < 0.5 else int(rng.integers(0, 300)),
                            convert_attribute=bool(rng.random() < 0.5))
        else:
            path = os.path.join(outdir, f"r{i:04d}-{stem}.onnx")
            onnx.save_model(m, path)
        try:
            onnx.checker.check_model(path, full_check=True)
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(f"made {path}, which onnx.checker refuses: {e}") from e
        print(os.path.abspath(path))
    return 0


# ---------------------------------------------------------------- run

def cmd_run(args):
    if len(args) != 3:
        usage()
    import onnxruntime as ort

    model, inputs_npz, outputs_npz = args
    try:
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        with np.load(inputs_npz, allow_pickle=False) as z:
            given = {k: z[k] for k in z.files}
        names = [i.name for i in sess.get_inputs()]
        missing = [n for n in names if n not in given]
        extra = [k for k in given if k not in names]
        if missing or extra:
            print(f"tfcheck_onnx run: {model} takes inputs {names}; {inputs_npz} holds "
                  f"{list(given)} (missing {missing}, extra {extra})", file=sys.stderr)
            return 1
        outs = sess.run(None, given)
    except Exception as e:  # noqa: BLE001 (onnxruntime raises its own kinds)
        print(f"tfcheck_onnx run: {model}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    result = {o.name: np.asarray(v) for o, v in zip(sess.get_outputs(), outs)}
    np.savez(outputs_npz, **result)
    for k, v in result.items():
        print(f"{k} {v.dtype} {list(v.shape)}")
    return 0


def usage():
    print(__doc__, file=sys.stderr)
    sys.exit(2)


def main(argv):
    if not argv:
        usage()
    cmds = {"describe": cmd_describe, "check": cmd_check, "make-random": cmd_make_random,
            "run": cmd_run}
    if argv[0] not in cmds:
        print(f"tfcheck_onnx: unknown subcommand {argv[0]!r}", file=sys.stderr)
        usage()
    try:
        return cmds[argv[0]](argv[1:])
    except Unsupported as e:
        print(f"tfcheck_onnx {argv[0]}: unsupported: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError, TypeError, RuntimeError, DecodeError,
            onnx.checker.ValidationError) as e:
        print(f"tfcheck_onnx {argv[0]}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
