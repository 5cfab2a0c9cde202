#!/usr/bin/env python3
"""Times reading a Caffe2 dataset (an LMDB of TensorProtos records) in batches.

One run, side by side, on one LMDB environment written by the real `lmdb` package: image-
like records (a uint8 [3, 224, 224] image in `byte_data` and an int32 label), about 1.08
GB of values. Timed: tensorfmt's input pipeline (`caffe2::DbInput`: TensorProtosDBInput,
batches of 64 stacked records, one epoch, with a prefetch thread and without); the
limit, LMDB's own cursor over every record with each value copied into a reused buffer
(by `tfbench`, through heed); and the Python loop a Caffe2 user would write without
Caffe2: an `lmdb` cursor, `TensorProtos` decoded by protobuf, NumPy arrays from the
bytes, `np.stack` per batch. Wall clock, one untimed warm-up, the median of N runs, the
page cache warm.

Usage (see benches/compare.sh --suite caffe2, which builds tfbench first):

    python benches/compare_caffe2.py --tfbench target/release/tfbench [--runs 5]
        [--small] [--dir PARENT] [--json results.json] [--markdown table.md] [--keep]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "py"))
from compare import Bench, environment, fmt_time  # noqa: E402

import lmdb  # noqa: E402
import numpy as np  # noqa: E402

import caffe2_pb as pb  # noqa: E402
import tfcheck_caffe2 as tc  # noqa: E402

BATCH = 64
FULL = dict(records=7168, shape=(3, 224, 224))
SMALL = dict(records=200, shape=(3, 16, 16))


def write_dataset(path, records, shape):
    if os.path.exists(os.path.join(path, "data.mdb")):
        return
    rng = np.random.default_rng(0)
    env = lmdb.open(path, map_size=1 << 36, subdir=True)
    txn = env.begin(write=True)
    for i in range(records):
        image = rng.integers(0, 256, shape, dtype=np.uint8)
        label = np.array(i % 1000, np.int32)
        txn.put(f"{i:08d}".encode(), tc.dataset_record([image, label], variant="bytes"))
        if i % 256 == 255:
            txn.commit()
            txn = env.begin(write=True)
    txn.commit()
    env.close()


def python_loop(path):
    """Every record, decoded and stacked into batches of BATCH (the last partial one
    dropped, as the pipeline does)."""
    env = lmdb.open(path, readonly=True, lock=False, subdir=True)
    n = 0
    images, labels = [], []
    with env.begin() as txn:
        for _, value in txn.cursor():
            tp = pb.TensorProtos.FromString(value)
            img, lab = tp.protos[0], tp.protos[1]
            images.append(np.frombuffer(img.byte_data, np.uint8).reshape(tuple(img.dims)))
            labels.append(np.array(lab.int32_data, np.int32).reshape(tuple(lab.dims)))
            if len(images) == BATCH:
                batch = (np.stack(images), np.stack(labels))
                n += batch[0].shape[0]
                images, labels = [], []
    env.close()
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tfbench", default="target/release/tfbench")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    spec = SMALL if args.small else FULL
    parent = args.dir or tempfile.gettempdir()
    d = os.path.join(parent, "tfbench_caffe2_small" if args.small else "tfbench_caffe2")
    os.makedirs(d, exist_ok=True)
    try:
        path = os.path.join(d, "caffe2_data.lmdb")
        write_dataset(path, spec["records"], spec["shape"])
        env = lmdb.open(path, readonly=True, lock=False, subdir=True)
        with env.begin() as txn:
            nbytes = sum(len(v) for _, v in txn.cursor())
            records = txn.stat()["entries"]
        env.close()
        what = (f"{records} records of a uint8 {list(spec['shape'])} image and an int32 label, "
                f"{nbytes / 1e9:.2f} GB of values; batches of {BATCH}")
        print(f"compare_caffe2: {what}", file=sys.stderr)
        b = Bench(args.runs, args.runs, ["caffe2."], lib="python")
        b.time("caffe2.pipeline", "lmdb cursor + TensorProtos.FromString + np.frombuffer + np.stack",
               nbytes, lambda: python_loop(path))
        cmd = [args.tfbench, "--dir", d, "--runs", str(args.runs), "--only", "caffe2."]
        rust = json.loads(subprocess.run(cmd, stdout=subprocess.PIPE, check=True,
                                         env=dict(os.environ, CAFFE2_BATCH=str(BATCH))).stdout)
        results = b.results + rust["results"]
        by = {(r["op"], r["lib"]): r["median_s"] for r in results}
        raw = by.get(("caffe2.scan.raw", "lmdb"))
        py = by.get(("caffe2.pipeline", "python"))
        lines = ["| reader | time | records/s | GB/s | of the raw scan | × the Python loop |",
                 "|---|---:|---:|---:|---:|---:|"]
        for label, key in (("LMDB cursor, values copied (the limit)", ("caffe2.scan.raw", "lmdb")),
                           ("tensorfmt DbInput, prefetch 2, buffers recycled", ("caffe2.pipeline", "tensorfmt")),
                           ("tensorfmt DbInput, prefetch 2, plain for loop", ("caffe2.pipeline.loop", "tensorfmt")),
                           ("tensorfmt DbInput, no prefetch, buffers recycled",
                            ("caffe2.pipeline.noprefetch", "tensorfmt")),
                           ("Python: lmdb + protobuf + NumPy", ("caffe2.pipeline", "python"))):
            s = by.get(key)
            if s is None:
                continue
            lines.append(f"| {label} | {fmt_time(s)} | {records / s:,.0f} | {nbytes / s / 1e9:.2f} | "
                         f"{raw / s:.2f} | {py / s:.2f} |")
        text = what + "\n\n" + "\n".join(lines)
        print(text)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(text + "\n")
        if args.json:
            env = environment()
            env["numpy"] = np.__version__
            env["lmdb"] = lmdb.__version__
            with open(args.json, "w") as f:
                json.dump({"environment": env, "dataset": what, "results": results}, f, indent=1)
    finally:
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
