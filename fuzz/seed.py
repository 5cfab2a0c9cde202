#!/usr/bin/env python3
"""Makes the fuzzers' seed corpora under fuzz/corpus/ (Python stdlib only; not committed).

pickle_read      the valid and hostile pickles of tests/fixtures/pickle/, and every
                 pickle member (data.pkl, constants.pkl) of the torch-made fixtures
pickle_objects   byte 0 then the pickle members of tests/fixtures/objects/ (torch.save of a
                 model, YOLO checkpoints, Lightning) and what pickle_read gets; byte 1 then
                 its plain pickles (scikit-learn, users' classes, uncompressed joblib)
object_files     byte 0 then each joblib file of tests/fixtures/objects/ (plain and every
                 compressor), byte 1 then its pickle.dump's of torch tensors
pytorch_archive  the torch-made checkpoints of tests/fixtures/pytorch/ (zip, legacy,
                 TorchScript) and the hostile corpus of tests/fixtures/pytorch/hostile/
pytorch_pickle   the pickle members of the torch-made zip fixtures and the pickles of
                 legacy.pt, plus what pickle_read gets
onnx_model       the onnx-made models of tests/fixtures/onnx/ (inline ones: external
                 data files are not beside a fuzz input)
caffe2_minidb    the MiniDB fixtures of tests/fixtures/caffe2/
kv_folder        byte 0 then the data.mdb of each LMDB fixture of tests/fixtures/caffe2/,
                 byte 1 then the table of dataset.leveldb (whose MANIFEST the target uses),
                 and the same of the hostile corpus tests/fixtures/hostile/kv/
safetensors      the safetensors-made fixtures of tests/fixtures/safetensors/
numpy_pickle     the pickles of NumPy arrays of tests/fixtures/numpy_pickle/ (pickle.dump at
                 protocols 2, 4, 5, the Python 2 Detectron pickle) and its hostile corpus
dcp_metadata     the .metadata of each torch.distributed checkpoint of tests/fixtures/dcp/

Run from anywhere. The seeds are added to each target's corpus folder (files named by
their SHA-1, so running it again adds nothing twice); what earlier runs found stays.
`--fresh` empties the folders first (never while a fuzzer is using them). Naming targets
seeds those alone.

    python3 fuzz/seed.py [--fresh] [TARGET ...]
"""
import argparse
import hashlib
import os
import shutil
import zipfile

ALL = ["pickle_read", "pickle_objects", "object_files", "pytorch_archive", "pytorch_pickle", "onnx_model", "caffe2_minidb",
       "kv_folder", "safetensors", "numpy_pickle", "dcp_metadata"]
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--fresh", action="store_true",
                    help="empty each corpus folder before adding its seeds")
parser.add_argument("targets", nargs="*", metavar="TARGET",
                    help="the targets to seed (default: all): " + ", ".join(ALL))
ARGS = parser.parse_args()
for t in ARGS.targets:
    if t not in ALL:
        parser.error(f"unknown target {t!r}; the targets are {', '.join(ALL)}")

FUZZ = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(os.path.dirname(FUZZ), "tests", "fixtures")
TORCH = os.path.join(FIX, "pytorch")
HOSTILE = os.path.join(TORCH, "hostile")


def seeds(target, blobs):
    if ARGS.targets and target not in ARGS.targets:
        return
    d = os.path.join(FUZZ, "corpus", target)
    if ARGS.fresh:
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d, exist_ok=True)
    names = set()
    for blob in blobs:
        name = hashlib.sha1(blob).hexdigest()
        if name not in names:
            names.add(name)
            with open(os.path.join(d, name), "wb") as f:
                f.write(blob)
    print(f"{len(names):4d} seeds in {d}")


def files(folder, keep=lambda n: True):
    for n in sorted(os.listdir(folder)):
        p = os.path.join(folder, n)
        if os.path.isfile(p) and keep(n):
            with open(p, "rb") as f:
                yield f.read()


def legacy_pickles(path):
    """The five pickles of a legacy checkpoint (each ends at its top-level STOP)."""
    import pickletools
    import io
    data = open(path, "rb").read()
    f = io.BytesIO(data)
    out = []
    for _ in range(5):
        start = f.tell()
        for _ in pickletools.genops(f):
            pass
        out.append(data[start:f.tell()])
    return out


checkpoints = [n for n in sorted(os.listdir(TORCH)) if n.endswith((".pt", ".pth"))]
members = []
for n in checkpoints:
    p = os.path.join(TORCH, n)
    if zipfile.is_zipfile(p):
        with zipfile.ZipFile(p) as z:
            members += [z.read(i) for i in z.infolist() if i.filename.endswith(".pkl")]
legacy = legacy_pickles(os.path.join(TORCH, "legacy.pt"))

raw = list(files(os.path.join(FIX, "pickle", "valid")))
raw += list(files(os.path.join(FIX, "pickle", "hostile"), lambda n: n.endswith(".pkl")))
seeds("pickle_read", raw + members + legacy)
OBJ = os.path.join(FIX, "objects")
obj_members = []
for n in sorted(os.listdir(OBJ)):
    p = os.path.join(OBJ, n)
    if zipfile.is_zipfile(p):
        with zipfile.ZipFile(p) as z:
            obj_members += [z.read(i) for i in z.infolist() if i.filename.endswith(".pkl")]
obj_plain = list(files(OBJ, lambda n: n.endswith((".pkl", ".joblib")) and not n.startswith("joblib_")
                       or n in ("joblib_plain.joblib", "joblib_p2.pkl")))
seeds("pickle_objects", [b"\x00" + b for b in obj_members + members + raw]
      + [b"\x01" + b for b in obj_plain])
seeds("object_files",
      [b"\x00" + b for b in files(OBJ, lambda n: n.endswith(".joblib") or n.startswith("joblib_"))]
      + [b"\x01" + b for b in files(OBJ, lambda n: n.startswith("torch_pickle"))])
seeds("pytorch_archive",
      list(files(TORCH, lambda n: n in checkpoints))
      + list(files(HOSTILE, lambda n: n.endswith(".pt"))))
seeds("pytorch_pickle", members + legacy + raw)
ONNX = os.path.join(FIX, "onnx")
seeds("onnx_model", list(files(ONNX, lambda n: n.endswith(".onnx") and "external" not in n)))
seeds("caffe2_minidb", list(files(os.path.join(FIX, "caffe2"), lambda n: n.endswith(".minidb"))))
C2 = os.path.join(FIX, "caffe2")
KV = os.path.join(FIX, "hostile", "kv")
lmdbs = [os.path.join(C2, n) for n in sorted(os.listdir(C2)) if n.endswith(".lmdb")]
lmdbs += [os.path.join(KV, n) for n in sorted(os.listdir(KV)) if n.startswith("lmdb")]
tables = [os.path.join(C2, "dataset.leveldb")]
tables += [os.path.join(KV, n) for n in sorted(os.listdir(KV)) if n.startswith("leveldb")]
kv = [b"\x00" + blob for d in lmdbs for blob in files(d, lambda n: n == "data.mdb")]
kv += [b"\x01" + blob for d in tables for blob in files(d, lambda n: n.endswith(".ldb"))]
seeds("kv_folder", kv)
seeds("safetensors", list(files(os.path.join(FIX, "safetensors"), lambda n: n.endswith(".safetensors"))))
NP = os.path.join(FIX, "numpy_pickle")
seeds("numpy_pickle",
      list(files(NP, lambda n: n.endswith(".pkl")))
      + list(files(os.path.join(NP, "hostile"), lambda n: n.endswith(".pkl"))))
DCP = os.path.join(FIX, "dcp")
seeds("dcp_metadata",
      [blob for d in sorted(os.listdir(DCP)) if os.path.isdir(os.path.join(DCP, d))
       for blob in files(os.path.join(DCP, d), lambda n: n == ".metadata")])
