#!/usr/bin/env bash
# Builds the weights codec fuzzer with clang (libFuzzer, ASan + UBSan) against the built
# libfabric_lib.so and runs it for a fixed time with a fixed seed from the checked-in corpus
# (seed inputs are generated on the first run by the unit tests' encoder: see corpus/README).
# Usage: run_weights_fuzzer.sh BUILD_DIR [seconds] [work_dir]
set -euo pipefail
build=$1
seconds=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
work=${3:-$(mktemp -d)}
mkdir -p "$work/corpus"
src="$root/apps/weights/src"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/include" -I"$root/apps/weights/include" "$here/weights_codec_fuzz.cc" \
  "$src/codec.cc" "$src/framing.cc" "$src/types.cc" "$src/plan_index.cc" "$src/plan_schedule.cc" "$src/plan_stats.cc" \
  -L"$build/src" -lfabric_lib -Wl,-rpath,"$build/src" -o "$work/weights_codec_fuzz"
cp -n "$here/corpus/"* "$work/corpus/" 2>/dev/null || true
log="$work/weights_codec.log"
if ! "$work/weights_codec_fuzz" -seed=1 -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$work/crash-weights-" "$work/corpus" >"$log" 2>&1; then
  tail -n 40 "$log"
  echo "fuzz: weights_codec FAILED (crashing input kept under $work)"
  exit 1
fi
runs=$(grep -E "stat::number_of_executed_units" "$log" | awk '{print $2}')
echo "fuzz: weights_codec ok, $runs executions in ${seconds}s"
