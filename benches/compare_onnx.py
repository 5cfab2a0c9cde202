#!/usr/bin/env python3
"""Times reading every initializer of an ONNX model with onnx and with tensorfmt.

One run, side by side, on one model written by the real onnx package, twice: every
initializer inline (`onnx.save_model`, raw_data) and every initializer in one external
data file (`save_as_external_data=True, all_tensors_to_one_file=True, size_threshold=0`).
The model is transformer-like (embeddings and an LM head in float32; per layer float16
attention and MLP matrices, float32 biases and LayerNorm parameters, and an int64
position table), about 1.07 GiB of payload. onnx is timed here: `onnx.load` then
`numpy_helper.to_array` of every initializer (the arrays materialized), and
`onnx.load(load_external_data=False)` as its index-only open; tensorfmt and the memcpy
reference by the `tfbench` release binary (benches/src/bin/tfbench.rs), which times its
runs the same way: wall clock around the operation alone, one untimed warm-up run, the
median of N runs, the page cache warm, all files in the same temporary directory.

Usage (see benches/compare.sh --suite onnx, which builds tfbench first):

    python benches/compare_onnx.py --tfbench target/release/tfbench [--runs 5]
        [--open-runs 20] [--small] [--dir PARENT] [--json results.json]
        [--markdown table.md] [--keep]

Ratios are time(onnx) / time(tensorfmt): above 1 means tensorfmt is faster.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import Bench, environment, fmt_ratio, fmt_time  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

GIB = 1 << 30
FULL = dict(layers=24, d=1024, ffn=4096, vocab=65536, ctx=2048)
SMALL = dict(layers=2, d=128, ffn=512, vocab=1000, ctx=64)


def spec(layers, d, ffn, vocab, ctx):
    """(name, shape, dtype) of every initializer."""
    out = [("tok_embeddings.weight", (vocab, d), np.float32),
           ("pos_ids", (ctx,), np.int64), ("pos_embeddings.weight", (ctx, d), np.float32)]
    for i in range(layers):
        p = f"layers.{i}."
        out += [(p + "ln_1.weight", (d,), np.float32), (p + "ln_1.bias", (d,), np.float32)]
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out += [(p + f"attn.{proj}.weight", (d, d), np.float16),
                    (p + f"attn.{proj}.bias", (d,), np.float32)]
        out += [(p + "mlp.fc_in.weight", (ffn, d), np.float16), (p + "mlp.fc_in.bias", (ffn,), np.float32),
                (p + "mlp.fc_out.weight", (d, ffn), np.float16), (p + "mlp.fc_out.bias", (d,), np.float32)]
    out += [("ln_f.weight", (d,), np.float32), ("lm_head.weight", (vocab, d), np.float32)]
    return out


def make_model(shapes):
    rng = np.random.default_rng(0)
    inits = []
    for name, shape, dtype in spec(**shapes):
        if dtype == np.int64:
            a = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
        else:
            a = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(dtype)
        inits.append(numpy_helper.from_array(a, name=name))
    g = helper.make_graph([], "bench", [], [], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def write_models(d, shapes):
    """Writes onnx_inline/in.onnx and onnx_external/in.onnx; returns (payload bytes, text)."""
    inline = os.path.join(d, "onnx_inline", "in.onnx")
    external = os.path.join(d, "onnx_external", "in.onnx")
    if os.path.exists(inline) and os.path.exists(external):
        m = onnx.load(inline, load_external_data=False)
    else:
        m = make_model(shapes)
        os.makedirs(os.path.dirname(inline), exist_ok=True)
        os.makedirs(os.path.dirname(external), exist_ok=True)
        onnx.save_model(m, inline)
        m2 = onnx.ModelProto.FromString(m.SerializeToString())
        onnx.save_model(m2, external, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="in.onnx.data", size_threshold=0)
        m = onnx.load(inline, load_external_data=False)
    n = len(m.graph.initializer)
    total = sum(len(t.raw_data) for t in m.graph.initializer)
    return total, f"{n} initializers, {total / GIB:.2f} GiB of payload (float32, float16, int64)"


def load_all(path):
    m = onnx.load(path)
    return [numpy_helper.to_array(t) for t in m.graph.initializer]


def onnx_side(b, d, nbytes):
    for kind in ("inline", "external"):
        p = os.path.join(d, f"onnx_{kind}", "in.onnx")
        b.time(f"onnx.{kind}.open", "onnx.load(path, load_external_data=False)", nbytes,
               lambda p=p: onnx.load(p, load_external_data=False), runs=b.open_runs)
        b.time(f"onnx.{kind}.read.owned", "onnx.load(path) + numpy_helper.to_array(each)",
               nbytes, lambda p=p: load_all(p))


def median(by, op, lib):
    r = by.get((op, lib))
    return r["median_s"] if r else None


def table(results, nbytes):
    by = {(r["op"], r["lib"]): r for r in results}
    lines = ["| model | workload | onnx | tensorfmt | onnx / tensorfmt |", "|---|---|---:|---:|---:|"]
    for kind in ("inline", "external"):
        for label, op, tf_op in (("index-only open", "open", "open"),
                                 ("every initializer into owned memory", "read.owned", "read.owned"),
                                 ("every initializer usable (tensorfmt: zero-copy views)", "read.owned",
                                  "read.view")):
            o = median(by, f"onnx.{kind}.{op}", "onnx")
            t = median(by, f"onnx.{kind}.{tf_op}", "tensorfmt")
            lines.append(f"| {kind} | {label} | {fmt_time(o)} | {fmt_time(t)} | {fmt_ratio(o, t)} |")
    lines += ["", "| model | read | time | GB/s | of memcpy |", "|---|---|---:|---:|---:|"]
    for kind in ("inline", "external"):
        m = median(by, f"onnx.{kind}.memcpy.fresh", "memcpy")
        for label, op, lib in (("memcpy, mmap → fresh buffers (the limit)", "memcpy.fresh", "memcpy"),
                               ("tensorfmt, every initializer", "read.owned", "tensorfmt"),
                               ("onnx.load + to_array", "read.owned", "onnx")):
            s = median(by, f"onnx.{kind}.{op}", lib)
            gbs = f"{nbytes / s / 1e9:.2f}" if s else "n/a"
            frac = f"{m / s:.2f}" if (s and m) else "n/a"
            lines.append(f"| {kind} | {label} | {fmt_time(s)} | {gbs} | {frac} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfbench", default="target/release/tfbench")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--open-runs", type=int, default=20)
    ap.add_argument("--small", action="store_true", help="a tiny model: checks the pipeline")
    ap.add_argument("--dir", default=None, help="parent of the work directory (default: the temp dir)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the models")
    args = ap.parse_args()

    parent = args.dir or tempfile.gettempdir()
    d = os.path.join(parent, "tfbench_onnx_small" if args.small else "tfbench_onnx")
    os.makedirs(d, exist_ok=True)
    try:
        nbytes, what = write_models(d, SMALL if args.small else FULL)
        print(f"compare_onnx: {what}", file=sys.stderr)
        b = Bench(args.runs, args.open_runs, ["onnx."], lib="onnx")
        onnx_side(b, d, nbytes)
        cmd = [args.tfbench, "--dir", d, "--runs", str(args.runs), "--open-runs", str(args.open_runs),
               "--only", "onnx."]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, check=True)
        rust = json.loads(proc.stdout)
        for r in rust["results"]:
            if r["bytes"] != nbytes:
                sys.exit(f"compare_onnx.py: tfbench saw {r['bytes']} payload bytes, onnx {nbytes}")
        results = b.results + rust["results"]
        env = environment()
        env["onnx"] = onnx.__version__
        env["numpy"] = np.__version__
        text = f"{what}\n\n" + table(results, nbytes)
        print(text)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(text + "\n")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"environment": env, "model": what, "results": results}, f, indent=1)
    finally:
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
