#!/usr/bin/env bash
# Builds tfbench (release) and runs one comparison suite in one run on the same files:
#   --suite npy (default): benches/compare.py, NumPy vs tensorfmt vs ndarray-npy;
#   --suite pytorch: benches/compare_torch.py, torch vs tensorfmt vs candle (tfbench built
#     with --features candle) on a state dict written by torch.save, with the memcpy limit;
#   --suite onnx: benches/compare_onnx.py, onnx.load + numpy_helper vs tensorfmt on a model
#     written by onnx, inline and with external data, with the memcpy limit;
#   --suite caffe2: benches/compare_caffe2.py, the Caffe2 input pipeline vs LMDB's cursor
#     (the limit) vs a Python lmdb + protobuf + NumPy loop on a 1 GB LMDB dataset;
#   --suite pickle: benches/compare_pickle.py, pickle.load and np.load(allow_pickle=True) vs
#     tensorfmt's index and full load of a .pkl of NumPy arrays, with the memcpy limit;
#   --suite safetensors: benches/compare_safetensors.py, Python safetensors vs tensorfmt vs
#     the safetensors crate vs candle (tfbench built with --features candle) on a file
#     written by safetensors.torch.save_file, with the memcpy limit;
#   --suite distributed: benches/compare_distributed.py, a >= 1 GiB checkpoint read from a
#     local S3-protocol server vs from the file, one rank's shard of a torch.distributed
#     checkpoint vs torch's dcp.load, and the peak anonymous memory of converting a sharded
#     checkpoint (the tensorfmt CLI built too).
# Other arguments are passed to the suite's script (--runs, --only, --json, --markdown,
# --dir ...; npy: --no-1g; pytorch, safetensors: --layers, --small).
#
#   bash benches/compare.sh
#   PYTHON=/path/to/python bash benches/compare.sh --runs 7 --markdown /tmp/table.md
#   bash benches/compare.sh --suite pytorch --runs 7
#   bash benches/compare.sh --suite safetensors --runs 5
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

suite=npy
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --suite) [ $# -ge 2 ] || { echo "compare.sh: --suite needs a value" >&2; exit 2; }
             suite="$2"; shift 2 ;;
    --suite=*) suite="${1#--suite=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
case "$suite" in
  npy) script=benches/compare.py; features=(); module=numpy ;;
  pytorch) script=benches/compare_torch.py; features=(--features candle); module=torch ;;
  onnx) script=benches/compare_onnx.py; features=(); module=onnx ;;
  caffe2) script=benches/compare_caffe2.py; features=(); module=lmdb ;;
  safetensors) script=benches/compare_safetensors.py; features=(--features candle); module=safetensors ;;
  pickle) script=benches/compare_pickle.py; features=(); module=torch ;;
  distributed) script=benches/compare_distributed.py; features=(); module=huggingface_hub ;;
  *) echo "compare.sh: unknown suite '$suite' (npy, pytorch, onnx, caffe2, safetensors, pickle, distributed)" >&2; exit 2 ;;
esac

cargo build --release -p tensorfmt-benches --bin tfbench ${features[@]+"${features[@]}"}
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
tfbench="$target_dir/release/tfbench"
if [ "$suite" = distributed ]; then
  cargo build --release -p tensorfmt --bin tensorfmt
  args+=(--cli "$target_dir/release/tensorfmt")
fi

# The project's Python environment (scripts/pyenv.sh, which pins NumPy and torch, prints
# its python as its last line). For the npy suite only, a venv with NumPy made on the
# spot ($TFBENCH_VENV) stands in when that environment cannot be had.
py="${PYTHON:-}"
if [ -z "$py" ] && [ -f scripts/pyenv.sh ]; then
  py="$(bash scripts/pyenv.sh | tail -n 1 || true)"
fi
if [ -z "$py" ] || ! "$py" -c "import $module" 2>/dev/null; then
  if [ "$suite" != npy ]; then
    echo "compare.sh: no Python with $module (set PYTHON, or run scripts/pyenv.sh)" >&2
    exit 1
  fi
  venv="${TFBENCH_VENV:-/tmp/benchenv}"
  if ! "$venv/bin/python" -c 'import numpy' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q numpy
  fi
  py="$venv/bin/python"
fi

exec "$py" "$script" --tfbench "$tfbench" ${args[@]+"${args[@]}"}
