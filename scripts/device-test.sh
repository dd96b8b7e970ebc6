#!/usr/bin/env bash
# GPU tests and benchmarks on the GPU machine (one or two H200s, 16-32 cores, CUDA 13, Python 3.12
# with torch and pip's pybind11 3.1; no libfabric, no network). Unpacks the Debian packages carried
# in .deb/ into a private prefix (scripts/device-common.sh), builds with FABRIC_LIB_CUDA=ON (tests
# and the Python extension) using the system g++ and the carried pybind11-dev 2.10 (device-common.sh
# says why), then runs:
#   cpu     the unit tests and the 1-domain integration tests (a quick check of the CPU paths in a
#           CUDA build on this machine),
#   device  tests/device/device_tests: UVM watcher (direct and CUDA graph), GPU flags with a peer
#           process over tcp, GPU memory detection, staged writes over tcp and shm, refusals,
#   bench   the watcher round-trip latency (vs a raw CPU spinner, direct and graph) and staged
#           GPU-source write bandwidth vs host-source writes over tcp and shm,
#   python  tests/device/python (a torch kernel bumps alloc_scalar_watcher's word, in and out of a
#           CUDA graph; Python callback latency by the same GPU-timed round trip) and
#           tests/python/test_gpu_words.py,
#   ipc  (not by default) the ipc domain on GPU memory: its device tests, the torch test and
#           fabric-bench --provider ipc; scripts/device-ipc.sh says what and where. Run it
#           alone, FABRIC_LIB_DEVICE_STEPS=ipc (about 5 minutes; $OUT then holds 6 files).
#   ipctests (not by default; part of ipc) the ipc device tests and the torch test only
#           (scripts/device-ipc-tests.sh), alone.
#   ipcshape (not by default) the page-copy kernel's shape A/B: piece size x loads per lane
#           (scripts/device-ipc-shape.sh), with the copy engine's kernel tests.
#   ipcgather (not by default; part of ipc) paged writes over ipc against torch index_copy_ and a
#           contiguous copy_ of 4096 scattered pages (scripts/device-ipc-gather.sh), alone.
#   ipclauncher (not by default; part of ipc) the copy engine's launcher thread A/B
#           (scripts/device-ipc-launcher.sh), alone.
#   ipcplace (not by default) where a four-domain group's ipc writes go: x1, x4 (the default
#           route), x4 pinned to domain 0 and x4 rotating (FABRIC_LIB_ONE_MEDIUM_SPREAD=1), in
#           rounds whose order rotates (scripts/device-ipc-placement.sh; about 5 minutes), alone.
#   ipcprofile (not by default) where a paged write's time goes on this machine's CPU: the
#           engine's and the ipc domain's work per WR, the page-copy kernel alone against
#           contiguous copies (page-copy-kernel-bench), and a sampling profile of fabric-bench's
#           ipc paged writes when .deb/prof/ holds gperftools (scripts/device-ipc-profile.sh);
#           FABRIC_LIB_IPC_PROFILE="paged4k single64k" picks what it samples.
#   hostbench (not by default) fabric-bench on host memory (tcp, shm; 1 and 4 domains; every mode;
#           shm's latency modes again with --trust-provider-calls) with this machine's cores:
#           scripts/device-hostbench.sh.
#   kv      (not by default) the KV-transfer app: its tests, the GPU end-to-end test (CUDA graph,
#           UVM watcher, IPC backend) and its benchmarks; scripts/device-kv.sh says what. Run it
#           alone: FABRIC_LIB_DEVICE_STEPS=kv.
#   moe  (not by default) MoE dispatch/combine on the GPU(s): DeepSeek-V3 shapes, both paths,
#           CUDA graphs, determinism, compute-sanitizer, the benchmark and the Python API;
#           scripts/device-moe.sh says what. Alone: FABRIC_LIB_DEVICE_STEPS=moe (about 3 minutes).
#   weights (not by default) the weight-transfer app on the GPU: fp8 kernel vs the CPU reference
#           and torch, its GPU integration tests, identical logits over ipc, the pipeline
#           benchmark on one DeepSeek-V3 MoE layer; scripts/device-weights.sh says what. Run it
#           alone: FABRIC_LIB_DEVICE_STEPS=weights (about 2.5 minutes after the build).
#
# The lead runs it through the device tool with carry [".deb"]:   bash scripts/device-test.sh
# (.deb/ is filled as scripts/device-common.sh's header says.) On nvidia-h200-x2 (32 cores,
# 2026-11-29): build 34 s, then all default steps 52 s (86 s in all, plus the machine's start).
#
# Writes into $OUT (8 files): summary.txt (one line per step: ok/FAILED and seconds, then the
# benchmark tables), env.txt (machine, GPU, compilers, python packages), build.log, ctest-cpu.log,
# device-tests.log (gtest and pytest output), bench.txt (benchmark tables and progress),
# watcher_latency.csv (C++ and Python rows), staged_bandwidth.csv.
#
# Environment: OUT (default ./device-out), PYTHON (default python3), FABRIC_LIB_DEPS_PREFIX and
# FABRIC_LIB_BUILD_DIR (scratch under /tmp), FABRIC_LIB_DEVICE_STEPS (default "cpu device bench
# python"; any subset), FABRIC_LIB_BENCH_WATCHER_CPU (pin the watcher thread in the benchmark).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/device-out}
prefix=${FABRIC_LIB_DEPS_PREFIX:-/tmp/fabric-lib-deps}
build=${FABRIC_LIB_BUILD_DIR:-/tmp/fabric-lib-gpu-build}
py=${PYTHON:-$(command -v python3)}
steps=${FABRIC_LIB_DEVICE_STEPS:-cpu device bench python}
jobs=$(nproc)
mkdir -p "$out"
: >"$out/summary.txt"
: >"$out/bench.txt"
start=$(date +%s)
rc=0
stamp() { echo "[device-test +$(($(date +%s) - start))s] $*" | tee -a "$out/bench.txt" >&2; }
result() {  # step, status, seconds
  printf '%-14s %-8s %4ss\n' "$1" "$2" "$3" | tee -a "$out/summary.txt" >&2
  [ "$2" = ok ] || rc=1
}
want() { [[ " $steps " == *" $1 "* ]]; }
# A sub-step that runs tests/device's device_tests (set after the build) with a gtest filter:
# output into device-tests.log, its ok/FAILED line and the pass/fail lines into summary.txt.
gtest_step() {  # step name, gtest filter, time limit in seconds
  local t0 status
  t0=$(date +%s)
  stamp "$1: device_tests --gtest_filter='$2'"
  echo "== device_tests --gtest_filter='$2' ($(nvidia-smi -L 2>/dev/null | wc -l) GPU(s))" >>"$out/device-tests.log"
  timeout "$3" "$device_tests" --gtest_color=no --gtest_filter="$2" >>"$out/device-tests.log" 2>&1
  status=$?
  result "$1" "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\] .* ran" "$out/device-tests.log" | tail -n 30 | tee -a "$out/summary.txt" >&2
}
# NVLink multicast stays off on these machines (the workplace's rule), for anything started here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONDONTWRITEBYTECODE=1

# --- 1. Dependencies and machine ---------------------------------------------------------------
# shellcheck source=device-common.sh
source "$root/scripts/device-common.sh"
if ! fabric_lib_unpack_debs "$root" "$prefix" >>"$out/build.log" 2>&1; then
  tail -n 5 "$out/build.log" >&2
  result unpack FAILED 0
  exit 2
fi
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=$PATH:/usr/local/cuda/bin
{
  echo "== machine"; uname -a; echo "cores: $jobs"
  nvidia-smi 2>&1 | head -n 15 || echo "(no nvidia-smi)"
  echo "== nvcc: $(nvcc --version 2>&1 | tail -n 2 | tr '\n' ' ')"
  echo "== cmake: $(cmake --version | head -n1); compiler: ${CXX:-c++}: $(${CXX:-c++} --version | head -n1) (the image's CXX: ${FABRIC_LIB_IMAGE_CXX:-unset})"
  echo "== python: $py"
  "$py" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1
  "$py" -c 'import pybind11, pytest, numpy; print("pybind11", pybind11.__version__, "pytest", pytest.__version__, "numpy", numpy.__version__)' 2>&1
} >"$out/env.txt" 2>&1

# --- 2. Build (CUDA on, tests on, the Python extension for this python) -------------------------
t0=$(date +%s)
mapfile -t dep_args < <(fabric_lib_cmake_dep_args)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
pybind11_dir=$(fabric_lib_pybind11_dir "$py")  # the carried pybind11-dev (device-common.sh)
{
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g -DFABRIC_LIB_CUDA=ON \
    -DFABRIC_LIB_BUILD_TESTS=ON -DFABRIC_LIB_BUILD_TOOLS=ON -DFABRIC_LIB_PYTHON=ON -DPython3_EXECUTABLE="$py" \
    ${pybind11_dir:+-Dpybind11_DIR="$pybind11_dir"} "${dep_args[@]}" &&
    cmake --build "$build" -j"$jobs" --target $(want cpu && echo unit_tests integration_tests) \
      $(want device || want bench || want ipc || want ipctests || want ipcshape && echo device_tests) \
      $(want ipcprofile && echo engine-overhead-bench ipc-domain-bench page-copy-kernel-bench fabric-bench) \
      $(want python || want ipc || want ipctests || want ipcgather || want ipcprofile || want moe || want kv || want weights && echo fabric_device_kernels _fabric_lib) \
      $( (want ipc || want ipclauncher || want ipcshape || want ipcplace || want hostbench) && echo fabric-bench) \
      $(want kv && echo _kv fabric-kv-bench kv_unit_tests kv_integration_tests) \
      $(want moe && echo moe_device_tests moe_device_rank moe_memory _moe) \
      $(want weights && echo _fabric_lib_weights weights_fp8_device_check weights_integration_tests fabric-weights-bench)
} >>"$out/build.log" 2>&1
if [ $? -ne 0 ]; then
  tail -n 40 "$out/build.log" >&2
  result build FAILED $(($(date +%s) - t0))
  exit 1
fi
result build ok $(($(date +%s) - t0))
{ echo "== libstdc++ of the built library (one shared copy expected)"; ldd "$build"/src/libfabric_lib.so.0 | grep -E "stdc|not found"; } >>"$out/env.txt" 2>&1
device_tests=$build/tests/device/device_tests
kernels_lib=$build/tests/device/libfabric_device_kernels.so

# --- 3. CPU tests in this CUDA build --------------------------------------------------------------
if want cpu; then
  t0=$(date +%s)
  stamp "ctest: unit + 1-domain integration"
  # Every unit test; the integration matrix with 1 domain (the netns fault tests need privileges).
  (cd "$build" && timeout 120 ctest -j"$jobs" --timeout 60 --output-on-failure -L unit) >"$out/ctest-cpu.log" 2>&1
  status=$?
  (cd "$build" && timeout 240 ctest -j"$jobs" --timeout 120 --output-on-failure -L integration -R '_1dom' -E 'CutTest') \
    >>"$out/ctest-cpu.log" 2>&1
  status=$((status | $?))
  result ctest-cpu "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
  grep -E "tests passed|tests failed" "$out/ctest-cpu.log" | tee -a "$out/summary.txt" >&2
fi

# --- 4. GPU tests ---------------------------------------------------------------------------------
if want device; then
  t0=$(date +%s)
  stamp "device_tests"
  timeout 300 "$device_tests" --gtest_color=no --gtest_filter='-Ipc/*' >"$out/device-tests.log" 2>&1
  status=$?
  result device-tests "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
  awk '/^\[==========\] .* ran/ { p = 1 } p' "$out/device-tests.log" | head -n 40 | tee -a "$out/summary.txt" >&2
fi

# --- 5. Benchmarks --------------------------------------------------------------------------------
if want bench; then
  t0=$(date +%s)
  stamp "watcher latency"
  echo "== UVM watcher round trips (GPU-timed; ns)" >>"$out/bench.txt"
  timeout 120 "$device_tests" --bench-watcher "$out/watcher_latency.csv" >>"$out/bench.txt" 2>&1
  status=$?
  result bench-watcher "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
  t0=$(date +%s)
  stamp "staged write bandwidth"
  echo "== staged GPU-source writes vs host-source writes (GB/s)" >>"$out/bench.txt"
  timeout 180 "$device_tests" --bench-staging "$out/staged_bandwidth.csv" >>"$out/bench.txt" 2>&1
  status=$?
  result bench-staging "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
fi

# --- 6. Python on the GPU -------------------------------------------------------------------------
if want python; then
  t0=$(date +%s)
  stamp "python GPU tests"
  echo "== pytest tests/device/python tests/python/test_gpu_words.py" >>"$out/device-tests.log"
  (cd "$out" && PYTHONPATH="$build/python" FABRIC_LIB_DEVICE_KERNELS="$kernels_lib" \
    FABRIC_LIB_BENCH_CSV="$out/watcher_latency.csv" timeout 240 "$py" -m pytest -v -s -rA -p no:cacheprovider \
    -o faulthandler_timeout=200 "$root/tests/device/python" "$root/tests/python/test_gpu_words.py") \
    >>"$out/device-tests.log" 2>&1
  status=$?
  result python-gpu "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
  grep -E "\[info\] python watcher" "$out/device-tests.log" >>"$out/bench.txt"
fi

# --- 7. The ipc domain on GPU memory (scripts/device-ipc.sh) ---------------------------------
if want ipc; then
  # shellcheck source=device-ipc.sh
  source "$root/scripts/device-ipc.sh"
fi

if want ipctests && ! want ipc; then
  # shellcheck source=device-ipc-tests.sh
  source "$root/scripts/device-ipc-tests.sh"
fi

if want ipcshape; then
  # shellcheck source=device-ipc-shape.sh
  source "$root/scripts/device-ipc-shape.sh"
fi

if want ipcgather && ! want ipc; then
  # shellcheck source=device-ipc-gather.sh
  source "$root/scripts/device-ipc-gather.sh"
fi

if want ipclauncher && ! want ipc; then
  # shellcheck source=device-ipc-launcher.sh
  source "$root/scripts/device-ipc-launcher.sh"
fi

if want ipcplace; then
  # shellcheck source=device-ipc-placement.sh
  source "$root/scripts/device-ipc-placement.sh"
fi

if want ipcprofile; then
  # shellcheck source=device-ipc-profile.sh
  source "$root/scripts/device-ipc-profile.sh"
fi

# --- 8. fabric-bench on host memory with this machine's cores (scripts/device-hostbench.sh) -------
if want hostbench; then
  # shellcheck source=device-hostbench.sh
  source "$root/scripts/device-hostbench.sh"
fi

# --- 9. The KV-transfer app (scripts/device-kv.sh) ------------------------------------------------
if want kv; then
  # shellcheck source=device-kv.sh
  source "$root/scripts/device-kv.sh"
fi

# --- 10. MoE dispatch/combine (scripts/device-moe.sh) ------------------------------------------
if want moe; then
  # shellcheck source=device-moe.sh
  source "$root/scripts/device-moe.sh"
fi

# --- 11. The weight-transfer app (scripts/device-weights.sh) ---------------------------------------
if want weights; then
  # shellcheck source=device-weights.sh
  source "$root/scripts/device-weights.sh"
fi

{
  echo
  echo "== benchmark tables (bench.txt has the progress too)"
  grep -vE "^\[device-test" "$out/bench.txt"
} >>"$out/summary.txt"
stamp "done (exit $rc)"
exit "$rc"
