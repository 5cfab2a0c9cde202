#!/usr/bin/env python3
"""The tensors of a whole pickled object, named by tensorfmt's rules for pickles of
objects; what the real tools load from a file tensorfmt converted such a pickle to.

Run with the project's Python environment (scripts/pyenv.sh: torch, NumPy and safetensors
pinned in tests/py/requirements.txt). tests/fixtures/objects/generate.py imports this
module for the same rules (`flatten`, `record`), applied there to the objects that
torch.load(weights_only=False), pickle.load and joblib.load give back.

Subcommands (each prints one line of JSON per FILE, in order, {"tensors": [{"name", "dtype", "shape",
"sha256"}, ...]}, and exits 0; exits 2 with a message when the file cannot be loaded or
holds a tensor of a dtype outside the list below):

load-weights-only FILE...
    torch.load(FILE, weights_only=True, map_location="cpu"), flattened by the rules.
load-safetensors FILE...
    safetensors.numpy.load_file(FILE) (safetensors.torch.load_file when the file holds
    bfloat16, which NumPy lacks); in the order load_file returns them.
load-npz FILE...
    numpy.load(FILE) (allow_pickle=False), its members in the archive's order, named
    without the ".npy".

Naming rules (the path starts empty; a name is its parts joined with "."):
  * dict, OrderedDict: each value under its key: the key itself if a str, its decimal
    digits if an int (not a bool), else repr(key); in the dict's order.
  * list, tuple: each item under its index in decimal.
  * torch.Tensor (Parameter and subclasses too) and numpy.ndarray of a numeric dtype
    (bool, int8..int64, uint8..uint64, float16/32/64, complex64/128; torch's bfloat16):
    a tensor named by its path. NumPy scalars are not tensors. An array of another
    dtype (object, strings, ...) is listed under "skipped" with its path and dtype.
  * torch.nn.Module: exactly the entries of module.state_dict(), each named
    path + "." + key (key alone at the root); nothing else of the module is walked.
  * any other object: its __dict__ items (attribute name as the part), then the
    attributes named in the __slots__ of its class and bases (MRO order, not __dict__ or
    __weakref__, only those set; a private one by its mangled name, as pickled), then, for a subclass of dict, list or tuple, its items
    as above.
  * classes, functions, modules, sets, strings, bytes, numbers, None: nothing.
  * something reached twice is walked (and its tensors listed) under each path; an
    object met again inside itself (a cycle) is not walked again.
dtype names: f16 bf16 f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool c64 c128. sha256: over
the elements in C order, little-endian, bool as one byte 0/1.
"""

import hashlib
import json
import sys
import types

import numpy as np
import torch

TORCH_DTYPES = {
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float32: "f32",
    torch.float64: "f64",
    torch.int8: "i8",
    torch.int16: "i16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
    torch.uint16: "u16",
    torch.uint32: "u32",
    torch.uint64: "u64",
    torch.bool: "bool",
    torch.complex64: "c64",
    torch.complex128: "c128",
}

# (kind, itemsize) of a NumPy dtype -> the name.
NUMPY_DTYPES = {
    ("b", 1): "bool",
    ("i", 1): "i8", ("i", 2): "i16", ("i", 4): "i32", ("i", 8): "i64",
    ("u", 1): "u8", ("u", 2): "u16", ("u", 4): "u32", ("u", 8): "u64",
    ("f", 2): "f16", ("f", 4): "f32", ("f", 8): "f64",
    ("c", 8): "c64", ("c", 16): "c128",
}

NOT_WALKED = (str, bytes, bytearray, int, float, complex, bool, type(None), type,
              types.FunctionType, types.BuiltinFunctionType, types.MethodType,
              types.ModuleType, set, frozenset, np.generic, np.dtype, torch.dtype,
              torch.device, torch.Size)


class Unsupported(Exception):
    pass


def numpy_dtype_name(a):
    if a.dtype.fields is not None or a.dtype.subdtype is not None:
        return None
    return NUMPY_DTYPES.get((a.dtype.kind, a.dtype.itemsize))


def numpy_bytes(a):
    """The elements in C order, little-endian."""
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def torch_bytes(t):
    """The elements in C order, little-endian (the host's order); bool as one byte 0/1."""
    t = t.detach().cpu().as_subclass(torch.Tensor).resolve_conj().resolve_neg()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    if t.numel() == 0:
        return b""
    # A fresh 1-d copy with stride 1 (.contiguous() keeps a size-1 dimension's odd
    # stride, which view(uint8) refuses); bf16 and the unsigned types go through bytes.
    flat = torch.empty(t.numel(), dtype=t.dtype).copy_(t.reshape(-1))
    return flat.view(torch.uint8).numpy().tobytes()


def record(name, x):
    """{"name", "dtype", "shape", "sha256"} of a tensor or numeric array."""
    if isinstance(x, torch.Tensor):
        dtype = TORCH_DTYPES[x.dtype]
        data = torch_bytes(x)
    else:
        dtype = numpy_dtype_name(x)
        data = numpy_bytes(x)
    return {"name": name, "dtype": dtype, "shape": [int(d) for d in x.shape],
            "sha256": hashlib.sha256(data).hexdigest()}


def key_part(k):
    if isinstance(k, str):
        return k
    if isinstance(k, int) and not isinstance(k, bool):
        return str(int(k))
    return repr(k)


def flatten(obj):
    """(tensors, skipped): [(name, tensor or array)] in walk order, and [(name, dtype
    string)] of the arrays and tensors of other dtypes."""
    tensors, skipped = [], []
    active = set()  # ids of the objects being walked (cycle guard)

    def join(prefix, part):
        return f"{prefix}.{part}" if prefix else part

    def items(o, prefix):
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, join(prefix, key_part(k)))
        elif isinstance(o, (list, tuple)):
            for i, v in enumerate(o):
                walk(v, join(prefix, str(i)))

    def attributes(o, prefix):
        d = getattr(o, "__dict__", None)
        if isinstance(d, dict):
            for k, v in list(d.items()):
                walk(v, join(prefix, key_part(k)))
        for cls in type(o).__mro__:
            slots = cls.__dict__.get("__slots__", ())
            if isinstance(slots, str):
                slots = (slots,)
            for s in slots:
                if s in ("__dict__", "__weakref__"):
                    continue
                # A private slot is stored (and pickled) under its mangled name.
                if s.startswith("__") and not s.endswith("__") and cls.__name__.lstrip("_"):
                    s = f"_{cls.__name__.lstrip('_')}{s}"
                try:
                    v = getattr(o, s)
                except AttributeError:
                    continue
                walk(v, join(prefix, s))

    def walk(o, prefix):
        if isinstance(o, torch.Tensor):
            if o.dtype in TORCH_DTYPES:
                tensors.append((prefix, o))
            else:
                skipped.append((prefix, str(o.dtype)))
            return
        if isinstance(o, np.ndarray):
            if numpy_dtype_name(o) is not None:
                tensors.append((prefix, o))
            else:
                skipped.append((prefix, o.dtype.str if o.dtype.fields is None else str(o.dtype)))
            return
        if isinstance(o, torch.nn.Module):
            for k, v in o.state_dict().items():
                walk(v, join(prefix, k))
            return
        if isinstance(o, NOT_WALKED):
            return
        if id(o) in active:
            return
        active.add(id(o))
        try:
            if type(o) in (dict, list, tuple):
                items(o, prefix)
            else:
                attributes(o, prefix)
                items(o, prefix)
        finally:
            active.discard(id(o))

    walk(obj, "")
    return tensors, skipped


def describe(obj):
    tensors, skipped = flatten(obj)
    return ([record(n, t) for n, t in tensors],
            [{"name": n, "dtype": d} for n, d in skipped])


def cmd_load_weights_only(path):
    obj = torch.load(path, weights_only=True, map_location="cpu")
    return obj


def cmd_load_safetensors(path):
    import safetensors.numpy
    try:
        return safetensors.numpy.load_file(path)
    except (TypeError, ValueError) as e:
        if "bf16" not in str(e).lower() and "bfloat16" not in str(e).lower():
            raise
        import safetensors.torch
        return safetensors.torch.load_file(path)


def cmd_load_npz(path):
    with np.load(path, allow_pickle=False) as z:
        return {name: z[name] for name in z.files}


def usage():
    print(__doc__, file=sys.stderr)
    return 2


def main(argv):
    cmds = {"load-weights-only": cmd_load_weights_only, "load-safetensors": cmd_load_safetensors,
            "load-npz": cmd_load_npz}
    if len(argv) < 2 or argv[0] not in cmds:
        return usage()
    cmd, paths = argv[0], argv[1:]
    # One line of JSON per file, in order (one process for many files: torch imports once).
    for path in paths:
        try:
            obj = cmds[cmd](path)
            tensors, skipped = describe(obj)
        except Exception as e:  # noqa: BLE001: any failure to load is the answer
            print(f"tfcheck_objects {cmd}: {path}: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        if skipped:
            names = ", ".join(f"{s['name']} ({s['dtype']})" for s in skipped)
            print(f"tfcheck_objects {cmd}: {path}: holds arrays of dtypes outside the list: "
                  f"{names}", file=sys.stderr)
            return 2
        print(json.dumps({"tensors": tensors}, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
