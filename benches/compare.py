#!/usr/bin/env python3
"""Times the same npy/npz workloads with NumPy, tensorfmt and ndarray-npy in one run.

NumPy is timed here; tensorfmt and ndarray-npy by the `tfbench` release binary
(benches/src/bin/tfbench.rs), which times its runs the same way: wall clock around the
operation alone, one untimed warm-up run, the median of N runs, the page cache warm, all
files in the same temporary directory. Before each write run the output file is removed
and sync(2) called, outside the timed region, on both sides.

The input files are written by NumPy (np.save / np.savez / np.savez_compressed of
standard-normal float32 data), so the Rust side also reads NumPy's own files.

Usage (see benches/compare.sh, which builds tfbench first):

    python benches/compare.py --tfbench target/release/tfbench [--runs 5] [--open-runs 50]
        [--dir PARENT] [--no-1g] [--json results.json] [--markdown table.md]

Ratios are time(other) / time(tensorfmt): above 1 means tensorfmt is faster.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

MIB = 1 << 20
GIB = 1 << 30


def size_label(n):
    if n >= 1 << 30 and n % (1 << 30) == 0:
        return f"{n >> 30}GiB"
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB}MiB"
    return f"{n // 1024}KiB"


class Bench:
    """Times Python workloads as tfbench times Rust ones; `lib` names the library timed."""

    def __init__(self, runs, open_runs, only, lib="numpy"):
        self.runs = runs
        self.open_runs = open_runs
        self.only = only
        self.lib = lib
        self.results = []

    def time(self, op, how, nbytes, fn, runs=None, before=None):
        if self.only and not any(op.startswith(p) for p in self.only):
            return
        runs = runs or self.runs
        print(f"compare: {op} [{self.lib}] {how}", file=sys.stderr)
        if before:
            before()
        out = fn()  # warm-up, untimed
        del out
        times = []
        for _ in range(runs):
            if before:
                before()
            t0 = time.perf_counter()
            out = fn()
            dt = time.perf_counter() - t0
            del out
            times.append(dt)
        self.results.append(
            {
                "op": op,
                "lib": self.lib,
                "how": how,
                "bytes": nbytes,
                "runs": runs,
                "median_s": statistics.median(times),
                "min_s": min(times),
                "max_s": max(times),
                "times_s": times,
            }
        )


def fresh(path):
    def prep():
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        os.sync()

    return prep


def save_fsync(path, saver, *args, **kwargs):
    with open(path, "wb") as f:
        saver(f, *args, **kwargs)
        f.flush()
        os.fsync(f.fileno())


def load_npz_all(path):
    with np.load(path) as z:
        return [z[k] for k in z.files]


def prepare(d, with_1g):
    """Writes the inputs with NumPy; returns their description."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(64 * MIB // 1, dtype=np.float32)  # 64 Mi elements = 256 MiB
    np.save(os.path.join(d, "in.npy"), a)
    # Open-only files: real data, not sparse.
    np.save(os.path.join(d, "open_1MiB.npy"), a[: MIB // 4])
    np.save(os.path.join(d, "open_64MiB.npy"), a[: 16 * MIB])
    os.link(os.path.join(d, "in.npy"), os.path.join(d, "open_256MiB.npy"))
    if with_1g:
        with open(os.path.join(d, "open_1GiB.npy"), "wb") as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f4", "fortran_order": False, "shape": (4 * a.size,)}
            )
            for _ in range(4):
                a.tofile(f)
    stored = {f"a{i}": rng.standard_normal(16 * MIB, dtype=np.float32) for i in range(4)}
    np.savez(os.path.join(d, "in_stored.npz"), **stored)
    deflate = {f"a{i}": rng.standard_normal(2 * MIB, dtype=np.float32) for i in range(4)}
    np.savez_compressed(os.path.join(d, "in_deflate.npz"), **deflate)
    return a, stored, deflate


def numpy_side(b, d, a, stored, deflate):
    # npy
    inp = os.path.join(d, "in.npy")
    out = os.path.join(d, "out_np.npy")
    nb = a.nbytes
    b.time("npy.write.fsync", "np.save(open file) + flush + os.fsync", nb,
           lambda: save_fsync(out, np.save, a), before=fresh(out))
    b.time("npy.write.nofsync", "np.save(path)", nb,
           lambda: np.save(out, a), before=fresh(out))
    fresh(out)()
    b.time("npy.read.owned", "np.load(path)", nb, lambda: np.load(inp))
    b.time("npy.read.view", "np.load(path, mmap_mode='r')", nb,
           lambda: np.load(inp, mmap_mode="r"), runs=b.open_runs)
    # open-only
    opens = []
    for name in os.listdir(d):
        if name.startswith("open_") and name.endswith(".npy"):
            p = os.path.join(d, name)
            opens.append((os.path.getsize(p), name[len("open_"):-len(".npy")], p))
    for _, label, p in sorted(opens):
        n = int(np.load(p, mmap_mode="r").nbytes)
        b.time(f"npy.open.{label}", "np.load(path, mmap_mode='r')", n,
               lambda p=p: np.load(p, mmap_mode="r"), runs=b.open_runs)
    # npz
    for kind, arrays, saver in (("stored", stored, np.savez),
                                ("deflate", deflate, np.savez_compressed)):
        inp = os.path.join(d, f"in_{kind}.npz")
        out = os.path.join(d, f"out_np_{kind}.npz")
        nb = sum(x.nbytes for x in arrays.values())
        name = saver.__name__
        b.time(f"npz.write.{kind}.fsync", f"np.{name}(open file) + flush + os.fsync", nb,
               lambda: save_fsync(out, saver, **arrays), before=fresh(out))
        b.time(f"npz.write.{kind}.nofsync", f"np.{name}(path)", nb,
               lambda: saver(out, **arrays), before=fresh(out))
        fresh(out)()
        b.time(f"npz.read.{kind}.owned", "np.load(npz)[k] for all k", nb,
               lambda: load_npz_all(inp))


ROWS = [
    ("npy.write.fsync", "npy write 256 MiB, with fsync"),
    ("npy.write.nofsync", "npy write 256 MiB, no fsync"),
    ("npy.read.owned", "npy read 256 MiB into memory"),
    ("npy.read.view", "npy open + zero-copy view 256 MiB"),
    ("npy.open.1MiB", "npy open (mmap + header) 1 MiB"),
    ("npy.open.64MiB", "npy open (mmap + header) 64 MiB"),
    ("npy.open.256MiB", "npy open (mmap + header) 256 MiB"),
    ("npy.open.1GiB", "npy open (mmap + header) 1 GiB"),
    ("npz.write.stored.fsync", "npz write 4x64 MiB stored, with fsync"),
    ("npz.write.stored.nofsync", "npz write 4x64 MiB stored, no fsync"),
    ("npz.read.stored.owned", "npz read 4x64 MiB stored into memory"),
    ("npz.read.stored.view", "npz open + zero-copy views 4x64 MiB stored (CRC checked)"),
    ("npz.read.stored.view_nocrc", "npz open + zero-copy views 4x64 MiB stored (CRC skipped)"),
    ("npz.write.deflate.fsync", "npz write 4x8 MiB deflate, with fsync"),
    ("npz.write.deflate.nofsync", "npz write 4x8 MiB deflate, no fsync"),
    ("npz.read.deflate.owned", "npz read 4x8 MiB deflate into memory"),
]


def fmt_time(s):
    if s is None:
        return "n/a"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def fmt_ratio(other, tf):
    if other is None or tf is None or tf == 0:
        return "n/a"
    return f"{other / tf:.2f}"


def table(results):
    by = {(r["op"], r["lib"]): r for r in results}
    ops = [op for op, _ in ROWS if any(k[0] == op for k in by)]
    desc = dict(ROWS)
    lines = [
        "| workload | NumPy | tensorfmt | ndarray-npy | NumPy / tensorfmt | ndarray-npy / tensorfmt |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for op in ops:
        t = {lib: (by[(op, lib)]["median_s"] if (op, lib) in by else None)
             for lib in ("numpy", "tensorfmt", "ndarray-npy")}
        lines.append(
            f"| {desc[op]} | {fmt_time(t['numpy'])} | {fmt_time(t['tensorfmt'])} | "
            f"{fmt_time(t['ndarray-npy'])} | {fmt_ratio(t['numpy'], t['tensorfmt'])} | "
            f"{fmt_ratio(t['ndarray-npy'], t['tensorfmt'])} |"
        )
    lines.append("")
    lines.append("What each cell times (median wall clock):")
    lines.append("")
    seen = []
    for op in ops:
        for lib in ("numpy", "tensorfmt", "ndarray-npy"):
            r = by.get((op, lib))
            if r and (lib, r["how"]) not in seen:
                seen.append((lib, r["how"]))
    for lib, how in seen:
        lines.append(f"- {lib}: {how}")
    return "\n".join(lines)


def median(by, op, lib):
    """The median time of `op` by `lib` in `by` ((op, lib) -> result), or None."""
    r = by.get((op, lib))
    return r["median_s"] if r else None


def bandwidth(by, prefix, loads, nbytes, payload):
    """The full-load bandwidth table: each of `loads` ((label, op, lib)) timed in `by`, in
    GiB/s of its `nbytes` of payload (`payload` says how many, in words) and as a fraction
    of the memcpy references `{prefix}.memcpy.fresh` and `{prefix}.memcpy.hot`. Returns
    the lines and the median time of the fresh-buffer reference (None when not timed)."""
    fresh_s = median(by, f"{prefix}.memcpy.fresh", "memcpy")
    hot_s = median(by, f"{prefix}.memcpy.hot", "memcpy")
    lines = [
        "",
        f"Full load bandwidth ({payload} of payload; fraction = memcpy time / load time):",
        "",
        "| copy or load | time | GiB/s | fraction of memcpy, fresh buffers | fraction of memcpy, hot |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, op, lib in loads:
        s = median(by, op, lib)
        if s is None:
            continue
        frac = lambda ref: f"{ref / s:.2f}" if ref else "n/a"  # noqa: E731
        lines.append(f"| {label} | {fmt_time(s)} | {nbytes / GIB / s:.2f} | {frac(fresh_s)} | {frac(hot_s)} |")
    return lines, fresh_s


def verdict(ok):
    """A target's status: met, not met, or n/a when it was not measured (None)."""
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def cell_notes(results, order):
    """The lines saying what each cell times: each library's (`order`) descriptions."""
    seen = []
    for r in results:
        if (r["lib"], r["how"]) not in seen:
            seen.append((r["lib"], r["how"]))
    lines = ["", "What each cell times (median wall clock):", ""]
    for lib, how in sorted(seen, key=lambda x: order.index(x[0])):
        lines.append(f"- {lib}: {how}")
    return lines


def locked_version(crate):
    """The version of `crate` Cargo.lock pins (what tfbench was built with)."""
    lock = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Cargo.lock")
    try:
        with open(lock) as f:
            m = re.search(rf'name = "{re.escape(crate)}"\nversion = "([^"]+)"', f.read())
    except OSError:
        return "?"
    return m.group(1) if m else "?"


def run_tfbench(args, d, only):
    """tfbench's JSON on the inputs in `d`: `args.tfbench` run with `args.runs` and
    `args.open_runs`, on the ops whose names start with a prefix of `only` (all without)."""
    cmd = [args.tfbench, "--dir", d, "--runs", str(args.runs), "--open-runs", str(args.open_runs)]
    for p in only:
        cmd += ["--only", p]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, check=True)
    return json.loads(proc.stdout)


def same_payload(results, nbytes, script, side):
    """Exits, naming `script`, when one of tfbench's `results` timed another payload than
    the `nbytes` the Python `side` timed."""
    for r in results:
        if r["bytes"] != nbytes:
            sys.exit(f"{script}: tfbench saw {r['bytes']} payload bytes, {side} {nbytes}")


def report(md, env, results, args):
    """Prints the Markdown `md`, and writes it to `--markdown` and the timings with the
    environment to `--json` where given."""
    print(md)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "results": results}, f, indent=1)


def environment():
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    except OSError:
        cpu = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) // (1024 * 1024)
    except (OSError, ValueError, IndexError):
        mem = "?"
    try:
        rev = subprocess.run(
            ["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
            cwd=os.path.dirname(os.path.abspath(__file__)), check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        rev = "?"
    return {
        "revision": rev,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": mem,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tfbench", default="target/release/tfbench",
                    help="the tfbench binary (cargo build --release -p tensorfmt-benches)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per read/write op")
    ap.add_argument("--open-runs", type=int, default=50, help="timed runs per open/view op")
    ap.add_argument("--dir", default=os.environ.get("TFBENCH_DIR"),
                    help="parent of the temporary directory (default: system temp dir)")
    ap.add_argument("--no-1g", action="store_true", help="skip the 1 GiB open-only file")
    ap.add_argument("--only", action="append", default=[], help="op prefix to run (repeatable)")
    ap.add_argument("--json", help="also write all timings as JSON here")
    ap.add_argument("--markdown", help="also write the table as Markdown here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()

    env = environment()
    load_before = os.getloadavg()[0]
    d = tempfile.mkdtemp(prefix="tfcompare-", dir=args.dir)
    try:
        free = shutil.disk_usage(d).free
        with_1g = not args.no_1g and free > 6 * (1 << 30)
        print(f"compare.py: preparing inputs in {d} (1 GiB file: {with_1g})", file=sys.stderr)
        a, stored, deflate = prepare(d, with_1g)
        b = Bench(args.runs, args.open_runs, args.only)
        numpy_side(b, d, a, stored, deflate)
        del a, stored, deflate
        results = b.results + run_tfbench(args, d, args.only)["results"]
    finally:
        if args.keep:
            print(f"compare.py: kept {d}", file=sys.stderr)
        else:
            shutil.rmtree(d, ignore_errors=True)

    env["dir"] = args.dir or tempfile.gettempdir()
    env["loadavg_1min"] = [load_before, os.getloadavg()[0]]
    header = (
        f"{env['date']}, tree {env['revision']} — {env['cpus']} CPUs ({env['cpu']}), {env['memory_gib']} GiB RAM, "
        f"{env['platform']}, Python {env['python']}, NumPy {env['numpy']}; "
        f"median of {args.runs} runs ({args.open_runs} for open/view), page cache warm, "
        f"files in {env['dir']}; 1-min load average {load_before:.2f} before, "
        f"{env['loadavg_1min'][1]:.2f} after"
    )
    report(header + "\n\n" + table(results) + "\n", env, results, args)


if __name__ == "__main__":
    main()
