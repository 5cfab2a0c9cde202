#!/usr/bin/env python3
"""The safetensors package's side of tensorfmt's interop tests: what the real
`safetensors` (pinned in tests/py/requirements.txt) says about a file, and files it makes.

Subcommands
-----------
describe FILE [FILE...]
    Prints one line of JSON per file, exactly what ``tensorfmt inspect --json --sha256
    FILE`` must print::

        {"format": "safetensors", "tensors": [{"name", "dtype", "shape", "sha256"}, ...]}

    Read with ``safe_open(FILE, framework="pt")``: tensors in file order
    (in the order of the file's JSON header: by data offset for every file the
    package writes), each ``get_tensor``. dtype is the canonical name (f16 bf16 f32 f64 i8 i16
    i32 i64 u8 u16 u32 u64 bool c64 f8e4m3fn f8e5m2); sha256 is over the element bytes
    in C order, little-endian, bool as one byte 0/1.

metadata FILE
    Prints the file's ``__metadata__`` as JSON (``null`` when it has none), as
    ``safe_open(..).metadata()`` gives it.

make-random DIR SEED N
    Writes N files the package made that no test has seen: one to five tensors of random
    dtypes and shapes (0-d, zero-sized, up to 4 dims), random bit patterns, names with
    dots and slashes, by ``safetensors.torch.save_file``, half of them with a
    ``__metadata__`` of one key. Prints each file's absolute path on its own line. The
    same SEED gives the same files.

save NPZ OUT [KEY=VALUE]
    Writes the arrays of NPZ with ``safetensors.numpy.save_file`` (metadata: the
    KEY=VALUE given, if any): the bytes the package writes for those tensors.

compare-npz FILE NPZ
    Exits 0 when ``safetensors.numpy.load_file(FILE)`` holds exactly the arrays of NPZ
    (``np.load``): the same names, dtypes, shapes and bytes. Prints the differences and
    exits 1 otherwise.
"""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import load_file as np_load_file
from safetensors.numpy import save_file as np_save_file
from safetensors.torch import save_file as pt_save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tfcheck_torch import le_c_bytes  # noqa: E402

CANONICAL = {
    torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32",
    torch.float64: "f64", torch.int8: "i8", torch.int16: "i16", torch.int32: "i32",
    torch.int64: "i64", torch.uint8: "u8", torch.uint16: "u16", torch.uint32: "u32",
    torch.uint64: "u64", torch.bool: "bool", torch.complex64: "c64",
    torch.float8_e4m3fn: "f8e4m3fn", torch.float8_e5m2: "f8e5m2",
}


def element_bytes(t):
    """The elements in C order as stored (little-endian on the machines tests run on), as
    tfcheck_torch.le_c_bytes gives them (a fresh 1-d copy first: a tensor of one element
    with a stride of 0 counts as contiguous and will not view as bytes)."""
    return le_c_bytes(t)


def header_keys(path):
    """The tensors' names in the order of the file's JSON header (the order the package
    writes its data in; its ``offset_keys()`` orders tensors of one offset — empty ones —
    by a hash map, differently from run to run)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    return [k for k in header if k != "__metadata__"]


def describe(path):
    tensors = []
    with safe_open(path, framework="pt") as f:
        for name in header_keys(path):
            t = f.get_tensor(name)
            tensors.append({
                "name": name,
                "dtype": CANONICAL[t.dtype],
                "shape": [int(d) for d in t.shape],
                "sha256": hashlib.sha256(element_bytes(t)).hexdigest(),
            })
    return {"format": "safetensors", "tensors": tensors}


def cmd_describe(args):
    for p in args:
        print(json.dumps(describe(p)))
    return 0


def cmd_metadata(args):
    with safe_open(args[0], framework="pt") as f:
        print(json.dumps(f.metadata()))
    return 0


NAME_PARTS = ["layer", "w", "bias", "0", "1", "12", "conv.weight", "bn", "ü", "x"]


def cmd_make_random(args):
    out, seed, n = Path(args[0]), int(args[1]), int(args[2])
    rng = np.random.default_rng(seed)
    dtypes = list(CANONICAL)
    for i in range(n):
        tensors, taken = {}, set()
        for _ in range(int(rng.integers(1, 6))):
            while True:
                k = int(rng.integers(1, 4))
                parts = [NAME_PARTS[int(rng.integers(len(NAME_PARTS)))] for _ in range(k)]
                name = "".join(p + ("./"[int(rng.integers(2))] if j < k - 1 else "")
                               for j, p in enumerate(parts))
                if name not in taken:
                    taken.add(name)
                    break
            dt = dtypes[int(rng.integers(len(dtypes)))]
            ndim = int(rng.integers(0, 5))
            shape = [int(rng.integers(0, 4)) if rng.random() < 0.15 else int(rng.integers(1, 5))
                     for _ in range(ndim)]
            count = int(np.prod(shape, dtype=np.int64))
            item = torch.empty((), dtype=dt).element_size()
            raw = rng.integers(0, 256, size=count * item, dtype=np.uint8)
            if dt == torch.bool:
                raw = raw & 1
            t = (torch.from_numpy(raw.copy()).view(dt).reshape(shape) if count
                 else torch.empty(shape, dtype=dt))
            tensors[name] = t
        metadata = {"format": "pt"} if rng.random() < 0.5 else None
        p = (out / f"random_{i}.safetensors").resolve()
        pt_save_file(tensors, str(p), metadata=metadata)
        print(p)
    return 0


def cmd_save(args):
    npz, out = args[0], args[1]
    metadata = dict(kv.split("=", 1) for kv in args[2:]) or None
    with np.load(npz, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    np_save_file(arrays, out, metadata=metadata)
    return 0


def cmd_compare_npz(args):
    got = np_load_file(args[0])
    with np.load(args[1], allow_pickle=False) as z:
        want = {k: z[k] for k in z.files}
    diffs = []
    if sorted(got) != sorted(want):
        diffs.append(f"names {sorted(got)} != {sorted(want)}")
    for k in sorted(set(got) & set(want)):
        a, b = got[k], want[k]
        b = np.asarray(b, order="C").astype(b.dtype.newbyteorder("<"), copy=False)
        if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            diffs.append(f"{k}: {a.dtype}{a.shape} != {b.dtype}{b.shape} or bytes differ")
    for d in diffs:
        print(d)
    return 1 if diffs else 0


def main(argv):
    cmds = {"describe": cmd_describe, "metadata": cmd_metadata,
            "make-random": cmd_make_random, "save": cmd_save, "compare-npz": cmd_compare_npz}
    if len(argv) < 2 or argv[1] not in cmds:
        sys.exit(__doc__)
    return cmds[argv[1]](argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
