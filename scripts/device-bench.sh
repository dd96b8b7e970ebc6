#!/usr/bin/env bash
# fabric-bench on the GPU machine (Ubuntu 24.04, 16-32 cores, no libfabric, no network): unpacks
# the Debian packages carried in .deb/ into a private prefix, builds fabric-bench and fabric-info
# (tests off), then records fabric-info and the sweeps: tcp over loopback with 1, 2, 4 and 8
# domains (the domain-scaling table) and shm with 1 and 4 domains, every mode, engine vs raw
# libfabric in the same run.
#
# The lead runs it through the device tool with carry [".deb"]:   bash scripts/device-bench.sh
# Fill .deb/ here first (Debian 12 packages, which run on Ubuntu 24.04's newer glibc; the list is
# in scripts/device-common.sh, which unpacks them). libfabric.pc has no Requires.private, so the
# verbs/rdmacm/numa -dev packages are not needed.
#
# Writes into $OUT (8 files at most): device-info.txt (machine + fabric-info), build.log,
# tcp.txt / tcp.csv (tables and CSV, 1/2/4/8 domains), tcp.png (plot, when matplotlib is there),
# shm.txt / shm.csv, bench.log (progress of both sweeps). About 3-5 minutes in all (the build about
# one); each sweep has a time limit, so the command ends well inside 10 minutes.
#
# Environment: OUT (default ./device-out), FABRIC_BENCH_DURATION (seconds per timed run, 0.3),
# FABRIC_BENCH_EXTRA (more fabric-bench options, e.g. "--repeats 3").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/device-out}
prefix=${FABRIC_LIB_DEPS_PREFIX:-/tmp/fabric-lib-deps}
build=${FABRIC_LIB_BUILD_DIR:-/tmp/fabric-lib-device-build}
duration=${FABRIC_BENCH_DURATION:-0.3}
extra=${FABRIC_BENCH_EXTRA:-}
mkdir -p "$out"
start=$(date +%s)
stamp() { echo "[device-bench +$(($(date +%s) - start))s] $*" | tee -a "$out/bench.log" >&2; }

# --- 1. Unpack the carried packages into the prefix (scripts/device-common.sh) -----------------------
# shellcheck source=device-common.sh
. "$root/scripts/device-common.sh"
# (Not in a pipeline: the function exports the paths the build and the runs need.)
if ! fabric_lib_unpack_debs "$root" "$prefix" >>"$out/bench.log" 2>&1; then
  cat "$out/bench.log" >&2
  exit 2
fi
stamp "$(tail -n1 "$out/bench.log")"
mapfile -t dep_args < <(fabric_lib_cmake_dep_args)

# --- 2. Build the tools (host memory only: CUDA off keeps the build short) ---------------------------
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
{
  echo "cmake: $(cmake --version | head -n1); compiler: $(c++ --version | head -n1)"
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g \
    -DFABRIC_LIB_BUILD_TESTS=OFF -DFABRIC_LIB_PYTHON=OFF -DFABRIC_LIB_CUDA=OFF "${dep_args[@]}"
  cmake --build "$build" -j"$(nproc)" --target fabric-bench fabric-info
} >"$out/build.log" 2>&1 || {
  tail -n 40 "$out/build.log" >&2
  stamp "build FAILED (see build.log)"
  exit 1
}
bench=$build/tools/fabric-bench
stamp "built $bench"

# --- 3. Machine and fabric-info ----------------------------------------------------------------------
{
  echo "== machine"
  uname -a
  echo "cores: $(nproc)"
  lscpu 2>/dev/null | grep -E 'Model name|Socket|NUMA node|Thread' || true
  nvidia-smi -L 2>/dev/null || true
  echo
  echo "== fabric-info"
  "$build/tools/fabric-info" 2>&1 || echo "fabric-info failed: $?"
} >"$out/device-info.txt" 2>&1
stamp "fabric-info done"

# --- 4. Sweeps ---------------------------------------------------------------------------------------
# Engines busy-poll on both sides (--spin --target-spin), as in production and as the raw loop
# does: this machine has cores to spare, so idle spinning engines barely touch the raw runs.
rc=0
run_sweep() {  # name, time limit (s), then fabric-bench options
  local name=$1 limit=$2
  shift 2
  stamp "sweep $name: fabric-bench $*"
  if ! timeout "$limit" "$bench" --local --spin --target-spin --duration "$duration" --latency-iterations 300 "$@" $extra \
      --csv "$out/$name.csv" >"$out/$name.txt" 2>>"$out/bench.log"; then
    stamp "sweep $name FAILED (exit $?)"
    rc=1
  fi
}
# Limits keep the whole command inside the device tool's 10 minutes (expected: 2-4 minutes).
run_sweep tcp 330 --provider tcp --domains 1,2,4,8 --plot "$out/tcp.png"
run_sweep shm 180 --provider shm --domains 1,4
stamp "done (exit $rc)"
exit "$rc"
