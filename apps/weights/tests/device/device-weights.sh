#!/usr/bin/env bash
# The weights app's GPU step (nvidia-h200): builds fabric_lib_weights with CUDA, then
#   1. weights_fp8_device_check: the fp8 128x128 block kernel against the CPU reference, bit for
#      bit, on 8 cases (edges, pitches, zero/NaN/inf blocks, ties, subnormals, real layer shapes);
#   2. check_fp8_torch.py: the kernel's bytes and scales against torch.float8_e4m3fn on the GPU;
#   3. weights_integration_tests --gtest_filter='Gpu*': 4 trainer processes with FSDP shards in GPU
#      memory -> 2 inference processes with destinations in GPU memory, over the ipc (same-host
#      IPC) backend, prepare on the GPU (cast and fp8 kernels), ten steps, every byte and scale
#      equal to the reference load (fp8 on 1 domain, bf16 on 2), then the CPU weights tests of
#      this build (-L weights minus fuzz and python).
# Run from the repository root with carry [".deb"] (scripts/device-common.sh fills .deb/):
#   bash apps/weights/tests/device/device-weights.sh
# Writes $OUT/weights-device.txt (both programs' output, each ending "N passed, M failed") and
# $OUT/weights-build.log.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../../.." && pwd)
out=${OUT:-$root/device-out}
prefix=${FABRIC_LIB_DEPS_PREFIX:-/tmp/fabric-lib-deps}
build=${FABRIC_LIB_BUILD_DIR:-/tmp/fabric-lib-weights-gpu-build}
py=${PYTHON:-$(command -v python3)}
mkdir -p "$out" "$build/fp8-cases"
source "$root/scripts/device-common.sh"
fabric_lib_unpack_debs "$root" "$prefix" >"$out/weights-build.log" 2>&1 || { tail -n 5 "$out/weights-build.log"; exit 2; }
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=$PATH:/usr/local/cuda/bin
mapfile -t dep_args < <(fabric_lib_cmake_dep_args)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
{
  cmake "${generator[@]}" -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFABRIC_LIB_CUDA=ON \
    -DFABRIC_LIB_PYTHON=OFF -DFABRIC_LIB_BUILD_TOOLS=ON -DFABRIC_LIB_BUILD_TESTS=ON "${dep_args[@]}" &&
    cmake --build "$build" --target weights_fp8_device_check weights_integration_tests weights_unit_tests -j "$(nproc)"
} >>"$out/weights-build.log" 2>&1 || { tail -n 30 "$out/weights-build.log"; exit 2; }
rc=0
{
  echo "== weights_fp8_device_check (CUDA kernel vs CPU reference)"
  "$build/apps/weights/tests/device/weights_fp8_device_check" "$build/fp8-cases" || rc=1
  echo "== check_fp8_torch.py (kernel vs torch float8_e4m3fn on the GPU)"
  "$py" "$root/apps/weights/tests/device/check_fp8_torch.py" "$build/fp8-cases" || rc=1
  echo "== weights_integration_tests --gtest_filter='Gpu*' (GPU memory over ipc, $(nvidia-smi -L 2>/dev/null | wc -l) GPU(s))"
  timeout 300 "$build/apps/weights/tests/weights_integration_tests" --gtest_color=no --gtest_filter='Gpu*' || rc=1
  echo "== CPU weights tests in this build"
  (cd "$build" && timeout 400 ctest -L weights -LE 'fuzz|python' --output-on-failure | tail -n 5) || rc=1
} >"$out/weights-device.txt" 2>&1  # not piped: rc must survive the group
cat "$out/weights-device.txt"
exit $rc
