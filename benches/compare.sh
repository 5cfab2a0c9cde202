#!/usr/bin/env bash
# Builds tfbench (release) and runs benches/compare.py: NumPy vs tensorfmt vs ndarray-npy
# on the same files, in one run. Arguments are passed to compare.py (--runs, --no-1g,
# --only, --json, --markdown, --dir ...).
#
#   bash benches/compare.sh
#   PYTHON=/path/to/python bash benches/compare.sh --runs 7 --markdown /tmp/table.md
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

cargo build --release -p tensorfmt-benches --bin tfbench
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
tfbench="$target_dir/release/tfbench"

# The project's Python environment (scripts/pyenv.sh, which pins NumPy, prints its
# python as its last line), else a venv with NumPy made on the spot ($TFBENCH_VENV).
py="${PYTHON:-}"
if [ -z "$py" ] && [ -f scripts/pyenv.sh ]; then
  py="$(bash scripts/pyenv.sh | tail -n 1 || true)"
fi
if [ -z "$py" ] || ! "$py" -c 'import numpy' 2>/dev/null; then
  venv="${TFBENCH_VENV:-/tmp/benchenv}"
  if ! "$venv/bin/python" -c 'import numpy' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q numpy
  fi
  py="$venv/bin/python"
fi

exec "$py" benches/compare.py --tfbench "$tfbench" "$@"
