#!/usr/bin/env python3
"""PyTorch's side of tensorfmt's interop tests: what the real torch says about a file.

Run with the project's Python environment (scripts/pyenv.sh: the torch and NumPy pinned in
tests/py/requirements.txt). Every checkpoint is loaded with
``torch.load(path, weights_only=True, map_location="cpu")`` (``weights_only=False`` when
torch refuses a NumPy global there: a checkpoint holding NumPy values); a TorchScript archive (a zip
with a ``constants.pkl`` record, which torch.load refuses under weights_only) with
``torch.jit.load(path, map_location="cpu")``: its attributes, recursively (what the
archive's ``data.pkl`` holds), then the constants of its code (``constants.pkl``).

Subcommands
-----------
describe FILE [FILE...]
    Prints one line of JSON per file, exactly what ``tensorfmt inspect --json --sha256 FILE`` must
    print (the README's `inspect --json` contract)::

        {"format": "pytorch"|"pytorch-legacy"|"torchscript",
         "tensors": [{"name", "dtype", "shape", "sha256"}, ...]}

    format: "pytorch" for the zip format (torch.save's default since 1.6),
    "pytorch-legacy" for ``_use_new_zipfile_serialization=False`` files, "torchscript"
    for torch.jit.save archives. Tensors in file order: the order in which they appear
    in the unpickled object, depth-first, dicts in insertion order, lists and tuples by
    index; names are the keys and indices on the way joined with "." (``model.0.weight``,
    ``optimizer.state.0.exp_avg``). Non-tensor leaves (ints, floats, strings, None) are
    skipped. A NumPy array in a checkpoint is a tensor like the others, named by its path
    (``np.random.get_state()`` under ``rng``: its state array is ``rng.1``); NumPy scalars
    are leaves. A tensor reached by two paths is listed under both names. A bare tensor at
    the top (``torch.save(t, "x.pt")``) is named after the file stem, as an npy is.
    TorchScript: every tensor attribute of the module and its submodules, by attribute
    path in the module's attribute order (parameters, buffers and other tensor attributes
    such as a plain ``self.t = torch.ones(2)``, then submodules: for an ordinary module
    the names of ``state_dict()``), then the code's constants named as the code names
    them, ``CONSTANTS.c0``... (a frozen module's weights live only there).
    dtype is the canonical name (f16 bf16 f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool c64
    c128 f8e4m3fn f8e5m2); sha256 is over the elements in C order, little-endian (the raw
    element bytes for bf16 and float8), bool as one byte 0/1. Exits 2 with a message on
    any other dtype (quantized, complex32, other float8 flavours...).

compare [--values-only | --contents | --storage] A B [A B ...]
    Exits 0 when A and B (any of the three formats) hold the same thing:
      * the same tensor names in the same order, same dtypes, shapes and bit-identical
        elements;
      * and, unless --values-only, the same layout: strides, storage offsets, storage
        sizes (bytes), storage sharing (which tensors view one storage: the same
        partition of names), Parameter or plain Tensor, requires_grad, and the same
        non-tensor leaves (names, types and values, e.g. ``epoch`` = 3).
    With --contents: names, dtypes, shapes, elements and the non-tensor leaves, not the
    layout (what a contiguous rewrite keeps). With --storage: --contents plus strides,
    storage offsets, storage sizes and storage sharing (all but Parameter-ness and
    requires_grad).
    Prints the differences and exits 1 otherwise; exits 2 when a file cannot be loaded.
    Several pairs are compared in turn; the exit status is that of the worst.

weights-only FILE [FILE...]
    Exits 0 when every FILE loads with ``torch.load(weights_only=True)`` (what a file
    tensorfmt writes must do, NumPy values turned into torch tensors and Python numbers);
    prints torch's refusal and exits 1 otherwise.

make-random OUTDIR SEED COUNT
    Writes COUNT checkpoints torch made that no test has seen, and prints each file's
    absolute path on its own line. Each holds a random state dict: random dtypes from the
    list above (bf16 and float8 included; element bytes are random bit patterns, bool
    0/1), random shapes (0-d, empty, up to 4 dims), non-contiguous views (transpose,
    slicing with a step, expand giving stride 0), several tensors viewing one storage at
    different offsets, nn.Parameter, and sometimes a nested checkpoint
    ``{"model": ..., "optimizer": {"state": {0: {...}}, "param_groups": [...]}, "epoch": n}``
    with ints, floats, tuples and lists. About half the checkpoints hold NumPy values
    too (their names have ``-numpy-``): arrays of NumPy's 14 numeric dtypes (random bit
    patterns, bool 0/1; big-endian and Fortran-order sometimes, 0-d and empty), and in a
    nested checkpoint NumPy scalars (float32, float64, int64, int32, bool) and sometimes
    ``np.random.get_state()`` under ``rng``. File names vary (the archive's folder is the file
    name without its last extension); about one file in four is the legacy format
    (``_use_new_zipfile_serialization=False``, classic dtypes only: torch 2.15 cannot load
    uint16/32/64 or float8 from a legacy file), and about one in six a TorchScript archive
    (``torch.jit.save`` of a scripted ``nn.Sequential`` of Linear, LayerNorm, BatchNorm1d
    and ReLU layers in a random float dtype, frozen with ``torch.jit.freeze`` one time in
    three). The same SEED gives the same objects (the zip files' bytes too; legacy files
    hold memory addresses as storage keys).
"""

import hashlib
import json
import os
import pickle
import sys
import zipfile
from pathlib import Path

import warnings

import numpy as np
import torch

# torch.jit.load warns that TorchScript is deprecated; the archives still load.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=FutureWarning)

# torch dtype -> tensorfmt's canonical dtype name.
CANONICAL = {
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
    torch.float8_e4m3fn: "f8e4m3fn",
    torch.float8_e5m2: "f8e5m2",
}
TORCH_OF = {v: k for k, v in CANONICAL.items()}
# Dtypes a legacy (non-zip) file can hold and torch 2.15 load back: the ones with a
# legacy storage class (FloatStorage, ...). The others go through UntypedStorage, which
# _legacy_load cannot map to a dtype.
LEGACY_OK = ["f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "bool", "c64", "c128"]

assert sys.byteorder == "little", "tfcheck_torch assumes a little-endian host"


class Unsupported(Exception):
    pass


def canonical_dtype(t, name, path):
    if t.dtype not in CANONICAL:
        raise Unsupported(f"{path}: tensor {name!r} has dtype {t.dtype}, which is outside "
                          f"tensorfmt's list ({' '.join(CANONICAL.values())})")
    return CANONICAL[t.dtype]


def le_c_bytes(t):
    """The elements in C order, little-endian (the host's order); bool as one byte 0/1."""
    t = t.detach()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    if t.numel() == 0:
        return b""
    # A fresh 1-d copy with stride 1: .contiguous() keeps a size-1 dimension's odd stride,
    # which view(uint8) refuses.
    flat = torch.empty(t.numel(), dtype=t.dtype).copy_(t.reshape(-1))
    return flat.view(torch.uint8).numpy().tobytes()


# ---------------------------------------------------------------- loading

def file_format(path):
    """'pytorch', 'pytorch-legacy' or 'torchscript', from the container alone."""
    if not zipfile.is_zipfile(path):
        return "pytorch-legacy"
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
    prefix = names[0].split("/", 1)[0] if names else ""
    return "torchscript" if f"{prefix}/constants.pkl" in names else "pytorch"


def load_obj(path):
    """(format, the unpickled object)."""
    fmt = file_format(path)
    if fmt == "torchscript":
        return fmt, script_tensors(torch.jit.load(path, map_location="cpu"))
    try:
        return fmt, torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        # torch refuses NumPy values under weights_only, and the FRAME opcode of pickle
        # protocols 4 and 5 ("Unsupported operand 149"): torch.load reads those with
        # weights_only=False. The files the tests hand here (fixtures, files torch made,
        # files tensorfmt wrote) are trusted.
        if "numpy" not in str(e) and "Unsupported operand 149" not in str(e):
            raise
        return fmt, torch.load(path, weights_only=False, map_location="cpu")


def from_numpy(a):
    """A NumPy array as a torch tensor of the same elements over a storage of its own, in
    native byte order, its layout kept (a Fortran-order array has column-major strides);
    an empty one contiguous (torch gives an empty array zero strides)."""
    t = torch.from_numpy(np.array(a, dtype=a.dtype.newbyteorder("="), order="K"))
    return t.new_empty(t.shape) if t.numel() == 0 else t


def script_attributes(module):
    """A scripted module's attributes as an ordered dict, submodules as nested dicts."""
    out = {}
    for name, value in torch._C._jit_debug_module_iterators(module._c)["named_attributes"]:
        if isinstance(value, torch._C.ScriptModule):
            out[name] = script_attributes(getattr(module, name))
        else:
            out[name] = value
    return out


def script_tensors(module):
    """The attributes of a TorchScript module, then its code's constants (CONSTANTS.cN)."""
    out = script_attributes(module)
    constants = module.code_with_constants[1].const_mapping
    for i in range(len(constants)):
        out[f"CONSTANTS.c{i}"] = constants[f"c{i}"]
    return out


def walk(obj, prefix, tensors, leaves):
    """Depth-first: tensors -> [(name, tensor)], other leaves -> [(name, value)]."""
    def join(k):
        return f"{prefix}.{k}" if prefix else str(k)

    if isinstance(obj, torch.Tensor):
        tensors.append((prefix, obj))
    elif isinstance(obj, np.ndarray):
        tensors.append((prefix, from_numpy(obj)))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            walk(v, join(k), tensors, leaves)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            walk(v, join(i), tensors, leaves)
    else:
        leaves.append((prefix, obj))


def load(path):
    """(format, [(name, tensor)] in file order, [(name, non-tensor leaf)])."""
    fmt, obj = load_obj(path)
    tensors, leaves = [], []
    if isinstance(obj, torch.Tensor):
        tensors.append((Path(path).stem, obj))
    else:
        walk(obj, "", tensors, leaves)
    return fmt, tensors, leaves


def describe(path):
    fmt, tensors, _ = load(path)
    out = []
    for name, t in tensors:
        out.append({
            "name": name,
            "dtype": canonical_dtype(t, name, path),
            "shape": [int(d) for d in t.shape],
            "sha256": hashlib.sha256(le_c_bytes(t)).hexdigest(),
        })
    return {"format": fmt, "tensors": out}


def cmd_describe(args):
    if not args:
        usage()
    for a in args:
        print(json.dumps(describe(a), sort_keys=False))
    return 0


# ---------------------------------------------------------------- compare

def layout(tensors):
    """Per name: (stride, storage_offset, storage nbytes, kind, requires_grad); and the
    storage-sharing partition (a set of frozensets of names), storages of 0 bytes left out."""
    per, groups = {}, {}
    for name, t in tensors:
        st = t.untyped_storage()
        per[name] = (tuple(t.stride()), t.storage_offset(), st.nbytes(),
                     "Parameter" if isinstance(t, torch.nn.Parameter) else "Tensor",
                     bool(t.requires_grad))
        if st.nbytes() > 0:
            groups.setdefault(st.data_ptr(), []).append(name)
    return per, {frozenset(g) for g in groups.values()}


def leaf_repr(v):
    # A NumPy scalar is the Python number NumPy prints (np.float32(0.1) is 0.1): what
    # tensorfmt shows and writes for it.
    if isinstance(v, np.bool_):
        v = bool(v)
    elif isinstance(v, np.integer):
        v = int(v)
    elif isinstance(v, np.floating):
        v = float(str(v))
    return f"{type(v).__name__}:{v!r}"


def differences(path_a, path_b, values_only=False, layout_too=True, kinds_too=True):
    """What differs between two files, as a list of lines (empty: the same)."""
    (_, ta, la), (_, tb, lb) = load(path_a), load(path_b)
    problems = []
    na, nb = [n for n, _ in ta], [n for n, _ in tb]
    if na != nb:
        problems.append(f"tensor names differ:\n    {na}\n    {nb}")
    else:
        for (name, a), (_, b) in zip(ta, tb):
            if a.dtype != b.dtype:
                problems.append(f"{name}: dtype {a.dtype} vs {b.dtype}")
                continue
            if a.shape != b.shape:
                problems.append(f"{name}: shape {tuple(a.shape)} vs {tuple(b.shape)}")
                continue
            ba, bb = le_c_bytes(a), le_c_bytes(b)
            if ba != bb:
                first = next(i for i in range(len(ba)) if ba[i] != bb[i])
                problems.append(f"{name}: elements differ (first at byte {first} of {len(ba)}, "
                                f"element {first // max(a.element_size(), 1)})")
        if not values_only and layout_too:
            (pa, sa), (pb, sb) = layout(ta), layout(tb)
            fields = ("stride", "storage_offset", "storage nbytes", "kind", "requires_grad")
            if not kinds_too:
                fields = fields[:3]
            for name in na:
                for f, x, y in zip(fields, pa[name], pb[name]):
                    if x != y:
                        problems.append(f"{name}: {f} {x} vs {y}")
            if sa != sb:
                def show(s):
                    return sorted(sorted(g) for g in s if len(g) > 1)
                problems.append(f"storage sharing differs: {show(sa)} vs {show(sb)}")
    if not values_only:
        ra = [(n, leaf_repr(v)) for n, v in la]
        rb = [(n, leaf_repr(v)) for n, v in lb]
        if ra != rb:
            problems.append(f"non-tensor leaves differ:\n    {ra}\n    {rb}")
    return problems


def cmd_weights_only(args):
    """Each file must load with ``torch.load(weights_only=True)``: no NumPy global, nothing
    torch's safe unpickler refuses."""
    if not args:
        usage()
    status = 0
    for a in args:
        try:
            torch.load(a, weights_only=True, map_location="cpu")
        except pickle.UnpicklingError as e:
            print(f"{a}: torch.load(weights_only=True) refuses it: {e}", file=sys.stderr)
            status = 1
    if status == 0:
        print(f"weights_only: {len(args)} files load")
    return status


def cmd_compare(args):
    values_only, layout_too, kinds_too = False, True, True
    if args and args[0] == "--values-only":
        values_only, args = True, args[1:]
    elif args and args[0] == "--contents":
        layout_too, args = False, args[1:]
    elif args and args[0] == "--storage":
        kinds_too, args = False, args[1:]
    if not args or len(args) % 2:
        usage()
    status = 0
    for a, b in zip(args[0::2], args[1::2]):
        problems = differences(a, b, values_only, layout_too, kinds_too)
        if problems:
            print(f"{a} ({file_format(a)}) and {b} ({file_format(b)}) differ:", file=sys.stderr)
            for p in problems:
                print("  " + p, file=sys.stderr)
            status = 1
            continue
        n = len(load(a)[1])
        print(f"identical: {n} tensors" + (" (values only)" if values_only else ""))
    return status


# ---------------------------------------------------------------- make-random

NAME_PARTS = ["layer", "w", "bias", "0", "1", "12", "conv.weight", "bn", "running_mean", "x",
              "encoder", "attn.q_proj"]
STEMS = ["model", "ckpt.v2", "weights-final", "a", "archive", "pytorch_model", "x.y.z", "e"]
EXTS = [".pt", ".pth", ".bin", ".ckpt", ""]
# NumPy's numeric dtypes (the ones a NumPy array in a checkpoint may have).
NUMPY_DTYPES = ["?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"]


def random_name(rng, taken):
    while True:
        n = int(rng.integers(1, 4))
        name = ".".join(NAME_PARTS[int(rng.integers(len(NAME_PARTS)))] for _ in range(n))
        if name not in taken:
            taken.add(name)
            return name


def random_shape(rng, min_dims=0, max_dims=4):
    ndim = int(rng.integers(min_dims, max_dims + 1))
    return tuple(int(rng.integers(0, 5)) if rng.random() < 0.12 else int(rng.integers(1, 6))
                 for _ in range(ndim))


def random_tensor(rng, dtypes, shape=None):
    canon = dtypes[int(rng.integers(len(dtypes)))]
    dt = TORCH_OF[canon]
    if shape is None:
        shape = random_shape(rng)
    n = int(np.prod(shape, dtype=np.int64))
    size = torch.empty((), dtype=dt).element_size()
    if canon == "bool":
        raw = rng.integers(0, 2, size=n, dtype=np.uint8)
    else:
        raw = rng.integers(0, 256, size=n * size, dtype=np.uint8)
    flat = torch.from_numpy(raw.copy())
    return flat.view(dt).reshape(shape) if n else torch.empty(shape, dtype=dt)


def random_view(rng, dtypes):
    """A non-contiguous tensor: transposed, stepped slice, or expanded (stride 0)."""
    kind = int(rng.integers(3))
    if kind == 0:
        t = random_tensor(rng, dtypes, random_shape(rng, 2, 4))
        return t.transpose(0, t.dim() - 1)
    if kind == 1:
        t = random_tensor(rng, dtypes, random_shape(rng, 1, 3))
        step = int(rng.integers(2, 4))
        return t[::step]
    t = random_tensor(rng, dtypes, (1,) + random_shape(rng, 1, 2))
    return t.expand((int(rng.integers(2, 5)),) + tuple(t.shape[1:]))


def random_shared(rng, dtypes, names, out):
    """Two to four views of one storage at different offsets."""
    base = random_tensor(rng, dtypes, (int(rng.integers(8, 40)),))
    n = base.numel()
    for _ in range(int(rng.integers(2, 5))):
        start = int(rng.integers(0, n - 1))
        stop = int(rng.integers(start + 1, n + 1))
        v = base[start:stop]
        if v.numel() % 2 == 0 and rng.random() < 0.4:
            v = v.view(2, -1)
        out[random_name(rng, names)] = v


def random_array(rng):
    """A NumPy array of one of NumPy's 14 numeric dtypes: random bits (bool 0/1), a random
    shape (0-d and empty too), big-endian and Fortran order sometimes."""
    dt = np.dtype(NUMPY_DTYPES[int(rng.integers(len(NUMPY_DTYPES)))])
    if dt.itemsize > 1 and rng.random() < 0.3:
        dt = dt.newbyteorder(">")
    shape = random_shape(rng)
    n = int(np.prod(shape, dtype=np.int64))
    if dt.kind == "b":
        raw = rng.integers(0, 2, size=n, dtype=np.uint8)
    else:
        raw = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8)
    a = raw.view(dt).reshape(shape)
    if a.ndim >= 2 and rng.random() < 0.4:
        a = np.asfortranarray(a)
    return a


def random_scalar(rng):
    """A NumPy scalar, as training scripts keep a learning rate, a step or a flag."""
    kind = int(rng.integers(5))
    if kind == 0:
        return np.float32(rng.random())
    if kind == 1:
        return np.float64(rng.standard_normal())
    if kind == 2:
        return np.int64(rng.integers(-10**6, 10**6))
    if kind == 3:
        return np.int32(rng.integers(-1000, 1000))
    return np.bool_(rng.random() < 0.5)


def random_numpy_state(rng):
    """``np.random.get_state()`` of NumPy's global generator, seeded from `rng` and part
    way through (a state tuple: 'MT19937', the u32 (624,) key, pos, has_gauss, cached)."""
    np.random.seed(int(rng.integers(2**32)))
    np.random.random(int(rng.integers(0, 700)))
    if rng.random() < 0.5:
        np.random.standard_normal()  # leaves a cached Gaussian
    return np.random.get_state()


def random_state(rng, dtypes, numpy=False):
    names, sd = set(), {}
    for _ in range(int(rng.integers(1, 7))):
        r = rng.random()
        if numpy and rng.random() < 0.3:
            sd[random_name(rng, names)] = random_array(rng)
        elif r < 0.45:
            sd[random_name(rng, names)] = random_tensor(rng, dtypes)
        elif r < 0.7:
            sd[random_name(rng, names)] = random_view(rng, dtypes)
        elif r < 0.85:
            random_shared(rng, dtypes, names, sd)
        else:
            floats = [d for d in dtypes if d in ("f16", "bf16", "f32", "f64", "c64", "c128")]
            t = random_tensor(rng, floats)
            sd[random_name(rng, names)] = torch.nn.Parameter(t, requires_grad=bool(rng.random() < 0.5))
    return sd


def random_checkpoint(rng, dtypes, model, numpy=False):
    """An optimizer-like nested dict around `model`; with `numpy`, sometimes NumPy
    scalars and ``np.random.get_state()`` too."""
    keys = list(model)
    state = {}
    for i in range(min(len(keys), int(rng.integers(0, 3)))):
        entry = {"step": torch.tensor(float(rng.integers(1, 100)))}
        for k in ("exp_avg", "exp_avg_sq")[: int(rng.integers(1, 3))]:
            entry[k] = random_tensor(rng, dtypes, random_shape(rng, 0, 2))
        state[i] = entry
    ckpt = {
        "model": model,
        "optimizer": {
            "state": state,
            "param_groups": [{"lr": float(rng.random()), "betas": (0.9, 0.999), "eps": 1e-8,
                              "amsgrad": False, "params": list(range(len(keys)))}],
        },
        "epoch": int(rng.integers(0, 1000)),
        "tag": "random",
    }
    if numpy:
        if rng.random() < 0.5:
            ckpt["rng"] = random_numpy_state(rng)
        for k in ("lr", "step", "best", "flag")[: int(rng.integers(0, 5))]:
            ckpt[k] = random_scalar(rng)
    return ckpt


def random_script_module(rng):
    """A scripted nn.Sequential with random layers and a random float dtype."""
    layers, width = [], int(rng.integers(1, 6))
    for _ in range(int(rng.integers(1, 5))):
        kind = int(rng.integers(4))
        if kind == 0:
            out = int(rng.integers(1, 6))
            layers.append(torch.nn.Linear(width, out, bias=bool(rng.random() < 0.7)))
            width = out
        elif kind == 1:
            layers.append(torch.nn.LayerNorm(width))
        elif kind == 2:
            layers.append(torch.nn.BatchNorm1d(width))
        else:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.dtype.is_floating_point:
                t.copy_(torch.from_numpy(rng.standard_normal(tuple(t.shape))))
    dtype = [torch.float32, torch.float64, torch.bfloat16, torch.float16][int(rng.integers(4))]
    scripted = torch.jit.script(model.to(dtype))
    if rng.random() < 1 / 3:
        scripted = torch.jit.freeze(scripted.eval())
    return scripted


def cmd_make_random(args):
    if len(args) != 3:
        usage()
    outdir, seed, count = Path(args[0]), int(args[1]), int(args[2])
    outdir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        if rng.random() < 1 / 6:
            stem = STEMS[int(rng.integers(len(STEMS)))]
            path = outdir / f"r{i:04d}-script-{stem}.pt"
            torch.jit.save(random_script_module(rng), str(path))
            print(os.path.abspath(path))
            continue
        legacy = rng.random() < 0.25
        dtypes = LEGACY_OK if legacy else list(TORCH_OF)
        numpy = rng.random() < 0.5
        obj = random_state(rng, dtypes, numpy)
        if rng.random() < (0.5 if numpy else 0.3):
            obj = random_checkpoint(rng, dtypes, obj, numpy)
        stem = STEMS[int(rng.integers(len(STEMS)))]
        ext = EXTS[int(rng.integers(len(EXTS)))]
        path = outdir / f"r{i:04d}-{'legacy-' if legacy else ''}{'numpy-' if numpy else ''}{stem}{ext}"
        if legacy:
            torch.save(obj, path, _use_new_zipfile_serialization=False)
        else:
            torch.save(obj, path)
        print(os.path.abspath(path))
    return 0


def usage():
    print(__doc__, file=sys.stderr)
    sys.exit(2)


def main(argv):
    if not argv:
        usage()
    cmds = {"describe": cmd_describe, "make-random": cmd_make_random, "compare": cmd_compare,
            "weights-only": cmd_weights_only}
    if argv[0] not in cmds:
        print(f"tfcheck_torch: unknown subcommand {argv[0]!r}", file=sys.stderr)
        usage()
    try:
        return cmds[argv[0]](argv[1:])
    except Unsupported as e:
        print(f"tfcheck_torch: unsupported dtype: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError, EOFError, RuntimeError, zipfile.BadZipFile, pickle.UnpicklingError) as e:
        print(f"tfcheck_torch {argv[0]}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
