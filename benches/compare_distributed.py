#!/usr/bin/env python3
"""Times tensorfmt beyond one machine: a checkpoint read from an S3-protocol server and from
a local file, one rank's shard of a torch.distributed checkpoint against torch's own
`dcp.load`, and the peak anonymous memory of converting a sharded checkpoint.

One run, side by side, on one state dict (the PyTorch suite's transformer shapes, 1.07 GiB
of float32 and bfloat16 by default) written by the real tools:

- `model.safetensors` (`safetensors.torch.save_file`) and `model.pt` (`torch.save`), read by
  the `tfbench` release binary from the file and from the tests' S3-protocol server on
  127.0.0.1 (s3s-fs in tfbench's process, the files uploaded to it by multipart uploads):
  index and full load, GiB/s and the requests each read made, and one plain GET of the
  whole object as the server's limit;
- `dcp/`, saved by `torch.distributed.checkpoint.save` from 4 gloo processes, every tensor a
  DTensor row-sharded over them (`Shard(0)`); rank 0 of a 2-process job loads its shard:
  torch (`dcp.load` into DTensors `Shard(0)` over 2 gloo processes on 127.0.0.1, rank 0's
  time) against tensorfmt (`TensorFile::load_slice` of rank 0's rows of every tensor, from
  the folder and from the S3 server, where the checkpoint is read in place);
- `sharded/`, saved by `huggingface_hub.save_torch_state_dict` (300MB shards), converted
  by the release `tensorfmt` CLI to one PyTorch file and to PyTorch shards, its anonymous
  memory (RssAnon, /proc, sampled every millisecond) against the bound of the largest
  tensor + 64 MiB, and a Python peer that loads the shards (`safetensors.torch.load_file`)
  and `torch.save`s them.

Timing as in the other suites: wall clock around the operation alone, one untimed warm-up
run, the median of N runs, the page cache warm, all files in one temporary directory.

Usage (see benches/compare.sh --suite distributed, which builds tfbench and the CLI):

    python benches/compare_distributed.py --tfbench target/release/tfbench
        --cli target/release/tensorfmt [--runs 5] [--open-runs 20] [--small]
        [--dir PARENT] [--only PREFIX] [--json results.json] [--markdown table.md] [--keep]
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import GIB, MIB, environment, fmt_ratio, fmt_time, median, report, run_tfbench  # noqa: E402
from compare_torch import FULL, SMALL, describe, make_state_dict, state_dict_args, state_dict_spec  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "py"))
from tfcheck_dcp import free_port, init  # noqa: E402  (the DCP tests' gloo job on 127.0.0.1)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

SAVE_WORLD = 4
LOAD_WORLD = 2
# The shards of the sharded checkpoint, and those its conversion writes (--small: sizes
# that still make several).
SHARD_SIZE, OUT_SHARD_SIZE = "300MB", "200MB"
SMALL_SHARD_SIZE, SMALL_OUT_SHARD_SIZE = "200KB", "100KB"


def run_save(rank, world, port, out, shapes):
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init(rank, world, port)
    sd = make_state_dict(state_dict_spec(**shapes))
    sd = {k: distribute_tensor(t, mesh, [Shard(0)]) for k, t in sd.items()}
    dcp.save(sd, checkpoint_id=out)
    dist.destroy_process_group()


def run_load(rank, world, port, d, runs, results):
    """Loads rank `rank`'s shard of every tensor of `d` with dcp.load, once untimed and
    `runs` times timed, each after a barrier; writes the times to results/<rank>.json."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init(rank, world, port)
    md = dcp.FileSystemReader(d).read_metadata()
    sd = {}
    for name, m in md.state_dict_metadata.items():
        if isinstance(m, TensorStorageMetadata):
            empty = torch.empty(m.size, dtype=m.properties.dtype)
            sd[name] = distribute_tensor(empty, mesh, [Shard(0)])
    local = sum(t.to_local().numel() * t.element_size() for t in sd.values())
    times = []
    for i in range(runs + 1):
        dist.barrier()
        t0 = time.perf_counter()
        dcp.load(sd, checkpoint_id=d)
        dt = time.perf_counter() - t0
        if i:
            times.append(dt)
    with open(os.path.join(results, f"{rank}.json"), "w") as f:
        json.dump({"times_s": times, "bytes": local}, f)
    dist.destroy_process_group()


def torch_dcp_load(d, runs):
    """Rank 0's result of a dcp.load of its shard in a job of LOAD_WORLD processes."""
    with tempfile.TemporaryDirectory() as results:
        mp.spawn(run_load, args=(LOAD_WORLD, free_port(), d, runs, results), nprocs=LOAD_WORLD)
        with open(os.path.join(results, "0.json")) as f:
            r = json.load(f)
    times = sorted(r["times_s"])
    mid = len(times) // 2
    med = times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2
    return {
        "op": "dist.dcp.rank0", "lib": "torch",
        "how": f"dcp.load into DTensors Shard(0) over {LOAD_WORLD} gloo processes on 127.0.0.1 "
               "(rank 0's time, after a barrier; the other rank loads its shard at the same time)",
        "bytes": r["bytes"], "runs": runs, "median_s": med, "min_s": times[0],
        "max_s": times[-1], "times_s": r["times_s"],
    }


def anon_kib(pid):
    """RssAnon of `pid` in KiB, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def peak_anon(cmd):
    """Runs `cmd`, sampling its anonymous memory every millisecond: (peak bytes, seconds)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while p.poll() is None:
        kib = anon_kib(p.pid)
        if kib is not None:
            peak = max(peak, kib)
        time.sleep(0.001)
    dt = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace")
    if p.returncode != 0:
        sys.exit(f"compare_distributed.py: {' '.join(cmd)} failed ({p.returncode}): {err}")
    return peak * 1024, dt


PEER = """
import json, sys, torch
from safetensors.torch import load_file
index, out = sys.argv[1], sys.argv[2]
folder = index.rsplit("/", 1)[0]
sd = {}
for shard in sorted(set(json.load(open(index))["weight_map"].values())):
    sd.update(load_file(folder + "/" + shard))
torch.save(sd, out)
"""


def convert_memory(args, top, runs, out_shard_size):
    """The conversions of `sharded/` timed with their peak anonymous memory."""
    index = os.path.join(top, "dist", "sharded", "model.safetensors.index.json")
    out_pt = os.path.join(top, "out.pt")
    out_shards = os.path.join(top, "out_shards")
    rows = [
        ("dist.convert.pt", "tensorfmt",
         "tensorfmt convert sharded/model.safetensors.index.json out.pt",
         [args.cli, "convert", index, out_pt]),
        ("dist.convert.shards", "tensorfmt",
         f"tensorfmt convert sharded/ out_shards --max-shard-size {out_shard_size} --to pytorch",
         [args.cli, "convert", os.path.dirname(index), out_shards, "--max-shard-size",
          out_shard_size, "--to", "pytorch"]),
        ("dist.convert.pt", "python",
         "safetensors.torch.load_file of every shard into one dict + torch.save",
         [sys.executable, "-c", PEER, index, out_pt]),
    ]
    results = []
    for op, lib, how, cmd in rows:
        if args.only and not any(op.startswith(p) for p in args.only):
            continue
        print(f"compare: {op} [{lib}] {how}", file=sys.stderr)
        peaks, times = [], []
        for i in range(runs + 1):
            for p in (out_pt, out_shards):
                if os.path.isdir(p):
                    shutil.rmtree(p)
                elif os.path.exists(p):
                    os.remove(p)
            os.sync()
            peak, dt = peak_anon(cmd)
            if i:
                peaks.append(peak)
                times.append(dt)
        times_sorted = sorted(times)
        results.append({
            "op": op, "lib": lib, "how": how, "runs": runs,
            "median_s": times_sorted[len(times) // 2], "times_s": times,
            "peak_anon_bytes": max(peaks), "peak_anon_runs": peaks,
        })
    return results


def table(results, largest, shard_size):
    by = {(r["op"], r["lib"]): r for r in results}
    gib_s = lambda r: "n/a" if not r else f"{r['bytes'] / GIB / r['median_s']:.2f}"  # noqa: E731
    lines = [
        "Reading the checkpoint from the S3-protocol server on 127.0.0.1 and from the local file "
        "(ratio: S3 time / file time; requests: those of one S3 read; received: the bytes they "
        "brought):",
        "",
        "| file | workload | local file | S3 | S3 / file | GiB/s file | GiB/s S3 | requests | received |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for stem, label in (("st", "model.safetensors"), ("pt", "model.pt")):
        for what, op in (("index (open + names)", f"dist.{stem}.open"),
                         ("full load (owned memory)", f"dist.{stem}.load")):
            f, s = by.get((op, "tensorfmt")), by.get((op, "tensorfmt-s3"))
            if not f and not s:
                continue
            rate = "" if what.startswith("index") else None
            lines.append(
                f"| {label} | {what} | {fmt_time(f and f['median_s'])} | "
                f"{fmt_time(s and s['median_s'])} | "
                f"{fmt_ratio(s and s['median_s'], f and f['median_s'])} | "
                f"{gib_s(f) if rate is None else ''} | {gib_s(s) if rate is None else ''} | "
                f"{s.get('requests', 'n/a') if s else 'n/a'} | "
                f"{'%.1f MiB' % (s['received_bytes'] / MIB) if s and 'received_bytes' in s else 'n/a'} |")
        g = by.get((f"dist.{stem}.get", "object_store"))
        if g:
            lines.append(f"| {label} | one GET of the whole object (the server's limit) | | "
                         f"{fmt_time(g['median_s'])} | | | {gib_s(g)} | 1 | |")
    r0t, r0f = by.get(("dist.dcp.rank0", "torch")), by.get(("dist.dcp.rank0", "tensorfmt"))
    full = by.get(("dist.dcp.full", "tensorfmt"))
    if r0t or r0f or full:
        lines += [
            "",
            f"One rank's shard of the torch.distributed checkpoint saved by {SAVE_WORLD} ranks, as "
            f"rank 0 of {LOAD_WORLD} loads it (ratio: torch / tensorfmt, above 1 tensorfmt is faster):",
            "",
            "| workload | payload | torch `dcp.load` | tensorfmt | torch / tensorfmt | GiB/s tensorfmt |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        if r0t or r0f:
            nbytes = (r0f or r0t)["bytes"]
            lines.append(
                f"| rank 0's rows of every tensor | {nbytes / MIB:.0f} MiB | "
                f"{fmt_time(r0t and r0t['median_s'])} | {fmt_time(r0f and r0f['median_s'])} | "
                f"{fmt_ratio(r0t and r0t['median_s'], r0f and r0f['median_s'])} | {gib_s(r0f)} |")
        r0s = by.get(("dist.dcp.rank0", "tensorfmt-s3"))
        if r0s:
            lines.append(
                f"| rank 0's rows of every tensor, from the S3 server ({r0s.get('requests', 'n/a')} "
                f"requests, {r0s.get('received_bytes', 0) / MIB:.0f} MiB received) | "
                f"{r0s['bytes'] / MIB:.0f} MiB | {fmt_time(r0t and r0t['median_s'])} | "
                f"{fmt_time(r0s['median_s'])} | {fmt_ratio(r0t and r0t['median_s'], r0s['median_s'])} | "
                f"{gib_s(r0s)} |")
        if full:
            lines.append(f"| the whole checkpoint (tensorfmt, every chunk assembled) | "
                         f"{full['bytes'] / MIB:.0f} MiB | | {fmt_time(full['median_s'])} | | "
                         f"{gib_s(full)} |")
    conv = [r for r in results if r["op"].startswith("dist.convert")]
    if conv:
        bound = largest + 64 * MIB
        lines += [
            "",
            f"Converting the sharded checkpoint (`save_torch_state_dict`, {shard_size} shards): peak "
            f"anonymous memory (RssAnon sampled every ms, the largest of the runs) against the "
            f"bound, the largest tensor ({largest / MIB:.0f} MiB) + 64 MiB = {bound / MIB:.0f} MiB:",
            "",
            "| conversion | time | peak anonymous memory | within the bound |",
            "|---|---:|---:|---|",
        ]
        for r in conv:
            ok = r["peak_anon_bytes"] <= bound
            lines.append(f"| {r['how']} | {fmt_time(r['median_s'])} | "
                         f"{r['peak_anon_bytes'] / MIB:.0f} MiB | "
                         f"{('**yes**' if ok else '**no**') if r['lib'] == 'tensorfmt' else ('yes' if ok else 'no (peer)')} |")
    seen = []
    for r in results:
        if (r["lib"], r["how"]) not in seen and not r["op"].startswith("dist.convert"):
            seen.append((r["lib"], r["how"]))
    lines += ["", "What each cell times (median wall clock):", ""]
    lines += [f"- {lib}: {how}" for lib, how in seen]
    return "\n".join(lines)


def main():
    def more(ap):
        ap.add_argument("--cli", default="target/release/tensorfmt",
                        help="the tensorfmt CLI (cargo build --release -p tensorfmt --bin tensorfmt)")

    args, shapes = state_dict_args(__doc__, 20, FULL, SMALL, "389 tensors, 1.07 GiB", more)
    env = environment()
    env["torch"] = torch.__version__
    import huggingface_hub
    import safetensors
    env["safetensors"] = safetensors.__version__
    env["huggingface_hub"] = huggingface_hub.__version__
    load_before = os.getloadavg()[0]
    top = tempfile.mkdtemp(prefix="tfcompare-dist-", dir=args.dir)
    try:
        d = os.path.join(top, "dist")
        os.makedirs(d)
        print(f"compare_distributed.py: writing the checkpoints in {d}", file=sys.stderr)
        sd = make_state_dict(state_dict_spec(**shapes))
        _, nbytes, sd_line = describe(sd)
        largest = max(t.numel() * t.element_size() for t in sd.values())
        from huggingface_hub import save_torch_state_dict
        from safetensors.torch import save_file
        save_file(sd, os.path.join(d, "model.safetensors"))
        torch.save(sd, os.path.join(d, "model.pt"))
        shard_size, out_shard_size = ((SMALL_SHARD_SIZE, SMALL_OUT_SHARD_SIZE) if args.small
                                      else (SHARD_SIZE, OUT_SHARD_SIZE))
        os.makedirs(os.path.join(d, "sharded"))
        save_torch_state_dict(sd, os.path.join(d, "sharded"), max_shard_size=shard_size)
        del sd
        mp.spawn(run_save, args=(SAVE_WORLD, free_port(), os.path.join(d, "dcp"), shapes),
                 nprocs=SAVE_WORLD)
        with open(os.path.join(d, "dcp.world"), "w") as f:
            f.write(f"{LOAD_WORLD}\n")
        results = []
        if not args.only or any("dist.dcp.rank0".startswith(p) for p in args.only):
            print("compare: dist.dcp.rank0 [torch] dcp.load", file=sys.stderr)
            results.append(torch_dcp_load(os.path.join(d, "dcp"), args.runs))
        results += run_tfbench(args, top, args.only)["results"]
        t = {r["lib"]: r["bytes"] for r in results if r["op"] == "dist.dcp.rank0"}
        if len(set(t.values())) > 1:
            sys.exit(f"compare_distributed.py: rank 0's shard differs in size: {t}")
        results += convert_memory(args, top, min(args.runs, 3), out_shard_size)
    finally:
        if args.keep:
            print(f"compare_distributed.py: kept {top}", file=sys.stderr)
        else:
            shutil.rmtree(top, ignore_errors=True)

    env["dir"] = args.dir or tempfile.gettempdir()
    env["loadavg_1min"] = [load_before, os.getloadavg()[0]]
    env["state_dict"] = sd_line
    header = (
        f"{env['date']}, tree {env['revision']} — {env['cpus']} CPUs ({env['cpu']}), "
        f"{env['memory_gib']} GiB RAM, {env['platform']}, Python {env['python']}, torch "
        f"{env['torch']}, safetensors {env['safetensors']}, huggingface_hub "
        f"{env['huggingface_hub']}; {sd_line}; median of {args.runs} runs ({args.open_runs} "
        f"for the index), page cache warm, files in {env['dir']}; 1-min load average "
        f"{load_before:.2f} before, {env['loadavg_1min'][1]:.2f} after"
    )
    report(header + "\n\n" + table(results, largest, shard_size) + "\n", env, results, args)


if __name__ == "__main__":
    main()
