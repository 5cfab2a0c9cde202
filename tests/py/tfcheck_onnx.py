#!/usr/bin/env python3
"""ONNX's side of tensorfmt's interop tests: what the real onnx package says about a model.

Run with the project's Python environment (scripts/pyenv.sh: the onnx, onnxruntime and
NumPy pinned in tests/py/requirements.txt).

Subcommands
-----------
describe FILE [FILE...]
    Prints one line of JSON per model, exactly what ``tensorfmt inspect --json --sha256
    FILE`` must print (the README's `inspect --json` contract)::

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

check-written MODEL [--expect NPZ] [--same-graph-as ORIGINAL]
    Checks a model another program wrote. ``onnx.checker.check_model(MODEL,
    full_check=True)`` (by path: external data is found and checked), ``onnx.load(MODEL)``
    (external data loaded from the model's folder), then ``numpy_helper.to_array`` of every
    initializer. With ``--expect``, NPZ (``numpy.load``, ``allow_pickle=False``) must hold
    exactly the initializers' names, in graph order, and for each the same dtype (byte
    order aside: ONNX has none), shape and element bytes (little-endian, as stored: NaN
    payloads, -0.0 and bool bytes other than 0/1 count). bfloat16 and float8 initializers
    match a void array of their size (``|V2``, ``|V1``: what ``numpy.save`` writes for
    bfloat16; a float8 array saved as it is gets a descr ``numpy.load`` refuses, so view
    it as ``V1`` first) or, loaded otherwise, an array of that ml_dtypes type; string
    initializers match a ``U`` or ``S`` (UTF-8) array of equal elements as NumPy
    holds them (trailing NULs dropped on both sides). With ``--same-graph-as``, the
    initializers' names, dtypes and dims must be ORIGINAL's, in the same order, and the
    rest of the model must equal ORIGINAL's field for field: both loaded with their
    external data, ``graph.initializer`` cleared on both sides, then compared as protobuf
    messages (Constant nodes' tensors by content, wherever they are stored). Prints
    ``describe``'s JSON line of MODEL on success; exits 1 with a message naming the model
    and the tensor or field (``graph.node[3].attribute[0].t.raw_data``) on the first
    failure.

run MODEL INPUTS_NPZ OUTPUTS_NPZ
    Runs MODEL with onnxruntime (CPUExecutionProvider) on the arrays of INPUTS_NPZ (one
    per graph input, by input name; a missing or an extra array is an error) and writes
    every graph output, by output name, to OUTPUTS_NPZ (``numpy.savez``). Prints one line
    per output: name, dtype, shape. Exits 1 with onnxruntime's message on failure.

ort-replace ORIGINAL REPLACED WEIGHTS_NPZ [--seed N]
    Checks a model whose initializers another program replaced. The reference is ORIGINAL
    loaded with onnx (external data included), each initializer named in WEIGHTS_NPZ
    replaced by ``numpy_helper.from_array(npz[name], name)`` (every array must name an
    initializer of ORIGINAL and have its dtype and shape; bfloat16 and float8 may come as
    void arrays of their size, as for ``check-written``), saved to a temporary file. The
    reference, REPLACED and ORIGINAL are each run with onnxruntime (CPUExecutionProvider,
    one intra-op and one inter-op thread, sequential) on the same inputs, made from
    ORIGINAL's graph inputs (those not initializers) with ``numpy.random.default_rng(N)``
    (default 0), in input order: floating point standard normal, integers uniform in
    [0, 4), bool 0/1; a symbolic or unknown dimension is 3. Every output of REPLACED must
    equal the reference's exactly (same dtype and shape, ``numpy.array_equal`` with
    ``equal_nan`` for floating point): with one thread the same weights give the same
    bits. Prints one line of JSON::

        {"outputs": [names], "max_abs_diff_vs_reference": float or null,
         "changed_vs_original": bool}

    (the largest absolute difference over all outputs; null where one differs in dtype or
    shape, holds NaN where the other does not, or the difference is infinite). Exits 1,
    naming the output, when an output differs from the reference, and when no output
    differs from ORIGINAL's (the new weights then test nothing); exits 1 with
    onnxruntime's message when a model does not run.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

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


# ---------------------------------------------------------------- check-written

class Mismatch(Exception):
    """A written model that is not what it should be; the message names what differs."""


def short(v, n=60):
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def first_difference(a, b, path):
    """Where protobuf messages a and b (same type) first differ, as a field path with
    both values, or None when they are equal."""
    if a == b:
        return None
    for fd in a.DESCRIPTOR.fields:
        p = f"{path}.{fd.name}" if path else fd.name
        va, vb = getattr(a, fd.name), getattr(b, fd.name)
        if fd.is_repeated:
            for i, (x, y) in enumerate(zip(va, vb)):
                if fd.message_type is not None:
                    label = f"{p}[{i}]" + (f"(name={x.name!r})" if getattr(x, "name", "") else "")
                    d = first_difference(x, y, label)
                    if d:
                        return d
                elif x != y:
                    return f"{p}[{i}]: {short(x)} vs {short(y)}"
            if len(va) != len(vb):
                return f"{p}: {len(va)} entries vs {len(vb)}"
        elif fd.message_type is not None:
            if a.HasField(fd.name) != b.HasField(fd.name):
                return f"{p}: set in one model only"
            d = first_difference(va, vb, p)
            if d:
                return d
        elif va != vb:
            return f"{p}: {short(va)} vs {short(vb)}"
        elif fd.has_presence and a.HasField(fd.name) != b.HasField(fd.name):
            return f"{p}: {short(va)} set in one model only"
    return f"{path or 'model'}: unknown fields differ"


def same_dtype(got, want):
    """Whether an npz array's dtype `want` stands for the dtype `got` that to_array gave."""
    if got == object:  # strings
        return want.kind in "US"
    if got in BITS and want.kind == "V" and want.fields is None:
        return want.itemsize == got.itemsize
    return got.newbyteorder("<") == want.newbyteorder("<")


def element_bytes(a):
    """The elements in C order, little-endian, as stored (bool bytes not normalized;
    bfloat16 and float8 as their bits)."""
    if a.dtype in BITS:
        a = a.view(BITS[a.dtype])
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def compare_expected(arrays, npz):
    """Raises Mismatch unless `npz` holds exactly `arrays` ([(name, array)])."""
    with np.load(npz, allow_pickle=False) as z:
        names = list(z.files)
        got = [n for n, _ in arrays]
        if names != got:
            missing = [n for n in got if n not in names]
            extra = [n for n in names if n not in got]
            if missing or extra:
                raise Mismatch(f"initializers {got} but {npz} holds {names} "
                               f"(not in the npz: {missing}; not in the model: {extra})")
            i = next(i for i, (x, y) in enumerate(zip(got, names)) if x != y)
            raise Mismatch(f"initializer {i} is {got[i]!r}, {npz} has {names[i]!r} there "
                           f"(order {got} vs {names})")
        for name, a in arrays:
            e = z[name]
            if not same_dtype(a.dtype, e.dtype):
                raise Mismatch(f"initializer {name!r}: dtype {a.dtype}, {npz} has {e.dtype}")
            if a.shape != e.shape:
                raise Mismatch(f"initializer {name!r}: shape {list(a.shape)}, {npz} has {list(e.shape)}")
            if a.dtype == object:
                want = [s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s)
                        for s in e.ravel().tolist()]
                for i, (x, y) in enumerate(zip(a.ravel().tolist(), want)):
                    if x != y:
                        raise Mismatch(f"initializer {name!r}: element {i} (C order) is {x!r}, "
                                       f"{npz} has {y!r}")
                continue
            ba, be = element_bytes(a), element_bytes(e)
            if ba != be:
                diff = np.flatnonzero(np.frombuffer(ba, np.uint8) != np.frombuffer(be, np.uint8))
                k = a.dtype.itemsize
                i = int(diff[0]) // k
                raise Mismatch(f"initializer {name!r}: element {i} (C order) differs: "
                               f"{a.ravel()[i]!r} (bytes {ba[i * k:(i + 1) * k].hex()}) vs {npz}'s "
                               f"{e.ravel()[i]!r} (bytes {be[i * k:(i + 1) * k].hex()}); "
                               f"{diff.size} bytes differ")


def init_signature(t):
    return (t.name, NAMES.get(t.data_type, t.data_type), [int(d) for d in t.dims])


def compare_graph(model, original):
    """Raises Mismatch unless `model` is `original` but for its initializers' contents.
    Clears `model`'s initializers."""
    orig = onnx.load(original)
    got = [init_signature(t) for t in model.graph.initializer]
    want = [init_signature(t) for t in orig.graph.initializer]
    for i, (x, y) in enumerate(zip(got, want)):
        if x != y:
            raise Mismatch(f"initializer {i} (name, dtype, dims) is {x}, in {original} {y}")
    if len(got) != len(want):
        raise Mismatch(f"{len(got)} initializers, {original} has {len(want)}")
    del model.graph.initializer[:]
    del orig.graph.initializer[:]
    for m in (model, orig):
        # onnx.load sets data_location to DEFAULT on the tensors whose external data it
        # loaded: as if never set.
        for t in onnx.external_data_helper._get_all_tensors(m):
            if t.HasField("data_location") and t.data_location == TensorProto.DEFAULT:
                t.ClearField("data_location")
    d = first_difference(model, orig, "")
    if d:
        raise Mismatch(f"differs from {original} (initializers aside) at {d}")


def cmd_check_written(args):
    ap = argparse.ArgumentParser(prog="tfcheck_onnx.py check-written",
                                 description="Checks a model another program wrote.")
    ap.add_argument("model")
    ap.add_argument("--expect", metavar="NPZ", help="the initializers the model must hold")
    ap.add_argument("--same-graph-as", metavar="ORIGINAL",
                    help="the model this one must equal, initializers' contents aside")
    a = ap.parse_args(args)
    try:
        try:
            onnx.checker.check_model(a.model, full_check=True)
            model = onnx.load(a.model)
        except Exception as e:  # noqa: BLE001 (the checker raises several kinds)
            raise Mismatch(f"{type(e).__name__}: {e}") from e
        arrays = []
        for t in model.graph.initializer:
            try:
                arrays.append((t.name, numpy_helper.to_array(t)))
            except Exception as e:  # noqa: BLE001
                raise Mismatch(f"initializer {t.name!r}: to_array: {type(e).__name__}: {e}") from e
        if a.expect:
            compare_expected(arrays, a.expect)
        del arrays
        if a.same_graph_as:
            compare_graph(model, a.same_graph_as)
    except Mismatch as e:
        print(f"tfcheck_onnx check-written: {a.model}: {e}", file=sys.stderr)
        return 1
    print(describe(a.model))
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


# ---------------------------------------------------------------- ort-replace

def as_initializer_array(arr, t, where):
    """`arr` (from an npz) as an array of initializer `t`'s dtype and shape; raises
    Mismatch when it is not one."""
    want = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
    dims = tuple(int(d) for d in t.dims)
    if not same_dtype(want, arr.dtype) or want == object:
        raise Mismatch(f"{where}: {t.name!r} is {arr.dtype}, the initializer "
                       f"{NAMES.get(t.data_type, t.data_type)} ({want})")
    if arr.shape != dims:
        raise Mismatch(f"{where}: {t.name!r} has shape {list(arr.shape)}, the initializer {list(dims)}")
    if arr.dtype.kind == "V":
        return np.ascontiguousarray(arr).view(want)
    return arr.astype(want, copy=False)


def random_inputs(model, seed):
    """{name: array} for every graph input of `model` that is not an initializer."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
            raise Unsupported(f"input {vi.name!r} is not a tensor of known rank")
        shape = tuple(d.dim_value if d.HasField("dim_value") else 3 for d in tt.shape.dim)
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        if dtype.kind == "b":
            a = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif dtype.kind in "iu":
            a = rng.integers(0, 4, size=shape).astype(dtype)
        elif dtype.kind == "c":
            a = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
        elif dtype.kind == "f" or dtype in BITS:
            a = rng.standard_normal(shape).astype(dtype)
        else:
            raise Unsupported(f"input {vi.name!r} has element type {tt.elem_type} ({dtype})")
        out[vi.name] = a
    return out


def ort_outputs(path, inputs):
    """[(name, array)] of every output of the model at `path` on `inputs`, with
    onnxruntime on one thread; raises Mismatch with onnxruntime's message."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    try:
        sess = ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return list(zip(names, (np.asarray(v) for v in sess.run(None, inputs))))
    except Exception as e:  # noqa: BLE001 (onnxruntime raises its own kinds)
        raise Mismatch(f"{path}: onnxruntime: {type(e).__name__}: {e}") from e


def same_output(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def max_abs_diff(a, b):
    """The largest |a - b|, NaN where both are NaN counting as equal; None when the arrays
    differ in dtype or shape, one is NaN where the other is not, or it is infinite."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return None
    if a.size == 0:
        return 0.0
    if a.dtype.kind not in "biufc":
        return 0.0 if np.array_equal(a, b) else None
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    x, y = a.astype(wide), b.astype(wide)
    nx, ny = np.isnan(x), np.isnan(y)
    if (nx != ny).any():
        return None
    with np.errstate(invalid="ignore"):
        d = np.abs(np.where(nx, 0, x - y))
    d = np.where(np.isnan(d), 0, d)  # inf - inf of the same sign
    m = float(d.max())
    return m if np.isfinite(m) else None


def cmd_ort_replace(args):
    ap = argparse.ArgumentParser(prog="tfcheck_onnx.py ort-replace",
                                 description="Checks a model whose initializers were replaced.")
    ap.add_argument("original")
    ap.add_argument("replaced")
    ap.add_argument("weights_npz")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    a = ap.parse_args(args)
    try:
        ref = onnx.load(a.original)
        by_name = {t.name: t for t in ref.graph.initializer}
        with np.load(a.weights_npz, allow_pickle=False) as z:
            if not z.files:
                raise Mismatch(f"{a.weights_npz} holds no array")
            for name in z.files:
                t = by_name.get(name)
                if t is None:
                    raise Mismatch(f"{a.weights_npz}: {name!r} is no initializer of {a.original}")
                t.CopyFrom(numpy_helper.from_array(as_initializer_array(z[name], t, a.weights_npz), name))
        inputs = random_inputs(ref, a.seed)
        with tempfile.TemporaryDirectory(prefix="tfcheck-onnx-") as tmp:
            ref_path = os.path.join(tmp, "reference.onnx")
            # protobuf refuses messages over 2 GiB: large references keep their data beside.
            big = sum(len(t.raw_data) for t in ref.graph.initializer) > 1 << 30
            onnx.save_model(ref, ref_path, save_as_external_data=big, all_tensors_to_one_file=True,
                            location="reference.data")
            del ref, by_name
            want = ort_outputs(ref_path, inputs)
        got = ort_outputs(a.replaced, inputs)
        before = ort_outputs(a.original, inputs)
    except Mismatch as e:
        print(f"tfcheck_onnx ort-replace: {e}", file=sys.stderr)
        return 1
    names = [n for n, _ in want]
    failures = []
    if [n for n, _ in got] != names:
        failures.append(f"{a.replaced} has outputs {[n for n, _ in got]}, the reference {names}")
    diffs = []
    for (n, w), (_, g) in zip(want, got):
        diffs.append(max_abs_diff(w, g))
        if not same_output(w, g):
            failures.append(f"output {n!r} of {a.replaced} differs from the reference's: "
                            f"{g.dtype}{list(g.shape)} vs {w.dtype}{list(w.shape)}, "
                            f"max abs diff {diffs[-1]}")
    changed = any(not same_output(b, g) for (_, b), (_, g) in zip(before, got))
    if not changed:
        failures.append(f"every output of {a.replaced} equals {a.original}'s: the new weights "
                        f"change nothing these inputs show")
    print(json.dumps({
        "outputs": names,
        "max_abs_diff_vs_reference": None if any(d is None for d in diffs) else max(diffs, default=0.0),
        "changed_vs_original": changed,
    }))
    for f in failures:
        print(f"tfcheck_onnx ort-replace: {f}", file=sys.stderr)
    return 1 if failures else 0


def usage():
    print(__doc__, file=sys.stderr)
    sys.exit(2)


def main(argv):
    if not argv:
        usage()
    cmds = {"describe": cmd_describe, "check": cmd_check, "check-written": cmd_check_written,
            "make-random": cmd_make_random, "run": cmd_run, "ort-replace": cmd_ort_replace}
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
