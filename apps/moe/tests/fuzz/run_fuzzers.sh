#!/usr/bin/env bash
# Builds the MoE libFuzzer targets with clang (ASan + UBSan) and runs each for a fixed time from
# the checked-in corpus with a fixed seed, like tests/fuzz/run_fuzzers.sh.
# Usage: run_fuzzers.sh [seconds_per_target] [work_dir]
set -euo pipefail
seconds=${1:-20}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work"
# The app's codecs and planner, and the library's own decoders they call (MrDesc, DomainAddress).
sources=("$root/apps/moe/src/wire.cc" "$root/apps/moe/src/routing.cc" "$root/apps/moe/src/config.cc"
         "$root/src/base/mr_desc.cc" "$root/src/base/domain_address.cc" "$root/src/base/status.cc")
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$root/include" -I"$root/src" -I"$root/apps/moe/include")
total=0
for target in rank_info route_blocks; do
  clang++ "${flags[@]}" "$here/${target}_fuzz.cc" "${sources[@]}" -o "$work/${target}_fuzz"
  mkdir -p "$work/corpus_$target"
  cp -n "$here/corpus/$target/"* "$work/corpus_$target/" 2>/dev/null || true
  log="$work/$target.log"
  if ! "$work/${target}_fuzz" -seed=1 -max_total_time="$seconds" -print_final_stats=1 \
      -artifact_prefix="$work/crash-$target-" "$work/corpus_$target" >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "fuzz: $target FAILED (crashing input kept under $work)"
    exit 1
  fi
  runs=$(grep -E "stat::number_of_executed_units" "$log" | awk '{print $2}')
  echo "fuzz: $target ok, $runs executions in ${seconds}s"
  total=$((total + runs))
done
echo "fuzz: all targets ok, $total executions"
