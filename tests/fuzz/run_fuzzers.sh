#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a fixed number of
# executions, with a fixed seed, over a copy of its checked-in corpus (tests/fuzz/corpus/<target>):
# the same inputs and the same mutations every run, and the checked-in corpus never grows. What
# else would make two runs differ is turned off: address randomisation (pointer values reach the
# comparison-guided mutations; setarch -R), the periodic corpus reload and the time-driven growth
# of the input length limit (-reload=0 -len_control=0). Each target's last line (cov, ft, corp)
# is then the same from run to run.
# Usage: run_fuzzers.sh [runs_per_target] [work_dir]
# Fails when clang++ or libFuzzer is missing (scripts/install-deps.sh installs them). A crashing
# input is kept in the work dir as crash-<target>-*; add it to tests/unit as a regression test.
# New seeds: tests/fuzz/make_seeds.cc (its header says how to rebuild the corpus).
set -euo pipefail
runs=${1:-200000}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work"

if ! command -v clang++ >/dev/null; then
  echo "fuzz: FAILED: clang++ not found (scripts/install-deps.sh installs clang and libclang-rt-14-dev)"
  exit 1
fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
     clang++ -x c++ -fsanitize=fuzzer - -o "$work/libfuzzer_probe" 2>"$work/libfuzzer_probe.log"; then
  cat "$work/libfuzzer_probe.log"
  echo "fuzz: FAILED: clang++ cannot link libFuzzer (install libclang-rt-14-dev: scripts/install-deps.sh)"
  exit 1
fi

# Every decoder of bytes from peers, and the sources each target needs (src/base holds the
# public value types' code).
declare -A sources=(
  [mr_desc]="base/mr_desc.cc base/domain_address.cc base/status.cc"
  [domain_address]="base/domain_address.cc base/status.cc"
  [probe_message]="core/probe_message.cc base/status.cc"
  [ipc_address]="transport/ipc/ipc_address.cc transport/ipc/process_identity.cc base/status.cc"
  [ipc_ring]="transport/ipc/mpsc_ring.cc transport/ipc/message_assembler.cc base/status.cc"
)
targets=(mr_desc domain_address probe_message ipc_address ipc_ring)
flags=(-std=c++20 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -I"$root/include" -I"$root/src")

# Each source once, instrumented for coverage.
mkdir -p "$work/obj"
declare -A objects=()
for target in "${targets[@]}"; do
  for src in ${sources[$target]}; do
    [ -n "${objects[$src]:-}" ] && continue
    obj="$work/obj/$(echo "$src" | tr / _).o"
    clang++ "${flags[@]}" -fsanitize=fuzzer-no-link -c "$root/src/$src" -o "$obj"
    objects[$src]=$obj
  done
done

total=0
for target in "${targets[@]}"; do
  objs=()
  for src in ${sources[$target]}; do objs+=("${objects[$src]}"); done
  clang++ "${flags[@]}" -fsanitize=fuzzer "$here/${target}_fuzz.cc" "${objs[@]}" -o "$work/${target}_fuzz"
  seeds="$here/corpus/$target"
  if [ -z "$(ls -A "$seeds" 2>/dev/null)" ]; then
    echo "fuzz: FAILED: no checked-in seeds in $seeds"
    exit 1
  fi
  corpus="$work/corpus_$target"
  rm -rf "$corpus"
  cp -r "$seeds" "$corpus"
  log="$work/$target.log"
  if ! setarch "$(uname -m)" -R "$work/${target}_fuzz" -seed=1 -runs="$runs" -reload=0 -len_control=0 \
      -print_final_stats=1 -artifact_prefix="$work/crash-$target-" "$corpus" >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "fuzz: $target FAILED (crashing input kept under $work)"
    exit 1
  fi
  executed=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
  final=$(grep -E "^#$runs[[:space:]]+DONE" "$log" | sed -E 's/.*DONE +//; s/ lim:.*//')
  if [ "${executed:-0}" -lt "$runs" ]; then
    tail -n 20 "$log"
    echo "fuzz: $target FAILED: ran ${executed:-0} of $runs executions"
    exit 1
  fi
  echo "fuzz: $target ok, $executed executions from $(ls "$seeds" | wc -l) seeds ($final)"
  total=$((total + executed))
done
echo "fuzz: all ${#targets[@]} targets ok, $total executions"
