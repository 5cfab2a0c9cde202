#!/usr/bin/env python3
"""Times reading every initializer of an ONNX model with onnx and with tensorfmt.

One run, side by side, on one model written by the real onnx package, twice: every
initializer inline (`onnx.save_model`, raw_data) and every initializer in one external
data file (`save_as_external_data=True, all_tensors_to_one_file=True, size_threshold=0`).
The model is transformer-like (embeddings and an LM head in float32; per layer float16
attention and MLP matrices, float32 biases and LayerNorm parameters, and an int64
position table), about 1.07 GiB of payload. onnx is timed here: `onnx.load` then
`numpy_helper.to_array` of every initializer (the arrays materialized), and
`onnx.load(load_external_data=False)` as its index-only open; tensorfmt (open; every
initializer into owned memory, into buffers kept from the previous read, and as zero-copy
views) and the memcpy references (fresh buffers, and a hot copy) by the `tfbench` release
binary (benches/src/bin/tfbench.rs), which times its runs the same way: wall clock around
the operation alone, one untimed warm-up run, the median of N runs, the page cache warm,
all files in the same directory.

The models are kept in PARENT/tfbench_onnx (tfbench_onnx_small with --small; PARENT is
--dir, else $TFBENCH_DIR, else the system temporary directory) and reused by the next run
when model.json there says they were made from the same shapes by the same onnx and NumPy
versions; --clean removes them afterwards.

Usage (see benches/compare.sh --suite onnx, which builds tfbench first):

    python benches/compare_onnx.py --tfbench target/release/tfbench [--runs 5]
        [--open-runs 20] [--small] [--dir PARENT] [--only PREFIX] [--json results.json]
        [--markdown table.md] [--clean]

Ratios are time(onnx) / time(tensorfmt): above 1 means tensorfmt is faster.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import (  # noqa: E402
    Bench, environment, fmt_ratio, fmt_time, median, report, run_tfbench, same_payload,
)

import google.protobuf  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402
from google.protobuf.internal import api_implementation  # noqa: E402
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
    """Writes onnx_inline/in.onnx and onnx_external/in.onnx (with in.onnx.data) in `d`,
    or reuses those a previous run wrote from the same shapes with the same onnx (as
    model.json, written last, says); returns (payload bytes, text)."""
    inline = os.path.join(d, "onnx_inline", "in.onnx")
    external = os.path.join(d, "onnx_external", "in.onnx")
    stamp_path = os.path.join(d, "model.json")
    stamp = {"shapes": shapes, "onnx": onnx.__version__, "numpy": np.__version__}
    try:
        with open(stamp_path) as f:
            reuse = json.load(f) == stamp
    except (OSError, ValueError):
        reuse = False
    if reuse:
        print(f"compare_onnx: reusing the models in {d}", file=sys.stderr)
    else:
        print(f"compare_onnx: writing the models with onnx in {d}", file=sys.stderr)
        for sub in ("onnx_inline", "onnx_external"):
            shutil.rmtree(os.path.join(d, sub), ignore_errors=True)
            os.makedirs(os.path.join(d, sub))
        if os.path.exists(stamp_path):
            os.remove(stamp_path)
        m = make_model(shapes)
        onnx.save_model(m, inline)
        # save_model with external data moves the tensors' bytes out of `m`: last.
        onnx.save_model(m, external, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="in.onnx.data", size_threshold=0)
        del m
        with open(stamp_path, "w") as f:
            json.dump(stamp, f)
    m = onnx.load(inline, load_external_data=False)
    n = len(m.graph.initializer)
    total = sum(len(t.raw_data) for t in m.graph.initializer)
    by = {}
    for t in m.graph.initializer:
        k = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).name
        c, b = by.get(k, (0, 0))
        by[k] = (c + 1, b + len(t.raw_data))
    parts = ", ".join(f"{c} {k} ({b / GIB:.2f} GiB)" for k, (c, b) in sorted(by.items()))
    big = sum(1 for t in m.graph.initializer if len(t.raw_data) >= 1 << 20)
    return total, (f"{n} initializers, {total / GIB:.2f} GiB of payload: {parts}; "
                   f"{big} of them ≥ 1 MiB")


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


def table(results, nbytes):
    by = {(r["op"], r["lib"]): r for r in results}
    lines = ["| model | workload | onnx | tensorfmt | onnx / tensorfmt |", "|---|---|---:|---:|---:|"]
    for kind in ("inline", "external"):
        for label, op, tf_op in (("index-only open", "open", "open"),
                                 ("every initializer into owned memory", "read.owned", "read.owned"),
                                 ("every initializer in memory (tensorfmt: into buffers kept from the "
                                  "previous read)", "read.owned", "read.reused"),
                                 ("every initializer usable (tensorfmt: zero-copy views)", "read.owned",
                                  "read.view")):
            o = median(by, f"onnx.{kind}.{op}", "onnx")
            t = median(by, f"onnx.{kind}.{tf_op}", "tensorfmt")
            if o is None and t is None:
                continue
            lines.append(f"| {kind} | {label} | {fmt_time(o)} | {fmt_time(t)} | {fmt_ratio(o, t)} |")
    lines += ["", "Reading every initializer into owned memory, against the memcpy limit "
              "(of memcpy = memcpy time / read time; GB/s = 10^9 bytes per second):", "",
              "| model | read | time | GB/s | of memcpy, fresh buffers | of memcpy, hot |",
              "|---|---|---:|---:|---:|---:|"]
    for kind in ("inline", "external"):
        m = median(by, f"onnx.{kind}.memcpy.fresh", "memcpy")
        h = median(by, f"onnx.{kind}.memcpy.hot", "memcpy")
        for label, op, lib in (("memcpy, mmap → fresh buffers (the limit)", "memcpy.fresh", "memcpy"),
                               ("memcpy, hot (no map, allocation or page fault)", "memcpy.hot", "memcpy"),
                               ("tensorfmt, every initializer into owned memory", "read.owned", "tensorfmt"),
                               ("tensorfmt, every initializer into reused buffers", "read.reused", "tensorfmt"),
                               ("onnx.load + to_array", "read.owned", "onnx")):
            s = median(by, f"onnx.{kind}.{op}", lib)
            if s is None:
                continue
            frac = lambda ref: f"{ref / s:.2f}" if ref else "n/a"  # noqa: E731
            lines.append(f"| {kind} | {label} | {fmt_time(s)} | {nbytes / s / 1e9:.2f} | "
                         f"{frac(m)} | {frac(h)} |")

    lines += ["", "| target | inline | external |", "|---|---|---|"]
    speed, frac = [], []
    for kind in ("inline", "external"):
        o, t = median(by, f"onnx.{kind}.read.owned", "onnx"), median(by, f"onnx.{kind}.read.owned", "tensorfmt")
        m = median(by, f"onnx.{kind}.memcpy.fresh", "memcpy")
        speed.append(f"{o / t:.2f}× ({verdict(o / t >= 5)})" if o and t else "n/a")
        frac.append(f"{m / t:.2f} ({verdict(m / t >= 0.8)})" if m and t else "n/a")
    lines.append(f"| every initializer into owned memory ≥ 5× onnx.load + to_array | {speed[0]} | {speed[1]} |")
    lines.append(f"| read ≥ 0.8 of memcpy bandwidth | {frac[0]} | {frac[1]} |")

    lines += ["", "What each cell times (median wall clock):", ""]
    seen = []
    for r in results:
        if (r["lib"], r["how"]) not in seen:
            seen.append((r["lib"], r["how"]))
    order = ["onnx", "tensorfmt", "memcpy"]
    for lib, how in sorted(seen, key=lambda x: order.index(x[0])):
        lines.append(f"- {lib}: {how}")
    return "\n".join(lines)


def verdict(ok):
    return "met" if ok else "not met"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfbench", default="target/release/tfbench",
                    help="the tfbench binary (cargo build --release -p tensorfmt-benches)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per read")
    ap.add_argument("--open-runs", type=int, default=20, help="timed runs per index-only open")
    ap.add_argument("--small", action="store_true", help="a tiny model: checks the pipeline")
    ap.add_argument("--dir", default=os.environ.get("TFBENCH_DIR"),
                    help="parent of the work directory (default: $TFBENCH_DIR, else the temp dir)")
    ap.add_argument("--only", action="append", default=[],
                    help="op prefix to run (repeatable; default: every onnx. op)")
    ap.add_argument("--json", default=None, help="also write all timings as JSON here")
    ap.add_argument("--markdown", default=None, help="also write the table as Markdown here")
    ap.add_argument("--clean", action="store_true", help="remove the models afterwards")
    args = ap.parse_args()

    parent = args.dir or tempfile.gettempdir()
    d = os.path.join(parent, "tfbench_onnx_small" if args.small else "tfbench_onnx")
    os.makedirs(d, exist_ok=True)
    only = args.only or ["onnx."]
    try:
        nbytes, what = write_models(d, SMALL if args.small else FULL)
        print(f"compare_onnx: {what}", file=sys.stderr)
        load_before = os.getloadavg()[0]
        b = Bench(args.runs, args.open_runs, only, lib="onnx")
        onnx_side(b, d, nbytes)
        rust = run_tfbench(args, d, only)
        same_payload(rust["results"], nbytes, "compare_onnx.py", "onnx")
        results = b.results + rust["results"]
    finally:
        if args.clean:
            shutil.rmtree(d, ignore_errors=True)

    env = environment()
    env["onnx"] = onnx.__version__
    env["protobuf"] = google.protobuf.__version__
    env["dir"] = parent
    env["loadavg_1min"] = [load_before, os.getloadavg()[0]]
    env["model"] = what
    header = (
        f"{env['date']}, tree {env['revision']} — {env['cpus']} CPUs ({env['cpu']}), "
        f"{env['memory_gib']} GiB RAM, {env['platform']}, Python {env['python']}, "
        f"onnx {env['onnx']}, protobuf {env['protobuf']} ({api_implementation.Type()}), "
        f"NumPy {env['numpy']}; model: {what}; median of {args.runs} runs "
        f"({args.open_runs} for index-only opens), page cache warm, files in {env['dir']}; "
        f"1-min load average {load_before:.2f} before, {env['loadavg_1min'][1]:.2f} after"
    )
    report(header + "\n\n" + table(results, nbytes) + "\n", env, results, args)


if __name__ == "__main__":
    main()
