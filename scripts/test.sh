#!/usr/bin/env bash
# The project's test command (README): ensures the Python environment with the pinned
# real tools (scripts/pyenv.sh, made once outside the clone), exports its interpreter as
# TENSORFMT_PYTHON for the interop tests, then runs the whole Rust suite. Needs no
# standard input (CI=true). Extra arguments go to `cargo test`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

echo "== python environment" >&2
py="$(bash scripts/pyenv.sh </dev/null | tail -n 1)"
[ -x "$py" ] || { echo "test.sh: scripts/pyenv.sh gave no python ('$py')" >&2; exit 1; }
export TENSORFMT_PYTHON="$py"
"$py" -c 'import sys, numpy, torch, onnx, onnxruntime, lmdb, plyvel; print(f"python {sys.version.split()[0]}, numpy {numpy.__version__}, torch {torch.__version__}, onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, lmdb {lmdb.__version__}, plyvel {plyvel.__version__}: {sys.executable}")' >&2

echo "== rust" >&2
if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi
cargo --version >&2 || { echo "test.sh: cargo is not usable" >&2; exit 1; }

# A whole-suite run gains nothing from incremental compilation's caches (gigabytes
# across the test binaries); a caller who wants them sets CARGO_INCREMENTAL=1.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
echo "== cargo test --workspace --no-fail-fast $*" >&2
exec cargo test --workspace --no-fail-fast "$@" </dev/null
