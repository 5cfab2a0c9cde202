#!/usr/bin/env python3
"""The Hugging Face side of tensorfmt's sharded-checkpoint tests: checkpoints that
`huggingface_hub.save_torch_state_dict` (pinned in tests/py/requirements.txt) writes, and
what its loader reads from a checkpoint tensorfmt wrote.

Subcommands
-----------
describe PATH
    Prints one line of JSON, exactly what ``tensorfmt inspect --json --sha256 PATH``
    must print for the sharded checkpoint PATH (its folder or its index)::

        {"format": "safetensors"|"pytorch", "tensors": [{"name", "dtype", "shape",
         "sha256"}, ...], "shards": [file, ...]}

    Shards in the order of their names; in each, tensors in file order (a safetensors
    shard's JSON header order, a ``torch.load``-ed shard's dict order); each shard read
    by ``huggingface_hub.load_state_dict_from_file``. dtype and sha256 as in
    tfcheck_safetensors.py.

make DIR SEED FORMAT
    Writes a random state dict no test has seen (2 to 12 tensors of random dtypes and
    shapes, names of dotted parts, a bf16 one, a 0-d one) with
    ``save_torch_state_dict(sd, DIR, max_shard_size=..., safe_serialization=FORMAT ==
    "safetensors")``, a shard size that makes several shards. DIR must exist. The same
    SEED gives the same checkpoint.

save PT DIR FORMAT MAX_SHARD_SIZE
    Writes the state dict ``torch.load(PT)`` with ``save_torch_state_dict`` into the
    existing folder DIR: the bytes Hugging Face writes for it.

load DIR FORMAT
    Loads the sharded checkpoint in DIR as Hugging Face does, twice: each shard by
    ``load_state_dict_from_file`` (printed as ``describe`` prints it), and the whole by
    ``load_torch_model(module, DIR, strict=True)`` into a module whose buffers have the
    checkpoint's names, shapes and dtypes (which fails on a missing or unexpected key).
"""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch
from huggingface_hub import load_state_dict_from_file, load_torch_model, save_torch_state_dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tfcheck_safetensors import CANONICAL, element_bytes, header_keys  # noqa: E402

INDEX = {"safetensors": "model.safetensors.index.json", "pytorch": "pytorch_model.bin.index.json"}


def index_of(path):
    p = Path(path)
    if p.is_dir():
        for fmt, name in INDEX.items():
            if (p / name).exists():
                return p / name, fmt
        raise SystemExit(f"tfcheck_sharded: no index in {p}")
    return p, "safetensors" if p.name.endswith(".safetensors.index.json") else "pytorch"


def read_shards(path):
    index, fmt = index_of(path)
    weight_map = json.loads(index.read_text())["weight_map"]
    shards = sorted(set(weight_map.values()))
    tensors = []
    for shard in shards:
        f = index.parent / shard
        sd = load_state_dict_from_file(str(f), map_location="cpu", weights_only=True,
                                       safe=fmt == "safetensors")
        names = header_keys(f) if fmt == "safetensors" else list(sd)
        for name in names:
            t = sd[name]
            tensors.append({
                "name": name,
                "dtype": CANONICAL[t.dtype],
                "shape": [int(d) for d in t.shape],
                "sha256": hashlib.sha256(element_bytes(t)).hexdigest(),
            })
    return {"format": fmt, "tensors": tensors, "shards": shards}


def cmd_describe(args):
    print(json.dumps(read_shards(args[0])))
    return 0


DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.uint8,
          torch.bool, torch.float64, torch.int8]
PARTS = ["model", "layers", "0", "1", "12", "attn", "q_proj", "weight", "bias", "norm", "embed"]


def random_tensor(rng, dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    if dtype == torch.bool:
        t = torch.from_numpy(rng.integers(0, 2, n).astype(np.bool_))
    elif dtype.is_floating_point:
        t = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).to(dtype)
    else:
        info = torch.iinfo(dtype)
        t = torch.from_numpy(rng.integers(max(info.min, -1000), min(info.max, 1000), n)).to(dtype)
    return t.reshape(shape)


def random_state_dict(seed):
    rng = np.random.default_rng(seed)
    sd = {}
    n = int(rng.integers(2, 13))
    while len(sd) < n:
        k = int(rng.integers(1, 5))
        name = ".".join(PARTS[int(rng.integers(len(PARTS)))] for _ in range(k))
        # A name that is a prefix module of another cannot be a buffer of the module
        # `load` builds: keep names that are leaves.
        if name in sd or any(o.startswith(name + ".") or name.startswith(o + ".") for o in sd):
            continue
        i = len(sd)
        if i == 0:
            dtype, shape = torch.bfloat16, (int(rng.integers(8, 40)), int(rng.integers(8, 40)))
        elif i == 1:
            dtype, shape = DTYPES[int(rng.integers(len(DTYPES)))], ()
        else:
            dtype = DTYPES[int(rng.integers(len(DTYPES)))]
            shape = tuple(int(d) for d in rng.integers(0, 30, int(rng.integers(0, 4))))
        sd[name] = random_tensor(rng, dtype, shape)
    return sd


def cmd_make(args):
    out, seed, fmt = args[0], int(args[1]), args[2]
    sd = random_state_dict(seed)
    total = sum(t.numel() * t.element_size() for t in sd.values())
    max_shard = max(1, total // 3)
    save_torch_state_dict(sd, out, max_shard_size=max_shard,
                          safe_serialization=fmt == "safetensors")
    return 0


def cmd_save(args):
    pt, out, fmt, size = args
    sd = torch.load(pt, weights_only=True)
    save_torch_state_dict(sd, out, max_shard_size=size, safe_serialization=fmt == "safetensors")
    return 0


def module_for(tensors):
    root = torch.nn.Module()
    for t in tensors:
        *path, leaf = t["name"].split(".")
        m = root
        for p in path:
            if not hasattr(m, p):
                m.add_module(p, torch.nn.Module())
            m = getattr(m, p)
        dtype = next(d for d, c in CANONICAL.items() if c == t["dtype"])
        m.register_buffer(leaf, torch.zeros(t["shape"], dtype=dtype))
    return root


def cmd_load(args):
    path, fmt = args
    described = read_shards(path)
    model = module_for(described["tensors"])
    load_torch_model(model, path, strict=True, safe=fmt == "safetensors")
    loaded = model.state_dict()
    for t in described["tensors"]:
        got = hashlib.sha256(element_bytes(loaded[t["name"]])).hexdigest()
        if got != t["sha256"]:
            raise SystemExit(f"tfcheck_sharded: load_torch_model gave other bytes for {t['name']}")
    print(json.dumps(described))
    return 0


COMMANDS = {"describe": cmd_describe, "make": cmd_make, "save": cmd_save, "load": cmd_load}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        raise SystemExit(__doc__)
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
