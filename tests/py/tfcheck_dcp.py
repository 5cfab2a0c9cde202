#!/usr/bin/env python3
"""torch.distributed.checkpoint's side of tensorfmt's DCP tests: checkpoints that real
multi-process runs save (gloo, CPU, processes on 127.0.0.1), and what torch loads from
a checkpoint, at any world size.

Subcommands
-----------
save DIR WORLD SEED
    Saves a state dict no test has seen with ``dcp.save`` from WORLD processes: DTensors
    over a 1-d mesh of WORLD ranks, row-sharded (``Shard(0)``), column-sharded
    (``Shard(1)``) and replicated, sizes that do not divide evenly (so some ranks hold
    empty chunks), dtypes f32, bf16, f16, i64, bool; a plain 0-d tensor; non-tensor
    values (a float, a string, a tuple). The same SEED gives the same values.

describe DIR
    Prints one line of JSON: what ``tensorfmt inspect --json --sha256 DIR`` must print,
    ``{"format": "torch-dcp", "tensors": [{"name", "dtype", "shape", "sha256"}]}``, the
    tensors in the order of the metadata's ``state_dict_metadata``, each as
    ``dcp_to_torch_save`` writes it (names: the flattened keys). dtype and sha256 as in
    tfcheck_safetensors.py.

reshard DIR WORLD
    Loads every tensor of the checkpoint in DIR with ``dcp.load`` from WORLD processes,
    each tensor as a DTensor row-sharded over them (``Shard(0)``; 0-d tensors plain), and
    prints one line of JSON per rank and tensor: ``{"rank", "name", "offsets", "sizes",
    "sha256"}`` of the rank's local shard: what a job of that world size loads.

to-torch DIR PT
    ``dcp_to_torch_save(DIR, PT)``.
"""

import hashlib
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tfcheck_safetensors import CANONICAL, element_bytes  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cpu", (world,))


def full_tensors(seed):
    """The global tensors of the state dict of SEED: (name, tensor, placement)."""
    rng = np.random.default_rng(seed)

    def dims(lo, hi, n):
        return tuple(int(d) for d in rng.integers(lo, hi, n))

    def floats(shape, dtype):
        return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(dtype)

    out = [
        ("model.embed.weight", floats(dims(3, 12, 2), torch.float32), "row"),
        ("model.layers.0.proj.weight", floats(dims(3, 12, 2), torch.bfloat16), "col"),
        ("model.layers.0.proj.bias", floats(dims(2, 9, 1), torch.float16), "row"),
        ("model.norm.weight", floats(dims(2, 9, 1), torch.float32), "rep"),
        ("model.counts", torch.from_numpy(rng.integers(-9, 9, dims(2, 11, 1))), "row"),
        ("model.mask", torch.from_numpy(rng.integers(0, 2, dims(2, 6, 2)).astype(np.bool_)), "col"),
        ("model.cube", floats(dims(2, 6, 3), torch.float32), "col"),
    ]
    return out


def run_save(rank, world, port, out, seed):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = init(rank, world, port)
    model = {}
    for name, t, how in full_tensors(seed):
        placement = {"row": Shard(0), "col": Shard(1), "rep": Replicate()}[how]
        model[name.split(".", 1)[1]] = distribute_tensor(t, mesh, [placement])
    rng = np.random.default_rng(seed + 1)
    sd = {
        "model": model,
        "step": torch.tensor(int(rng.integers(0, 1000))),
        "optim": {"lr": float(rng.random()), "name": "adamw", "betas": (0.9, 0.95)},
    }
    dcp.save(sd, checkpoint_id=out)
    dist.destroy_process_group()


def cmd_save(args):
    out, world, seed = args[0], int(args[1]), int(args[2])
    mp.spawn(run_save, args=(world, free_port(), out, seed), nprocs=world)
    return 0


def flat(prefix, v, found):
    if isinstance(v, dict):
        for k, x in v.items():
            flat(prefix + [str(k)], x, found)
    elif isinstance(v, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in v):
        for i, x in enumerate(v):
            flat(prefix + [str(i)], x, found)
    elif isinstance(v, torch.Tensor):
        found[".".join(prefix)] = v


def cmd_describe(args):
    d = args[0]
    md = dcp.FileSystemReader(d).read_metadata()
    with tempfile.TemporaryDirectory() as tmp:
        pt = os.path.join(tmp, "full.pt")
        dcp_to_torch_save(d, pt)
        found = {}
        flat([], torch.load(pt, weights_only=True), found)
    tensors = []
    for name, m in md.state_dict_metadata.items():
        if not isinstance(m, TensorStorageMetadata):
            continue
        t = found[name]
        tensors.append({
            "name": name,
            "dtype": CANONICAL[t.dtype],
            "shape": [int(x) for x in t.shape],
            "sha256": hashlib.sha256(element_bytes(t)).hexdigest(),
        })
    print(json.dumps({"format": "torch-dcp", "tensors": tensors}))
    return 0


def run_reshard(rank, world, port, d, results):
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init(rank, world, port)
    md = dcp.FileSystemReader(d).read_metadata()
    sd = {}
    for name, m in md.state_dict_metadata.items():
        if not isinstance(m, TensorStorageMetadata):
            continue
        empty = torch.zeros(m.size, dtype=m.properties.dtype)
        sd[name] = empty if empty.dim() == 0 else distribute_tensor(empty, mesh, [Shard(0)])
    dcp.load(sd, checkpoint_id=d)
    lines = []
    for name, t in sd.items():
        if t.dim() == 0:
            local, offsets = t, []
        else:
            local = t.to_local()
            from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
            _, offsets = compute_local_shape_and_global_offset(t.shape, mesh, t.placements)
        lines.append(json.dumps({
            "rank": rank, "name": name, "offsets": [int(o) for o in offsets],
            "sizes": [int(s) for s in local.shape],
            "sha256": hashlib.sha256(element_bytes(local)).hexdigest(),
        }))
    Path(results, f"{rank}.jsonl").write_text("\n".join(lines) + "\n")
    dist.destroy_process_group()


def cmd_reshard(args):
    d, world = args[0], int(args[1])
    with tempfile.TemporaryDirectory() as results:
        mp.spawn(run_reshard, args=(world, free_port(), d, results), nprocs=world)
        for r in range(world):
            sys.stdout.write(Path(results, f"{r}.jsonl").read_text())
    return 0


def cmd_to_torch(args):
    dcp_to_torch_save(args[0], args[1])
    return 0


COMMANDS = {"save": cmd_save, "describe": cmd_describe, "reshard": cmd_reshard,
            "to-torch": cmd_to_torch}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        raise SystemExit(__doc__)
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
