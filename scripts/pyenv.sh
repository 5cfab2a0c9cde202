#!/usr/bin/env bash
# Ensures the Python environment of tensorfmt's tests (the real tools at the versions
# pinned in tests/py/requirements.txt) and prints its python's path as the LAST line of
# stdout; everything else goes to stderr. Idempotent: a complete environment is reused
# (a marker file, written only after a successful install, holds a copy of the
# requirements it was made from); a missing or partial one is made anew.
#
#   py="$(scripts/pyenv.sh | tail -n 1)"
#
# $TENSORFMT_REQUIREMENTS (a path from the repository root) names another requirements
# file, for an environment of its own (examples/gguf/requirements.txt): then
# $TENSORFMT_PYENV is not used, and the check after the install is that file's imports.
#
# Where: $TENSORFMT_PYENV, else ${XDG_CACHE_HOME:-$HOME/.cache}/tensorfmt/pyenv-<first 12
# hex of sha256 of tests/py/requirements.txt>, outside the clone. The base interpreter is
# $TENSORFMT_BASE_PYTHON, else python3. When its venv module cannot make an environment
# (Debian without python3-venv), the package is installed with apt-get when running as
# root, else `virtualenv` is used when present. Works with no standard input.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
req="$root/${TENSORFMT_REQUIREMENTS:-tests/py/requirements.txt}"
base="${TENSORFMT_BASE_PYTHON:-python3}"

log() { printf 'pyenv: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ -f "$req" ] || die "missing $req"
command -v "$base" >/dev/null 2>&1 || die "no '$base' on PATH (need CPython 3.11 or later with pip)"

hash="$(sha256sum "$req" | cut -c1-12)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tensorfmt/pyenv-$hash"
if [ -n "${TENSORFMT_REQUIREMENTS:-}" ]; then
  venv="$cache"
else
  venv="${TENSORFMT_PYENV:-$cache}"
fi
py="$venv/bin/python"
marker="$venv/.tensorfmt-installed"

ready() {
  [ -f "$marker" ] && cmp -s "$marker" "$req" && "$py" -c '' >/dev/null 2>&1
}

if ready; then
  printf '%s\n' "$py"
  exit 0
fi

mkdir -p "$(dirname "$venv")"
# One maker at a time (parallel test binaries, two checkouts sharing the cache).
exec 9>"$venv.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi
if ready; then  # made by another process while we waited
  printf '%s\n' "$py"
  exit 0
fi

venv_works() {
  # The venv module needs ensurepip to seed pip; Debian ships it in python3-venv.
  "$base" -c 'import venv, ensurepip' >/dev/null 2>&1
}

if ! venv_works; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "'$base -m venv' cannot work here (no ensurepip); installing python3-venv with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q </dev/null >&2
    apt-get install -y -q python3-venv </dev/null >&2 || true
  fi
fi

log "making $venv ($("$base" --version 2>&1)) from ${req#"$root"/}"
rm -rf "$venv"
if venv_works; then
  "$base" -m venv "$venv" </dev/null >&2
elif "$base" -m virtualenv --version >/dev/null 2>&1; then
  "$base" -m virtualenv -q "$venv" </dev/null >&2
elif command -v virtualenv >/dev/null 2>&1; then
  virtualenv -q -p "$base" "$venv" </dev/null >&2
else
  die "'$base -m venv' does not work (install python3-venv) and no virtualenv was found"
fi

"$py" -m pip install --disable-pip-version-check --no-input -q -r "$req" </dev/null >&2 \
  || die "pip install -r $req failed"
cp "$req" "$marker"
if [ -n "${TENSORFMT_REQUIREMENTS:-}" ]; then
  # Each `name==version` line's module (dashes as underscores).
  mods="$(grep -E '^[A-Za-z0-9_.-]+==' "$req" | cut -d= -f1 | tr '-' '_' | paste -sd, -)"
  "$py" -c "import $mods" >&2 || die "one of $mods does not import"
else
  "$py" -c 'import numpy, torch, onnx, onnxruntime, lmdb, plyvel, safetensors, huggingface_hub; print("pyenv: numpy", numpy.__version__, "torch", torch.__version__, "onnx", onnx.__version__, "onnxruntime", onnxruntime.__version__, "lmdb", lmdb.__version__, "plyvel", plyvel.__version__, "safetensors", safetensors.__version__, "huggingface_hub", huggingface_hub.__version__)' >&2 || die "numpy, torch, onnx, onnxruntime, lmdb, plyvel, safetensors or huggingface_hub does not import"
fi
log "ready"
printf '%s\n' "$py"
