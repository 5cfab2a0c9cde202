#!/usr/bin/env python3
"""Times a PyTorch state dict's open, full load and save with torch, tensorfmt and candle.

One run, side by side, on one checkpoint written by `torch.save`: a transformer-like
state dict (token and position embeddings and an LM head in float32; per layer, bfloat16
attention and MLP matrices and float32 biases and LayerNorm parameters). torch is timed
here; tensorfmt, candle and the memcpy reference by the `tfbench` release binary
(benches/src/bin/tfbench.rs, built with `--features candle`), which times its runs the
same way: wall clock around the operation alone, one untimed warm-up run, the median of N
runs, the page cache warm, all files in the same temporary directory. Before each save
the output file is removed and sync(2) called, outside the timed region, on both sides.

Usage (see benches/compare.sh --suite pytorch, which builds tfbench first):

    python benches/compare_torch.py --tfbench target/release/tfbench [--runs 5]
        [--open-runs 20] [--layers 24] [--small] [--dir PARENT] [--only PREFIX]
        [--json results.json] [--markdown table.md] [--keep]

Ratios are time(other) / time(tensorfmt): above 1 means tensorfmt is faster.
"""

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import (  # noqa: E402
    GIB, MIB, Bench, bandwidth, cell_notes, environment, fmt_ratio, fmt_time, fresh,
    locked_version, median, report, run_tfbench, same_payload, verdict,
)

import torch  # noqa: E402

# Shapes of the state dict: (layers, d_model, d_ffn, vocab, context).
FULL = dict(layers=24, d=1024, ffn=4096, vocab=65536, ctx=2048)
SMALL = dict(layers=2, d=128, ffn=512, vocab=1000, ctx=64)


def state_dict_spec(layers, d, ffn, vocab, ctx):
    """(name, shape, dtype) of every tensor, in state-dict order."""
    f32, bf16 = torch.float32, torch.bfloat16
    spec = [("tok_embeddings.weight", (vocab, d), f32), ("pos_embeddings.weight", (ctx, d), f32)]
    for i in range(layers):
        p = f"layers.{i}."
        spec += [(p + "ln_1.weight", (d,), f32), (p + "ln_1.bias", (d,), f32)]
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            spec += [(p + f"attn.{proj}.weight", (d, d), bf16), (p + f"attn.{proj}.bias", (d,), f32)]
        spec += [(p + "ln_2.weight", (d,), f32), (p + "ln_2.bias", (d,), f32)]
        spec += [(p + "mlp.fc_in.weight", (ffn, d), bf16), (p + "mlp.fc_in.bias", (ffn,), f32)]
        spec += [(p + "mlp.fc_out.weight", (d, ffn), bf16), (p + "mlp.fc_out.bias", (d,), f32)]
    spec += [("ln_f.weight", (d,), f32), ("ln_f.bias", (d,), f32), ("lm_head.weight", (vocab, d), f32)]
    return spec


def make_state_dict(spec):
    """The state dict of `spec` ((name, shape, dtype) of every tensor), random values."""
    g = torch.Generator().manual_seed(0)
    sd = {}
    for name, shape, dtype in spec:
        t = torch.randn(shape, generator=g) * 0.02
        sd[name] = t.to(dtype)
    return sd


def describe(sd, unit="GiB"):
    """The state dict's tensor count, payload bytes and a line on it (sizes in `unit`,
    GiB or MiB)."""
    size = {"GiB": lambda b: f"{b / GIB:.2f} GiB", "MiB": lambda b: f"{b / MIB:.0f} MiB"}[unit]
    n = len(sd)
    total = sum(t.numel() * t.element_size() for t in sd.values())
    by = {}
    for t in sd.values():
        k = str(t.dtype).replace("torch.", "")
        c, b = by.get(k, (0, 0))
        by[k] = (c + 1, b + t.numel() * t.element_size())
    parts = ", ".join(f"{c} {k} ({size(b)})" for k, (c, b) in sorted(by.items()))
    big = sum(1 for t in sd.values() if t.numel() * t.element_size() >= MIB)
    return n, total, f"{n} tensors, {size(total)} of payload: {parts}; {big} of them ≥ 1 MiB"


def save_fsync(sd, path, save=torch.save):
    """`save(sd, path)` (by default torch.save to the path: its C++ file writer), then
    fsync of the file."""
    save(sd, path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def module_of(sd):
    """A module whose parameters are the state dict's names, on the meta device (no
    memory): what `load_state_dict(.., assign=True)` fills, as tensorfmt's struct."""
    root = torch.nn.Module()
    for name, t in sd.items():
        *path, leaf = name.split(".")
        m = root
        for part in path:
            if not hasattr(m, part):
                m.add_module(part, torch.nn.Module())
            m = getattr(m, part)
        empty = torch.empty(t.shape, dtype=t.dtype, device="meta")
        m.register_parameter(leaf, torch.nn.Parameter(empty, requires_grad=False))
    return root


def torch_side(b, d, sd, nbytes):
    inp = os.path.join(d, "in.pt")
    out = os.path.join(d, "out_torch.pt")
    b.time("pt.open", "torch.load(path, mmap=True, weights_only=True)", nbytes,
           lambda: torch.load(inp, mmap=True, weights_only=True), runs=b.open_runs)
    b.time("pt.read.owned", "torch.load(path, weights_only=True)", nbytes,
           lambda: torch.load(inp, weights_only=True))
    module = module_of(sd)
    b.time("pt.state", "module.load_state_dict(torch.load(path, mmap=True, weights_only=True), "
           "assign=True)", nbytes,
           lambda: module.load_state_dict(torch.load(inp, mmap=True, weights_only=True),
                                          assign=True), runs=b.open_runs)
    b.time("pt.write.fsync", "torch.save(sd, path) + os.fsync", nbytes,
           lambda: save_fsync(sd, out), before=fresh(out))
    b.time("pt.write.nofsync", "torch.save(sd, path)", nbytes,
           lambda: torch.save(sd, out), before=fresh(out))
    fresh(out)()


LIBS = ("torch", "tensorfmt", "candle")

# (label, {lib: op}) of the side-by-side table.
ROWS = [
    ("index-only open (no payload byte read)",
     {"torch": "pt.open", "tensorfmt": "pt.open", "candle": "pt.open"}),
    ("index-only open, format given to tensorfmt (no detection)",
     {"torch": "pt.open", "tensorfmt": "pt.open.nodetect", "candle": "pt.open"}),
    ("full load into memory (tensorfmt verifies CRC-32)",
     {"torch": "pt.read.owned", "tensorfmt": "pt.read.owned", "candle": "pt.read.owned"}),
    ("full load into memory (tensorfmt skips CRC-32, as torch.load)",
     {"torch": "pt.read.owned", "tensorfmt": "pt.read.owned_nocrc", "candle": "pt.read.owned"}),
    ("model struct loaded by name (strict; views of the map; tensorfmt verifies CRC-32)",
     {"torch": "pt.state", "tensorfmt": "pt.state"}),
    ("model struct loaded by name (strict; views of the map; tensorfmt skips CRC-32, as torch)",
     {"torch": "pt.state", "tensorfmt": "pt.state_nocrc"}),
    ("save, with fsync", {"torch": "pt.write.fsync", "tensorfmt": "pt.write.fsync"}),
    ("save, no fsync", {"torch": "pt.write.nofsync", "tensorfmt": "pt.write.nofsync"}),
]

# (label, op, lib) of the bandwidth table; the first two are the references.
LOADS = [
    ("memcpy, mmap → fresh buffers (the limit)", "pt.memcpy.fresh", "memcpy"),
    ("memcpy, hot (no map, allocation or page fault)", "pt.memcpy.hot", "memcpy"),
    ("tensorfmt full load, CRC-32 verified", "pt.read.owned", "tensorfmt"),
    ("tensorfmt full load, CRC-32 skipped", "pt.read.owned_nocrc", "tensorfmt"),
    ("torch.load", "pt.read.owned", "torch"),
    ("candle read_all", "pt.read.owned", "candle"),
]


def table(results, nbytes):
    by = {(r["op"], r["lib"]): r for r in results}
    lines = [
        "| workload | torch | tensorfmt | candle | torch / tensorfmt | candle / tensorfmt |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, ops in ROWS:
        t = {lib: median(by, ops[lib], lib) if lib in ops else None for lib in LIBS}
        if all(v is None for v in t.values()):
            continue
        lines.append(
            f"| {label} | {fmt_time(t['torch'])} | {fmt_time(t['tensorfmt'])} | "
            f"{fmt_time(t['candle'])} | {fmt_ratio(t['torch'], t['tensorfmt'])} | "
            f"{fmt_ratio(t['candle'], t['tensorfmt'])} |"
        )

    more, fresh_s = bandwidth(by, "pt", LOADS, nbytes, f"{nbytes / GIB:.2f} GiB")
    lines += more

    def ratio(op_other, lib, op_tf):
        o, t = median(by, op_other, lib), median(by, op_tf, "tensorfmt")
        return o / t if o and t else None

    idx = ratio("pt.open", "torch", "pt.open")
    loads = [median(by, op, "tensorfmt") for op in ("pt.read.owned", "pt.read.owned_nocrc")]
    fracs = [fresh_s / s if fresh_s and s else None for s in loads]
    saves = [ratio(f"pt.write.{k}", "torch", f"pt.write.{k}") for k in ("fsync", "nofsync")]
    show = lambda v, unit="×": "n/a" if v is None else f"{v:.2f}{unit}"  # noqa: E731
    lines += [
        "",
        "| target | measured | status |",
        "|---|---|---|",
        f"| index ≥ 20× faster than `torch.load(mmap=True)` | {show(idx)} | "
        f"{verdict(None if idx is None else idx >= 20)} |",
        f"| full load ≥ 0.8 of memcpy bandwidth | {show(fracs[0], '')} CRC-32 verified, "
        f"{show(fracs[1], '')} CRC-32 skipped | "
        f"{verdict(None if fracs[0] is None else fracs[0] >= 0.8)} verified, "
        f"{verdict(None if fracs[1] is None else fracs[1] >= 0.8)} skipped |",
        f"| save ≥ 1.5× faster than `torch.save` | {show(saves[0])} with fsync, "
        f"{show(saves[1])} without | "
        f"{verdict(None if saves[0] is None else saves[0] >= 1.5)} with fsync, "
        f"{verdict(None if saves[1] is None else saves[1] >= 1.5)} without |",
    ]

    lines += cell_notes(results, ["torch", "tensorfmt", "candle", "memcpy"])
    return "\n".join(lines)


def state_dict_args(doc, open_runs, full, small, full_is, more=None):
    """The command line of a suite on a transformer-like state dict (this one,
    compare_safetensors.py and compare_pickle.py), `doc` its docstring, `full` its default
    shapes (`full_is`: what they make) and `small` those of `--small`, `more` a function
    adding the suite's own arguments to the parser; the arguments and the shapes asked for."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--tfbench", default="target/release/tfbench",
                    help="the tfbench binary (cargo build --release -p tensorfmt-benches --features candle)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per load/save")
    ap.add_argument("--open-runs", type=int, default=open_runs, help="timed runs per index-only open")
    ap.add_argument("--layers", type=int, help=f"transformer layers (default {full['layers']}: {full_is})")
    ap.add_argument("--small", action="store_true", help="a tiny state dict (checks the pipeline)")
    ap.add_argument("--dir", default=os.environ.get("TFBENCH_DIR"),
                    help="parent of the temporary directory (default: system temp dir)")
    ap.add_argument("--only", action="append", default=[], help="op prefix to run (repeatable)")
    ap.add_argument("--json", help="also write all timings as JSON here")
    ap.add_argument("--markdown", help="also write the table as Markdown here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    if more:
        more(ap)
    args = ap.parse_args()
    shapes = dict(small if args.small else full)
    if args.layers is not None:
        shapes["layers"] = args.layers
    return args, shapes


def tfbench_results(args, d, nbytes, script, side):
    """tfbench's results on the state dict in `d` (`nbytes` of payload, as the Python
    `side` timed it), saying when tfbench was built without candle."""
    rust = run_tfbench(args, d, args.only)
    if not rust.get("candle"):
        print(f"{script}: tfbench was built without the candle feature", file=sys.stderr)
    same_payload(rust["results"], nbytes, script, side)
    return rust["results"]


def main():
    args, shapes = state_dict_args(__doc__, 20, FULL, SMALL, "389 tensors, 1.07 GiB")
    env = environment()
    env["torch"] = torch.__version__
    env["candle"] = locked_version("candle-core")
    load_before = os.getloadavg()[0]
    d = tempfile.mkdtemp(prefix="tfcompare-torch-", dir=args.dir)
    try:
        print(f"compare_torch.py: writing the state dict with torch.save in {d}", file=sys.stderr)
        sd = make_state_dict(state_dict_spec(**shapes))
        _, nbytes, what = describe(sd)
        torch.save(sd, os.path.join(d, "in.pt"))
        b = Bench(args.runs, args.open_runs, args.only, lib="torch")
        torch_side(b, d, sd, nbytes)
        del sd
        results = b.results + tfbench_results(args, d, nbytes, "compare_torch.py", "torch")
    finally:
        if args.keep:
            print(f"compare_torch.py: kept {d}", file=sys.stderr)
        else:
            shutil.rmtree(d, ignore_errors=True)

    env["dir"] = args.dir or tempfile.gettempdir()
    env["loadavg_1min"] = [load_before, os.getloadavg()[0]]
    env["state_dict"] = what
    header = (
        f"{env['date']}, tree {env['revision']} — {env['cpus']} CPUs ({env['cpu']}), "
        f"{env['memory_gib']} GiB RAM, {env['platform']}, Python {env['python']}, "
        f"torch {env['torch']}, candle-core {env['candle']}; state dict: {what}; "
        f"median of {args.runs} runs ({args.open_runs} for index-only opens), page cache warm, "
        f"files in {env['dir']}; 1-min load average {load_before:.2f} before, "
        f"{env['loadavg_1min'][1]:.2f} after"
    )
    report(header + "\n\n" + table(results, nbytes) + "\n", env, results, args)


if __name__ == "__main__":
    main()
