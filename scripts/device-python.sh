#!/usr/bin/env bash
# The Python package on the GPU machine (Ubuntu 24.04, its python3 = Python 3.12 with torch, numpy,
# pytest, pip-installed pybind11; no libfabric, no network): unpacks the Debian packages carried
# in .deb/ into a private prefix (scripts/device-common.sh), builds the library and the extension
# against that python3 (with the system g++ and the carried pybind11-dev: device-common.sh), runs
# the pytest suite once with numpy arrays and once with torch CPU tensors (FABRIC_LIB_TEST_ARRAYS),
# then checks `pip install .` into a --target directory.
#
# The lead runs it through the device tool with carry [".deb"]:   bash scripts/device-python.sh
# (.deb/ is filled here as scripts/device-common.sh's header says.) On nvidia-h200-x2 (32 cores,
# 2026-11-29): pytest 18 s with numpy, 45 s with torch, pip install check 37 s, plus the build.
# It writes 9 files, one more than the device tool brings back: point OUT at a scratch folder and
# tar it into the tool's $OUT (FABRIC_LIB_BUILD_DIR may reuse device-test.sh's build).
#
# Writes into $OUT: summary.txt (one line per step: ok/FAILED/skipped and seconds), env.txt (machine,
# python, package versions), build.log, pytest-numpy.log / pytest-numpy.xml, pytest-torch.log /
# pytest-torch.xml, pip-install.log, device-python.log (progress).
#
# Environment: OUT (default ./device-out), PYTHON (default: python3 on PATH),
# FABRIC_LIB_DEPS_PREFIX, FABRIC_LIB_BUILD_DIR (scratch paths under /tmp),
# FABRIC_LIB_DEVICE_STEPS (default "numpy torch pip"; any subset, in that order).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/device-out}
prefix=${FABRIC_LIB_DEPS_PREFIX:-/tmp/fabric-lib-deps}
build=${FABRIC_LIB_BUILD_DIR:-/tmp/fabric-lib-python-build}
py=${PYTHON:-$(command -v python3)}
steps=${FABRIC_LIB_DEVICE_STEPS:-numpy torch pip}
mkdir -p "$out"
: >"$out/summary.txt"
start=$(date +%s)
stamp() { echo "[device-python +$(($(date +%s) - start))s] $*" | tee -a "$out/device-python.log" >&2; }
result() {  # step, status, seconds
  printf '%-12s %-8s %4ss\n' "$1" "$2" "$3" | tee -a "$out/summary.txt" >&2
}
# NVLink multicast stays off on these machines (the workplace's rule), for anything started here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# --- 1. Dependencies ---------------------------------------------------------------------------
# shellcheck source=device-common.sh
source "$root/scripts/device-common.sh"
fabric_lib_unpack_debs "$root" "$prefix" >>"$out/device-python.log" 2>&1 || { result unpack FAILED 0; exit 2; }
stamp "dependencies unpacked into $prefix"

{
  echo "== machine"; uname -a; echo "cores: $(nproc)"
  nvidia-smi -L 2>/dev/null || echo "(no nvidia-smi)"
  echo "== python: $py"
  "$py" - <<'PY'
import importlib, os, sys, sysconfig
print(sys.version)
inc = sysconfig.get_paths()["include"]
print("Python.h:", os.path.join(inc, "Python.h"), os.path.exists(os.path.join(inc, "Python.h")))
for name in ("numpy", "torch", "pytest", "pybind11", "setuptools", "wheel", "pip"):
    try:
        m = importlib.import_module(name)
        print(f"{name} {getattr(m, '__version__', '?')}")
    except Exception as e:  # report, do not stop
        print(f"{name} MISSING ({e})")
PY
  echo "== cmake: $(cmake --version | head -n1); compiler: ${CXX:-c++}: $(${CXX:-c++} --version | head -n1) (the image's CXX: ${FABRIC_LIB_IMAGE_CXX:-unset})"
} >"$out/env.txt" 2>&1
have() { "$py" -c "import $1" >/dev/null 2>&1; }

# --- 2. Build the library and the extension ----------------------------------------------------
t0=$(date +%s)
mapfile -t dep_args < <(fabric_lib_cmake_dep_args)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
pybind11_dir=$(fabric_lib_pybind11_dir "$py")  # the carried pybind11-dev (device-common.sh)
{
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g \
    -DFABRIC_LIB_BUILD_TESTS=OFF -DFABRIC_LIB_BUILD_TOOLS=OFF -DFABRIC_LIB_PYTHON=ON \
    -DPython3_EXECUTABLE="$py" ${pybind11_dir:+-Dpybind11_DIR="$pybind11_dir"} "${dep_args[@]}" &&
    cmake --build "$build" -j"$(nproc)" --target _fabric_lib
} >"$out/build.log" 2>&1
if [ $? -ne 0 ]; then
  tail -n 40 "$out/build.log" >&2
  result build FAILED $(($(date +%s) - t0))
  exit 1
fi
result build ok $(($(date +%s) - t0))
ldd "$build"/python/fabric_lib/_fabric_lib*.so "$build"/src/libfabric_lib.so.* 2>&1 | grep -E "fabric|not found" >>"$out/build.log"
stamp "built $(ls "$build"/python/fabric_lib/_fabric_lib*.so)"

# --- 3. pytest with numpy arrays, then torch CPU tensors ------------------------------------------
rc=0
run_pytest() {  # backend
  local arrays=$1 t0
  t0=$(date +%s)
  if [ "$arrays" = torch ] && ! have torch; then
    result "pytest-$arrays" skipped 0
    echo "torch is not importable by $py" >"$out/pytest-$arrays.log"
    return
  fi
  stamp "pytest with FABRIC_LIB_TEST_ARRAYS=$arrays"
  (cd "$out" && PYTHONPATH="$build/python" FABRIC_LIB_TEST_ARRAYS="$arrays" PYTHONDONTWRITEBYTECODE=1 \
    timeout 540 "$py" -m pytest -v -rA -p no:cacheprovider -o faulthandler_timeout=240 \
    --junitxml="$out/pytest-$arrays.xml" "$root/tests/python") >"$out/pytest-$arrays.log" 2>&1
  local status=$?
  if [ $status -eq 0 ]; then result "pytest-$arrays" ok $(($(date +%s) - t0)); else result "pytest-$arrays" FAILED $(($(date +%s) - t0)); rc=1; fi
  tail -n 1 "$out/pytest-$arrays.log" | tee -a "$out/summary.txt" >&2
}
for step in $steps; do
  case $step in
    numpy | torch) run_pytest "$step" ;;
  esac
done

# --- 4. pip install . (into --target: a venv made from this python would not see its packages) ----
if [[ " $steps " == *" pip "* ]]; then
  t0=$(date +%s)
  stamp "pip install check"
  cmake_args=$(printf '%q ' "${dep_args[@]}" ${pybind11_dir:+"-Dpybind11_DIR=$pybind11_dir"})
  if FABRIC_LIB_CMAKE_ARGS="$cmake_args" FABRIC_LIB_PIP_MODE=target \
      "$root/tests/python/check_pip_install.sh" "$root" "$py" >"$out/pip-install.log" 2>&1; then
    result pip-install ok $(($(date +%s) - t0))
  else
    result pip-install FAILED $(($(date +%s) - t0))
    rc=1
  fi
fi
stamp "done (exit $rc)"
exit "$rc"
