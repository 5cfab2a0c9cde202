#!/usr/bin/env python3
"""NumPy's side of tensorfmt's interop tests: what the real tool says about a file.

Run with the test environment's python (`scripts/pyenv.sh` prints it; the Rust tests
take it from $TENSORFMT_PYTHON). Uses only NumPy and the standard library; npy and npz
files are loaded with ``np.load(path, allow_pickle=False)``, ``.pkl`` and ``.pickle`` files
(pickles of NumPy arrays, made by the tests or committed fixtures: loading a pickle runs
what it names) with ``pickle.load(f, encoding='latin1')``.

Subcommands
-----------
describe FILE [FILE...]
    Prints one line of JSON per file, exactly what ``tensorfmt inspect --json --sha256 FILE`` must
    print (the README's `inspect --json` contract)::

        {"format": "npy"|"npz"|"pickle", "tensors": [{"name", "dtype", "shape", "sha256"}, ...]}

    Tensors in file order: for npz the zip member order (NpzFile.files), names without
    ``.npy``; for npy one tensor named after the file stem; for a pickle ("format":
    "pickle") every ``np.ndarray`` in the unpickled object, depth-first, dicts in insertion
    order, lists and tuples by index, named by the keys and indices on the way joined with
    "." (``nested.conv.w``, ``seq.1.0``; an array at the root has the empty name). Keys
    are named when they are text, integers, booleans or None (``str(k)``); entries under
    other keys (tuples, floats, bytes) have no name and are skipped, as tensorfmt does.
    Other leaves (floats, NumPy scalars, text) are skipped. dtype is the canonical name
    (f16 f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool c64 c128); sha256 is over the
    elements in C order, little-endian, bool as one byte 0/1. Exits 2 with a message on
    a dtype outside that list (strings, structured, datetime, object, long double...).

make-random OUTDIR SEED COUNT
    Writes COUNT files NumPy made that no test has seen: random dtypes from the list in
    both byte orders, random shapes (0-d, empty, up to 4 dims), C or Fortran order, as
    .npy (np.save; sometimes write_array with header version 2.0 or 3.0) or as .npz with
    1-4 arrays whose names hold dots and slashes, stored (np.savez) or deflated
    (np.savez_compressed). Element bytes are random bit patterns (NaN payloads,
    subnormals, -0.0 included). Prints each file's absolute path on its own line.
    The same SEED gives the same files.

make-random-pickle OUTDIR SEED COUNT
    Writes COUNT pickles of NumPy arrays that no test has seen (``pickle.dump`` at
    protocol 0, 1, 2, 4 or 5, chosen at random), as .pkl or .pickle: the arrays of make-random
    (random dtypes in both byte orders, 0-d and empty shapes, C or Fortran order) in
    nested dicts (text and integer keys), lists and tuples beside floats, ints, text,
    None and NumPy scalars, at least one array each; the root is a dict, a list, or
    (rarely) one array. Prints
    each file's absolute path on its own line. The same SEED gives the same files.

compare A B
    Exits 0 when A and B (npy or npz, any mix) hold the same tensors: same names in the
    same order, same dtype up to byte order, same shape and bit-identical elements
    (``tobytes()`` of little-endian C-contiguous copies). An npy stores no name, so
    names are compared only when both files are npz; a side that is npy must be compared
    with a file holding exactly one array. Prints the differences and exits 1
    otherwise; exits 2 when a file cannot be loaded.
"""

import hashlib
import json
import os
import pickle
import sys
from pathlib import Path

import numpy as np

# NumPy (kind, itemsize) -> tensorfmt's canonical dtype name.
CANONICAL = {
    ("f", 2): "f16",
    ("f", 4): "f32",
    ("f", 8): "f64",
    ("i", 1): "i8",
    ("i", 2): "i16",
    ("i", 4): "i32",
    ("i", 8): "i64",
    ("u", 1): "u8",
    ("u", 2): "u16",
    ("u", 4): "u32",
    ("u", 8): "u64",
    ("b", 1): "bool",
    ("c", 8): "c64",
    ("c", 16): "c128",
}
# Canonical name -> NumPy dtype string without byte order.
NUMPY_OF = {
    "f16": "f2", "f32": "f4", "f64": "f8",
    "i8": "i1", "i16": "i2", "i32": "i4", "i64": "i8",
    "u8": "u1", "u16": "u2", "u32": "u4", "u64": "u8",
    "bool": "b1", "c64": "c8", "c128": "c16",
}


class Unsupported(Exception):
    pass


def canonical_dtype(dt, name, path):
    key = (dt.kind, dt.itemsize)
    if dt.fields is not None or dt.subdtype is not None or key not in CANONICAL:
        raise Unsupported(
            f"{path}: tensor {name!r} has dtype {dt.str!r} ({dt}), which is outside "
            f"tensorfmt's list ({' '.join(CANONICAL.values())})"
        )
    return CANONICAL[key]


def le_c_bytes(a):
    """The elements in C order, little-endian; bool as one byte 0/1."""
    a = np.asarray(a)
    if a.dtype.kind == "b":
        return (np.ascontiguousarray(a).view(np.uint8) != 0).astype(np.uint8).tobytes()
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


PICKLE_SUFFIXES = (".pkl", ".pickle")


def named_key(k):
    """A dict key's name in a path: text as it is, an integer in decimal, any other key
    (a tuple, bytes, a float, None, a bool) as Python's repr of it."""
    if isinstance(k, str):
        return k
    if isinstance(k, int) and not isinstance(k, bool):
        return str(k)
    return repr(k)


def unique_names(found):
    """`found` with the later of names taken twice suffixed `#2`, `#3`, ... (the first of
    these not already a name), as tensorfmt tells them apart."""
    seen, taken, nxt, out = set(), set(n for n, _ in found), {}, []
    for name, a in found:
        if name not in seen:
            seen.add(name)
            out.append((name, a))
            continue
        k = nxt.get(name, 2)
        while f"{name}#{k}" in taken:
            k += 1
        nxt[name] = k + 1
        taken.add(f"{name}#{k}")
        out.append((f"{name}#{k}", a))
    return out


def walk_pickle(obj, prefix, found):
    """Depth-first: every np.ndarray in `obj` -> found as (path, array)."""
    def join(part):
        return f"{prefix}.{part}" if prefix else part

    if isinstance(obj, np.ndarray):
        found.append((prefix, obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            walk_pickle(v, join(named_key(k)), found)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            walk_pickle(v, join(str(i)), found)


def load(path):
    """[(name, array)] in file order, and the format name."""
    if str(path).endswith(PICKLE_SUFFIXES):
        with open(path, "rb") as f:
            obj = pickle.load(f, encoding="latin1")
        found = []
        walk_pickle(obj, "", found)
        return "pickle", unique_names(found)
    obj = np.load(path, allow_pickle=False)
    if isinstance(obj, np.ndarray):
        return "npy", [(Path(path).stem, obj)]
    with obj:
        return "npz", [(k, obj[k]) for k in obj.files]


def describe(path):
    fmt, arrays = load(path)
    tensors = []
    for name, a in arrays:
        tensors.append({
            "name": name,
            "dtype": canonical_dtype(a.dtype, name, path),
            "shape": [int(d) for d in a.shape],
            "sha256": hashlib.sha256(le_c_bytes(a)).hexdigest(),
        })
    return {"format": fmt, "tensors": tensors}


def cmd_describe(args):
    if not args:
        usage()
    for a in args:
        print(json.dumps(describe(a), sort_keys=False))
    return 0


# ---------------------------------------------------------------- make-random

NAME_PARTS = ["layer", "w", "bias", "0", "1", "12", "conv.weight", "bn", "running_mean", "x"]


def random_name(rng, taken):
    while True:
        n = int(rng.integers(1, 4))
        parts = [NAME_PARTS[int(rng.integers(len(NAME_PARTS)))] for _ in range(n)]
        seps = [(".", "/")[int(rng.integers(2))] for _ in range(n - 1)]
        name = parts[0] + "".join(s + p for s, p in zip(seps, parts[1:]))
        # 'file' and 'allow_pickle' are np.savez's own keywords; 'arr_N' its positional names.
        if name not in taken and name not in ("file", "allow_pickle"):
            taken.add(name)
            return name


def random_array(rng):
    canon = list(NUMPY_OF)[int(rng.integers(len(NUMPY_OF)))]
    code = NUMPY_OF[canon]
    order = "<>"[int(rng.integers(2))] if code not in ("i1", "u1", "b1") else "|"
    dt = np.dtype(order + code)
    ndim = int(rng.integers(0, 5))
    shape = tuple(int(rng.integers(0, 6)) if rng.random() < 0.15 else int(rng.integers(1, 6))
                  for _ in range(ndim))
    n = int(np.prod(shape, dtype=np.int64))
    if canon == "bool":
        raw = rng.integers(0, 2, size=n, dtype=np.uint8).tobytes()
    else:
        raw = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8).tobytes()
    a = np.frombuffer(raw, dtype=dt).reshape(shape).copy()
    if ndim >= 2 and rng.random() < 0.5:
        a = np.asfortranarray(a)
    return a


def cmd_make_random(args):
    if len(args) != 3:
        usage()
    outdir, seed, count = Path(args[0]), int(args[1]), int(args[2])
    outdir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        kind = ("npy", "npz", "npz-deflated")[int(rng.integers(3))]
        if kind == "npy":
            a = random_array(rng)
            stem = f"r{i:04d}" + ("." + random_name(rng, set()).replace("/", ".") if rng.random() < 0.5 else "")
            path = outdir / f"{stem}.npy"
            r = rng.random()
            if r < 0.2:
                with open(path, "wb") as f:
                    np.lib.format.write_array(f, a, version=(2, 0))
            elif r < 0.4:
                with open(path, "wb") as f:
                    np.lib.format.write_array(f, a, version=(3, 0))
            else:
                np.save(path, a)
        else:
            taken = set()
            arrays = {random_name(rng, taken): random_array(rng) for _ in range(int(rng.integers(1, 5)))}
            path = outdir / f"r{i:04d}-{'stored' if kind == 'npz' else 'deflated'}.npz"
            (np.savez if kind == "npz" else np.savez_compressed)(path, **arrays)
        print(os.path.abspath(path))
    return 0


def random_leaf(rng):
    """A value beside the arrays: a float, an int, text, None or a NumPy scalar."""
    r = int(rng.integers(5))
    if r == 0:
        return float(rng.standard_normal())
    if r == 1:
        return int(rng.integers(-1000, 1000))
    if r == 2:
        return "text"
    if r == 3:
        return None
    return np.float32(rng.standard_normal()) if rng.random() < 0.5 else np.int64(7)


def random_tree(rng, depth):
    """Nested dicts, lists and tuples of arrays and other leaves."""
    r = rng.random()
    if depth >= 3 or r < 0.45:
        return random_array(rng) if rng.random() < 0.8 else random_leaf(rng)
    n = int(rng.integers(0, 5))
    if r < 0.8:
        taken, out = set(), {}
        for _ in range(n):
            key = int(rng.integers(0, 20)) if rng.random() < 0.2 else random_name(rng, taken)
            out[key] = random_tree(rng, depth + 1)
        return out
    items = [random_tree(rng, depth + 1) for _ in range(n)]
    return items if r < 0.9 else tuple(items)


def cmd_make_random_pickle(args):
    if len(args) != 3:
        usage()
    outdir, seed, count = Path(args[0]), int(args[1]), int(args[2])
    outdir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        found = []
        while not found:  # a pickle of no array is no tensor file
            r = rng.random()
            if r < 0.1:
                obj = random_array(rng)
            elif r < 0.25:
                obj = [random_tree(rng, 1) for _ in range(int(rng.integers(1, 4)))]
            else:
                obj = {random_name(rng, set()) + str(j): random_tree(rng, 1)
                       for j in range(int(rng.integers(1, 6)))}
            walk_pickle(obj, "", found)
        protocol = (0, 1, 2, 4, 5)[int(rng.integers(5))]
        path = outdir / f"r{i:04d}-p{protocol}{PICKLE_SUFFIXES[int(rng.integers(2))]}"
        with open(path, "wb") as f:
            pickle.dump(obj, f, protocol=protocol)
        print(os.path.abspath(path))
    return 0


# ---------------------------------------------------------------- compare

def cmd_compare(args):
    if len(args) != 2:
        usage()
    (fa, xa), (fb, xb) = load(args[0]), load(args[1])
    problems = []
    if len(xa) != len(xb):
        problems.append(f"{len(xa)} arrays vs {len(xb)}: {[n for n, _ in xa]} vs {[n for n, _ in xb]}")
    else:
        for (na, a), (nb, b) in zip(xa, xb):
            where = na if na == nb else f"{na!r} / {nb!r}"
            if fa == "npz" and fb == "npz" and na != nb:
                problems.append(f"names differ: {na!r} vs {nb!r}")
            if a.dtype.newbyteorder("<") != b.dtype.newbyteorder("<"):
                problems.append(f"{where}: dtype {a.dtype.str} vs {b.dtype.str}")
                continue
            if a.shape != b.shape:
                problems.append(f"{where}: shape {a.shape} vs {b.shape}")
                continue
            ba, bb = le_c_bytes(a), le_c_bytes(b)
            if ba != bb:
                first = next(i for i in range(len(ba)) if ba[i] != bb[i])
                problems.append(f"{where}: elements differ (first at byte {first} of {len(ba)}, "
                                f"element {first // max(a.dtype.itemsize, 1)})")
    if problems:
        print(f"{args[0]} and {args[1]} differ:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    print(f"identical: {len(xa)} arrays")
    return 0


def usage():
    print(__doc__, file=sys.stderr)
    sys.exit(2)


def main(argv):
    if not argv:
        usage()
    cmds = {
        "describe": cmd_describe,
        "make-random": cmd_make_random,
        "make-random-pickle": cmd_make_random_pickle,
        "compare": cmd_compare,
    }
    if argv[0] not in cmds:
        print(f"tfcheck: unknown subcommand {argv[0]!r}", file=sys.stderr)
        usage()
    try:
        return cmds[argv[0]](argv[1:])
    except Unsupported as e:
        print(f"tfcheck: unsupported dtype: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError, EOFError) as e:
        print(f"tfcheck {argv[0]}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
