#!/usr/bin/env python3
"""Times a `.pkl` of NumPy arrays: index and full load with pickle, NumPy and tensorfmt.

One run, side by side, on one file written by `pickle.dump` (CPython's default protocol
unless `--protocol` says otherwise) of a dict of NumPy arrays shaped like a transformer's
state dict (the PyTorch suite's shapes; float32 and float16, as NumPy has no bfloat16).
Python has no index-only read of a pickle: `pickle.load` and `np.load(allow_pickle=True)`
read every array. tensorfmt's index (open + list the arrays, no payload byte read) and full
load, and the memcpy references, are timed by the `tfbench` release binary
(benches/src/bin/tfbench.rs), the same way: wall clock around the operation alone, one
untimed warm-up run, the median of N runs, the page cache warm, all files in the same
temporary directory.

Usage (see benches/compare.sh --suite pickle, which builds tfbench first):

    python benches/compare_pickle.py --tfbench target/release/tfbench [--runs 5]
        [--open-runs 20] [--layers 24] [--small] [--protocol 5] [--dir PARENT]
        [--only PREFIX] [--json results.json] [--markdown table.md] [--keep]

Ratios are time(other) / time(tensorfmt): above 1 means tensorfmt is faster.
"""

import os
import pickle
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import (  # noqa: E402
    GIB, MIB, Bench, bandwidth, cell_notes, environment, fmt_ratio, fmt_time, median, report,
    run_tfbench, same_payload, verdict,
)
from compare_torch import FULL, SMALL, state_dict_args, state_dict_spec  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402


def make_arrays(spec):
    """The arrays of `spec` ((name, shape, torch dtype)), random values; bfloat16 tensors
    become float16 (NumPy has no bfloat16)."""
    g = torch.Generator().manual_seed(0)
    out = {}
    for name, shape, dtype in spec:
        t = torch.randn(shape, generator=g) * 0.02
        out[name] = t.to(torch.float16 if dtype == torch.bfloat16 else dtype).numpy()
    return out


def describe(arrays):
    """The payload bytes and a line on the arrays."""
    total = sum(a.nbytes for a in arrays.values())
    by = {}
    for a in arrays.values():
        c, b = by.get(a.dtype.name, (0, 0))
        by[a.dtype.name] = (c + 1, b + a.nbytes)
    parts = ", ".join(f"{c} {k} ({b / GIB:.2f} GiB)" for k, (c, b) in sorted(by.items()))
    return total, f"{len(arrays)} arrays, {total / GIB:.2f} GiB of payload: {parts}"


def pickle_load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def python_side(b, inp, nbytes):
    b.time("pkl.read.owned", "pickle.load(f): every array rebuilt in memory of its own", nbytes,
           lambda: pickle_load(inp))
    b.lib = NP
    b.time("pkl.read.np", "np.load(path, allow_pickle=True) (unpickles the file)", nbytes,
           lambda: np.load(inp, allow_pickle=True))
    b.lib = PY


PY, NP, TF = "pickle", "numpy", "tensorfmt"

# (label, {lib: op}) of the side-by-side table.
ROWS = [
    ("index: the arrays listed (tensorfmt: open + index, no payload byte read; Python reads "
     "everything)", {PY: "pkl.read.owned", NP: "pkl.read.np", TF: "pkl.open"}),
    ("index, format given to tensorfmt (no detection)",
     {PY: "pkl.read.owned", NP: "pkl.read.np", TF: "pkl.open.nodetect"}),
    ("full load into owned memory", {PY: "pkl.read.owned", NP: "pkl.read.np", TF: "pkl.read.owned"}),
    ("every array as a view of the map, no byte read (tensorfmt)", {TF: "pkl.read.view"}),
]

LOADS = [
    ("memcpy, mmap → fresh buffers (the limit)", "pkl.memcpy.fresh", "memcpy"),
    ("memcpy, hot (no map, allocation or page fault)", "pkl.memcpy.hot", "memcpy"),
    ("tensorfmt full load", "pkl.read.owned", TF),
    ("pickle.load", "pkl.read.owned", PY),
    ("np.load(allow_pickle=True)", "pkl.read.np", NP),
]


def table(results, nbytes):
    by = {(r["op"], r["lib"]): r for r in results}
    lines = [
        "| workload | pickle | NumPy | tensorfmt | pickle / tensorfmt | NumPy / tensorfmt |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, ops in ROWS:
        t = {lib: median(by, ops[lib], lib) if lib in ops else None for lib in (PY, NP, TF)}
        if all(v is None for v in t.values()):
            continue
        lines.append(
            f"| {label} | {fmt_time(t[PY])} | {fmt_time(t[NP])} | {fmt_time(t[TF])} | "
            f"{fmt_ratio(t[PY], t[TF])} | {fmt_ratio(t[NP], t[TF])} |"
        )
    more, fresh_s = bandwidth(by, "pkl", LOADS, nbytes, f"{nbytes / MIB:.0f} MiB")
    lines += more

    py_load = median(by, "pkl.read.owned", PY)
    index = [median(by, op, TF) for op in ("pkl.open", "pkl.open.nodetect")]
    index = [py_load / t if py_load and t else None for t in index]
    tf_load = median(by, "pkl.read.owned", TF)
    frac = fresh_s / tf_load if fresh_s and tf_load else None
    show = lambda v, unit="×": "n/a" if v is None else f"{v:.2f}{unit}"  # noqa: E731
    at_least = lambda v, bar: verdict(None if v is None else v >= bar)  # noqa: E731
    lines += [
        "",
        "| target | measured | status |",
        "|---|---|---|",
        f"| index ≥ 20x faster than `pickle.load` | {show(index[0])} with detection, "
        f"{show(index[1])} without | {at_least(index[0], 20)} with detection, "
        f"{at_least(index[1], 20)} without |",
        f"| full load ≥ 0.8 of memcpy (fresh buffers) | {show(frac, '')} | {at_least(frac, 0.8)} |",
    ]
    lines += cell_notes(results, [PY, NP, TF, "memcpy"])
    return "\n".join(lines)


def main():
    def protocol_arg(ap):
        ap.add_argument("--protocol", type=int, default=pickle.DEFAULT_PROTOCOL,
                        help=f"the pickle protocol of the file (default {pickle.DEFAULT_PROTOCOL})")

    args, shapes = state_dict_args(__doc__, 20, FULL, SMALL, "about 1.5 GiB of arrays",
                                   protocol_arg)
    protocol = args.protocol
    env = environment()
    env["numpy"] = np.__version__
    env["protocol"] = protocol
    load_before = os.getloadavg()[0]
    top = tempfile.mkdtemp(prefix="tfcompare-pkl-", dir=args.dir)
    try:
        arrays = make_arrays(state_dict_spec(**shapes))
        nbytes, what = describe(arrays)
        inp = os.path.join(top, "in.pkl")
        print(f"compare_pickle.py: writing {inp} (protocol {protocol})", file=sys.stderr)
        with open(inp, "wb") as f:
            pickle.dump(arrays, f, protocol=protocol)
        del arrays
        b = Bench(args.runs, args.open_runs, args.only, lib=PY)
        python_side(b, inp, nbytes)
        # The directory holds no other suite's input: tfbench runs the pickle ones (none
        # of them with candle).
        rust = run_tfbench(args, top, args.only)
        same_payload(rust["results"], nbytes, "compare_pickle.py", "Python")
        results = b.results + rust["results"]
    finally:
        if args.keep:
            print(f"compare_pickle.py: kept {top}", file=sys.stderr)
        else:
            shutil.rmtree(top, ignore_errors=True)

    env["dir"] = args.dir or tempfile.gettempdir()
    env["loadavg_1min"] = [load_before, os.getloadavg()[0]]
    env["arrays"] = what
    header = (
        f"{env['date']}, tree {env['revision']} — {env['cpus']} CPUs ({env['cpu']}), "
        f"{env['memory_gib']} GiB RAM, {env['platform']}, Python {env['python']}, "
        f"NumPy {env['numpy']}; `pickle.dump` protocol {protocol}; {what}; "
        f"median of {args.runs} runs ({args.open_runs} for tensorfmt's index), page cache warm, "
        f"files in {env['dir']}; 1-min load average {load_before:.2f} before, "
        f"{env['loadavg_1min'][1]:.2f} after"
    )
    report(header + "\n\n" + table(results, nbytes) + "\n", env, results, args)


if __name__ == "__main__":
    main()
