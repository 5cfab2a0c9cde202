#!/usr/bin/env python3
"""Times a safetensors file's open, full load and save with Python safetensors, tensorfmt,
the safetensors crate and candle.

One run, side by side, on one file written by `safetensors.torch.save_file` (the pinned
Python package): a transformer-like state dict in the dtypes such files hold (token and
position embeddings, biases and LayerNorm parameters in float32; attention matrices and
the LM head in bfloat16; MLP matrices in float16). The Python package is timed here;
tensorfmt, the safetensors crate (mmap + `SafeTensors::deserialize`), candle
(`MmapedSafetensors`) and the memcpy references by the `tfbench` release binary
(benches/src/bin/tfbench.rs, built with `--features candle`), which times its runs the
same way: wall clock around the operation alone, one untimed warm-up run, the median of N
runs, the page cache warm, all files in the same temporary directory. Before each save
the output file is removed and sync(2) called, outside the timed region, on both sides.

Usage (see benches/compare.sh --suite safetensors, which builds tfbench first):

    python benches/compare_safetensors.py --tfbench target/release/tfbench [--runs 5]
        [--open-runs 50] [--layers 12] [--small] [--dir PARENT] [--only PREFIX]
        [--json results.json] [--markdown table.md] [--keep]

Ratios are time(other) / time(tensorfmt): above 1 means tensorfmt is faster.
"""

import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import (  # noqa: E402
    MIB, Bench, bandwidth, cell_notes, environment, fmt_ratio, fmt_time, fresh, locked_version,
    median, report, verdict,
)
from compare_torch import (  # noqa: E402
    describe, make_state_dict, save_fsync, state_dict_args, tfbench_results,
)

import safetensors  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

# Shapes of the state dict: (layers, d_model, d_ffn, vocab, context).
FULL = dict(layers=12, d=768, ffn=3072, vocab=32000, ctx=1024)
SMALL = dict(layers=2, d=128, ffn=512, vocab=1000, ctx=64)


def state_dict_spec(layers, d, ffn, vocab, ctx):
    """(name, shape, dtype) of every tensor, in state-dict order."""
    f32, bf16, f16 = torch.float32, torch.bfloat16, torch.float16
    spec = [("tok_embeddings.weight", (vocab, d), f32), ("pos_embeddings.weight", (ctx, d), f32)]
    for i in range(layers):
        p = f"layers.{i}."
        spec += [(p + "ln_1.weight", (d,), f32), (p + "ln_1.bias", (d,), f32)]
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            spec += [(p + f"attn.{proj}.weight", (d, d), bf16), (p + f"attn.{proj}.bias", (d,), f32)]
        spec += [(p + "ln_2.weight", (d,), f32), (p + "ln_2.bias", (d,), f32)]
        spec += [(p + "mlp.fc_in.weight", (ffn, d), f16), (p + "mlp.fc_in.bias", (ffn,), f32)]
        spec += [(p + "mlp.fc_out.weight", (d, ffn), f16), (p + "mlp.fc_out.bias", (d,), f32)]
    spec += [("ln_f.weight", (d,), f32), ("ln_f.bias", (d,), f32), ("lm_head.weight", (vocab, d), bf16)]
    return spec


def open_keys(path):
    """safe_open (map + header) and the keys listed; no tensor read."""
    with safe_open(path, framework="pt") as f:
        return list(f.keys())


def get_every_tensor(path):
    """safe_open (pread backend: each tensor read into memory of its own), then get_tensor
    of every key."""
    with safe_open(path, framework="pt", backend="pread") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def python_side(b, d, sd, nbytes):
    inp = os.path.join(d, "in.safetensors")
    out = os.path.join(d, "out_py.safetensors")
    b.time("st.open", "safe_open(path, framework='pt') + list(keys())", nbytes,
           lambda: open_keys(inp), runs=b.open_runs)
    b.time("st.read.owned", "safetensors.torch.load_file(path, backend='pread'): every tensor read "
           "into memory of its own", nbytes, lambda: load_file(inp, backend="pread"))
    b.time("st.read.get_tensor", "safe_open(path, framework='pt', backend='pread') + get_tensor(k) "
           "for every key", nbytes, lambda: get_every_tensor(inp))
    b.time("st.read.view", "safetensors.torch.load_file(path) (default mmap backend: tensors over a "
           "private map of the file, no byte read until used)", nbytes, lambda: load_file(inp),
           runs=b.open_runs)
    b.time("st.write.fsync", "safetensors.torch.save_file(sd, path) + os.fsync", nbytes,
           lambda: save_fsync(sd, out, save=save_file), before=fresh(out))
    b.time("st.write.nofsync", "safetensors.torch.save_file(sd, path)", nbytes,
           lambda: save_file(sd, out), before=fresh(out))
    fresh(out)()


PY, TF, CRATE, CANDLE = "safetensors-py", "tensorfmt", "safetensors", "candle"
LIBS = (PY, TF, CRATE, CANDLE)

# (label, {lib: op}) of the side-by-side table.
ROWS = [
    ("index-only open + list the tensors (no payload byte read)",
     {PY: "st.open", TF: "st.open", CRATE: "st.open", CANDLE: "st.open"}),
    ("index-only open, format given to tensorfmt (no detection)",
     {PY: "st.open", TF: "st.open.nodetect", CRATE: "st.open", CANDLE: "st.open"}),
    ("full load into owned memory (Python: `load_file(backend='pread')`)",
     {PY: "st.read.owned", TF: "st.read.owned", CRATE: "st.read.owned", CANDLE: "st.read.owned"}),
    ("full load into owned memory (Python: `safe_open(backend='pread')` + `get_tensor` every key)",
     {PY: "st.read.get_tensor", TF: "st.read.owned", CRATE: "st.read.owned", CANDLE: "st.read.owned"}),
    ("every tensor as a view of the map, no byte read (Python: `load_file`, mmap backend)",
     {PY: "st.read.view", TF: "st.read.view"}),
    ("save, with fsync", {PY: "st.write.fsync", TF: "st.write.fsync", CRATE: "st.write.fsync"}),
    ("save, no fsync", {PY: "st.write.nofsync", TF: "st.write.nofsync", CRATE: "st.write.nofsync"}),
]

# (label, op, lib) of the bandwidth table; the first two are the references.
LOADS = [
    ("memcpy, mmap → fresh buffers (the limit)", "st.memcpy.fresh", "memcpy"),
    ("memcpy, hot (no map, allocation or page fault)", "st.memcpy.hot", "memcpy"),
    ("tensorfmt full load", "st.read.owned", TF),
    ("safetensors crate: every data().to_vec()", "st.read.owned", CRATE),
    ("candle: MmapedSafetensors load of every tensor", "st.read.owned", CANDLE),
    ("Python safetensors.torch.load_file(backend='pread')", "st.read.owned", PY),
    ("Python safe_open(backend='pread') + get_tensor every key", "st.read.get_tensor", PY),
]


def table(results, nbytes):
    by = {(r["op"], r["lib"]): r for r in results}
    lines = [
        "| workload | Python safetensors | tensorfmt | safetensors crate | candle "
        "| Python / tensorfmt | crate / tensorfmt | candle / tensorfmt |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, ops in ROWS:
        t = {lib: median(by, ops[lib], lib) if lib in ops else None for lib in LIBS}
        if all(v is None for v in t.values()):
            continue
        lines.append(
            f"| {label} | {fmt_time(t[PY])} | {fmt_time(t[TF])} | {fmt_time(t[CRATE])} | "
            f"{fmt_time(t[CANDLE])} | {fmt_ratio(t[PY], t[TF])} | {fmt_ratio(t[CRATE], t[TF])} | "
            f"{fmt_ratio(t[CANDLE], t[TF])} |"
        )

    more, fresh_s = bandwidth(by, "st", LOADS, nbytes, f"{nbytes / MIB:.0f} MiB")
    lines += more

    def ratio(op_other, lib, op_tf):
        o, t = median(by, op_other, lib), median(by, op_tf, TF)
        return o / t if o and t else None

    opens = [ratio("st.open", CRATE, op) for op in ("st.open", "st.open.nodetect")]
    load = ratio("st.read.owned", CRATE, "st.read.owned")
    tf_load = median(by, "st.read.owned", TF)
    frac = fresh_s / tf_load if fresh_s and tf_load else None
    saves = [ratio(f"st.write.{k}", PY, f"st.write.{k}") for k in ("fsync", "nofsync")]
    show = lambda v, unit="×": "n/a" if v is None else f"{v:.2f}{unit}"  # noqa: E731
    at_least = lambda v, bar: verdict(None if v is None else v >= bar)  # noqa: E731
    lines += [
        "",
        "| target | measured | status |",
        "|---|---|---|",
        f"| index-only open at least as fast as the safetensors crate (crate / tensorfmt ≥ 1) | "
        f"{show(opens[0])} with detection, {show(opens[1])} without | "
        f"{at_least(opens[0], 1)} with detection, {at_least(opens[1], 1)} without |",
        f"| full load at least as fast as the safetensors crate (crate / tensorfmt ≥ 1) | "
        f"{show(load)} | {at_least(load, 1)} |",
        f"| full load ≥ 0.8 of memcpy (fresh buffers) | {show(frac, '')} | {at_least(frac, 0.8)} |",
        f"| save against `safetensors.torch.save_file` (no target; Python / tensorfmt) | "
        f"{show(saves[0])} with fsync, {show(saves[1])} without | — |",
    ]

    lines += cell_notes(results, [PY, TF, CRATE, CANDLE, "memcpy"])
    return "\n".join(lines)


def main():
    args, shapes = state_dict_args(__doc__, 50, FULL, SMALL, "197 tensors, about 306 MiB")
    env = environment()
    env["torch"] = torch.__version__
    env["safetensors"] = safetensors.__version__
    env["safetensors_crate"] = locked_version("safetensors")
    env["candle"] = locked_version("candle-core")
    load_before = os.getloadavg()[0]
    top = tempfile.mkdtemp(prefix="tfcompare-st-", dir=args.dir)
    d = os.path.join(top, "st")
    os.mkdir(d)
    try:
        print(f"compare_safetensors.py: writing the state dict with save_file in {d}", file=sys.stderr)
        sd = make_state_dict(state_dict_spec(**shapes))
        _, nbytes, what = describe(sd, unit="MiB")
        save_file(sd, os.path.join(d, "in.safetensors"))
        b = Bench(args.runs, args.open_runs, args.only, lib=PY)
        python_side(b, d, sd, nbytes)
        del sd
        # The directory holds no other suite's input: tfbench runs the safetensors ones.
        results = b.results + tfbench_results(args, top, nbytes, "compare_safetensors.py", "Python")
    finally:
        if args.keep:
            print(f"compare_safetensors.py: kept {top}", file=sys.stderr)
        else:
            shutil.rmtree(top, ignore_errors=True)

    env["dir"] = args.dir or tempfile.gettempdir()
    env["loadavg_1min"] = [load_before, os.getloadavg()[0]]
    env["state_dict"] = what
    header = (
        f"{env['date']}, tree {env['revision']} — {env['cpus']} CPUs ({env['cpu']}), "
        f"{env['memory_gib']} GiB RAM, {env['platform']}, Python {env['python']}, "
        f"safetensors {env['safetensors']} (Python), safetensors crate {env['safetensors_crate']}, "
        f"candle-core {env['candle']}, torch {env['torch']}; state dict: {what}; "
        f"median of {args.runs} runs ({args.open_runs} for index-only opens), page cache warm, "
        f"files in {env['dir']}; 1-min load average {load_before:.2f} before, "
        f"{env['loadavg_1min'][1]:.2f} after"
    )
    report(header + "\n\n" + table(results, nbytes) + "\n", env, results, args)


if __name__ == "__main__":
    main()
