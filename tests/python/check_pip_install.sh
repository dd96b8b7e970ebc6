#!/usr/bin/env bash
# `pip install .` works from a clean copy of the source tree: builds the wheel with the build
# tools already installed (--no-build-isolation), installs it into a fresh venv that sees the
# system's packages (Debian's Python is PEP 668 "externally managed"; falls back to
# `pip install --target` where venv is unavailable), then imports fabric_lib from outside the
# tree and moves bytes with it.
# Usage: check_pip_install.sh SOURCE_DIR [PYTHON]
# FABRIC_LIB_PIP_MODE=target skips the venv (e.g. for a python that is itself a venv, whose
# packages a venv made from it would not see); FABRIC_LIB_CMAKE_ARGS reaches setup.py's CMake.
set -euo pipefail
src=$(cd "$1" && pwd)
python=${2:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir "$work/src"
tar -C "$src" --exclude='./build*' --exclude=./.git --exclude=./.deb --exclude=./.whl \
    --exclude='__pycache__' -cf - . | tar -C "$work/src" -xf -

export FABRIC_LIB_BUILD_JOBS=${FABRIC_LIB_BUILD_JOBS:-$(nproc)}
if [ "${FABRIC_LIB_PIP_MODE:-venv}" = venv ] && "$python" -m venv --system-site-packages "$work/venv" >/dev/null 2>&1; then
  py="$work/venv/bin/python"
  "$py" -m pip install --no-build-isolation --no-deps --disable-pip-version-check -q "$work/src"
  where="venv"
else
  py="$python"
  "$py" -m pip install --no-build-isolation --no-deps --disable-pip-version-check -q --target "$work/site" "$work/src"
  export PYTHONPATH="$work/site"
  where="--target"
fi

cd "$work"
"$py" - <<'PY'
import os, sys, threading
import fabric_lib as fl
pkg = os.path.dirname(fl.__file__)
assert "/src/" not in pkg, f"imported from the source tree: {pkg}"
assert os.path.exists(os.path.join(pkg, "_fabric_lib.pyi")) and os.path.exists(os.path.join(pkg, "py.typed"))
with fl.TransferEngine(provider="tcp", interfaces=["lo"]) as e:
    src, dst = bytearray(b"fabric-lib via pip" * 100), bytearray(1800)
    h, _ = e.register_tensor(src)
    _, d = e.register_tensor(dst)
    arrived = threading.Event()
    e.set_imm_count_expected(3, fl.imm_count_of_write(len(src), e.nets_per_gpu), arrived.set)
    e.submit_write(h, 0, len(src), 3, d, 0)
    assert arrived.wait(10) and dst == src
# The apps' packages come with the wheel, their native modules from inside it.
import fabric_lib.kv, fabric_lib.weights, fabric_lib.moe
from fabric_lib.kv import _kv
from fabric_lib.weights import _fabric_lib_weights
from fabric_lib.moe import _moe
for m in (_kv, _fabric_lib_weights, _moe):
    assert os.path.dirname(os.path.dirname(m.__file__)) == pkg, f"{m.__name__} from {m.__file__}"
print(f"pip install ok: fabric_lib {fl.__version__} (with kv, weights, moe) from {pkg}")
PY
echo "(installed with $where)"
