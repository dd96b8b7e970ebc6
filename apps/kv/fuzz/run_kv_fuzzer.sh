#!/usr/bin/env bash
# Builds the KV message fuzzer with clang (ASan + UBSan, libFuzzer) against the codec sources and
# the engine's MrDesc / DomainAddress codecs, then runs it for a fixed time from the checked-in
# corpus (make_corpus.cc) with a fixed seed. Usage: run_kv_fuzzer.sh [seconds] [work_dir]
set -euo pipefail
seconds=${1:-20}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work/corpus"
sources=("$here/kv_messages_fuzz.cc" "$root/apps/kv/src/messages.cc" "$root/apps/kv/src/layout.cc" "$root/apps/kv/src/plan.cc"
         "$root/src/base/mr_desc.cc" "$root/src/base/domain_address.cc" "$root/src/base/status.cc"
         "$root/src/core/shard_planner.cc")
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/include" -I"$root/src" -I"$root/apps/kv/include" "${sources[@]}" -o "$work/kv_messages_fuzz"
# Seed corpus: one valid message of every type, written by the codec itself.
clang++ -std=c++20 -O1 -I"$root/include" -I"$root/src" -I"$root/apps/kv/include" "$here/make_corpus.cc" "${sources[@]:1}" \
  -o "$work/make_corpus"
"$work/make_corpus" "$work/corpus"
log="$work/kv_messages.log"
if ! "$work/kv_messages_fuzz" -seed=1 -max_total_time="$seconds" -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$work/crash-kv-" "$work/corpus" >"$log" 2>&1; then
  tail -n 40 "$log"
  echo "fuzz: kv_messages FAILED (crashing input kept under $work)"
  exit 1
fi
runs=$(grep -E "stat::number_of_executed_units" "$log" | awk '{print $2}')
echo "fuzz: kv_messages ok, $runs executions in ${seconds}s"
