#!/usr/bin/env python3
"""Times pickles of whole objects: tensorfmt's index and full load against the unsafe
loads that users run today (`torch.load(weights_only=False)`, `joblib.load`).

One run, side by side, on files the real tools write (the environment of
tests/fixtures/objects/requirements.txt: torch, ultralytics, joblib):

  yolo.pt         Ultralytics `YOLO("yolov8m.yaml").save(...)`: a DetectionModel in
                  float16, built from the yaml the package ships (offline)
  model.pt        `torch.save(model)` of a `torch.nn.TransformerEncoder` (float32)
  arrays.joblib   `joblib.dump` of a dict of float32 and int64 arrays, uncompressed
  arrays_z.joblib the same with `compress=3` (zlib)

Python has no index-only read of these files: `torch.load` and `joblib.load` rebuild every
object and read every tensor. tensorfmt's index (open + list the tensors, no payload byte
read), its full load (owned buffers, and views of the map where the bytes lie plain) and
the memcpy references over the same payload bytes are timed by the `tfbench` release binary
(benches/src/bin/tfbench.rs) the same way: wall clock around the operation alone, one
untimed warm-up run, the median of N runs, the page cache warm.

Usage:

    cargo build --release -p tensorfmt-benches --bin tfbench
    PY="$(TENSORFMT_REQUIREMENTS=tests/fixtures/objects/requirements.txt scripts/pyenv.sh | tail -n 1)"
    "$PY" benches/compare_objects.py --tfbench target/release/tfbench [--runs 5]
        [--open-runs 20] [--markdown table.md] [--keep]

Ratios are time(other) / time(tensorfmt): above 1 means tensorfmt is faster.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("YOLO_OFFLINE", "1")

import joblib  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

MIB = 1 << 20


def median_time(f, runs):
    """The median wall time of `runs` calls of `f`, after one untimed call."""
    f()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def make_files(d):
    """Writes the suite's inputs to `d` and returns their peers: name -> (the unsafe
    load, what it is)."""
    from ultralytics import YOLO

    torch.manual_seed(0)
    YOLO("yolov8m.yaml").save(os.path.join(d, "yolo.pt"))
    layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096)
    model = torch.nn.TransformerEncoder(layer, num_layers=8, enable_nested_tensor=False)
    torch.save(model, os.path.join(d, "model.pt"))
    rng = np.random.default_rng(0)
    arrays = {f"layer{i}.w": rng.standard_normal((1024, 1024), dtype=np.float32) for i in range(64)}
    arrays.update({f"layer{i}.idx": np.arange(1 << 17, dtype=np.int64) for i in range(16)})
    joblib.dump(arrays, os.path.join(d, "arrays.joblib"))
    small = {k: v for k, v in list(arrays.items())[:16]}
    joblib.dump(small, os.path.join(d, "arrays_z.joblib"), compress=3)

    def torch_load(p):
        return lambda: torch.load(p, weights_only=False, map_location="cpu")

    return {
        "yolo.pt": (torch_load(os.path.join(d, "yolo.pt")), "torch.load(weights_only=False)"),
        "model.pt": (torch_load(os.path.join(d, "model.pt")), "torch.load(weights_only=False)"),
        "arrays.joblib": (lambda: joblib.load(os.path.join(d, "arrays.joblib")), "joblib.load"),
        "arrays_z.joblib": (lambda: joblib.load(os.path.join(d, "arrays_z.joblib")), "joblib.load"),
    }


def fmt(t):
    return f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.2f} s"


def table(peers, peer_times, tf):
    """The Markdown table of the run."""
    rows = [
        "| file | tensors' bytes | peer | peer load | tensorfmt index | index ratio | tensorfmt full load (owned) | load ratio | views of the map | memcpy (fresh) | memcpy / full load |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (_, what) in peers.items():
        key = "obj." + name.replace(".", "_")
        r = {k[len(key) + 1:]: v for k, v in tf.items() if k.startswith(key + ".")}
        peer = peer_times[name]
        opened, owned, view = r["open"]["median_s"], r["read.owned"]["median_s"], r["read.view"]["median_s"]
        mem = r.get("memcpy.fresh", {}).get("median_s")
        rows.append(
            f"| `{name}` | {r['open']['bytes'] / MIB:.1f} MiB | `{what}` | {fmt(peer)} | {fmt(opened)} | "
            f"{peer / opened:.1f}x | {fmt(owned)} | {peer / owned:.2f}x | {fmt(view)} | "
            + (f"{fmt(mem)} | {mem / owned:.2f} |" if mem else "n/a (compressed) | n/a |")
        )
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tfbench", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--open-runs", type=int, default=20)
    ap.add_argument("--markdown")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="tfbench-objects-")
    d = os.path.join(root, "objects")
    os.makedirs(d)
    try:
        peers = make_files(d)
        peer_times = {name: median_time(f, args.runs) for name, (f, _) in peers.items()}
        cmd = [args.tfbench, "--dir", root, "--runs", str(args.runs),
               "--open-runs", str(args.open_runs), "--only", "obj."]
        out = json.loads(subprocess.run(cmd, stdout=subprocess.PIPE, check=True).stdout)
        tf = {r["op"]: r for r in out["results"]}
        md = table(peers, peer_times, tf)
        load = os.getloadavg()[0]
        md += (f"\n\nOne run: median of {args.runs} ({args.open_runs} for the index), "
               f"load average {load:.2f} at the end; torch {torch.__version__}, "
               f"joblib {joblib.__version__}, Python {sys.version.split()[0]}.\n")
        print(md)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(md)
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root)


if __name__ == "__main__":
    main()
