# The "moe" step of scripts/device-test.sh (sourced by it, after its build; uses its $root,
# $build, $out, $py, stamp and result): MoE dispatch/combine on the GPU(s). On one H200 the 2 and
# 4 rank processes share GPU 0; on two GPUs rank r uses GPU r % 2. Parts (FABRIC_LIB_MOE_PARTS,
# default "memory tests bench python sanitize", in that order of value):
#   moe-memory    moe_memory: the buffer bytes per rank for DeepSeek-V3 decode/prefill, EP 2/4/8
#   moe-tests     moe_device_tests: DeepSeek-V3 shapes (hidden 7168, 256 experts, top-8, fp8 with
#                 per-128 scales, bf16 combine), decode 128 tokens/rank and prefill 4096, EP 2 and
#                 4, both paths (direct IPC stores; forced through the proxy and the ipc engine
#                 backend), every step checked against the host reference; CUDA graph captured
#                 once and replayed 100 times (proxy EP2, direct EP4); combine bit-identical across
#                 EP 1/2/4, both paths and runs
#   moe-sanitize  compute-sanitizer memcheck, then racecheck, around every rank (small shape, both
#                 paths)
#   moe-bench     moe_device_tests --bench: dispatch/combine p50/p99 per path, shape and EP, the
#                 halves, the proxy's reaction time and posting time per step -> moe_bench.csv
#                 (+ moe_bench.png when matplotlib is there)
#   moe-python    apps/moe/device/python: fabric_lib.moe.P2PAllToAll on CUDA tensors (2 ranks,
#                 both paths, a torch reference, a torch CUDA graph)
# Run it alone: FABRIC_LIB_DEVICE_STEPS=moe bash scripts/device-test.sh (carry [".deb"]). Estimated
# (not yet measured) on nvidia-h200: build ~1.5 min, tests ~1 min, bench ~1 min, python ~0.5 min,
# sanitize ~1.5 min; within 3 minutes per call: FABRIC_LIB_MOE_PARTS="memory tests bench" first,
# then "python sanitize" while the machine is warm (the build in /tmp is reused).
# Adds to $OUT: moe_bench.csv, moe_bench.png, moe.log, moe-memcheck-<pid>.log, moe-racecheck-<pid>.log,
# and moe-stacks.txt when a provider call stalls during the tests (then the failing proxy cases
# run again with FABRIC_LIB_IPC_COPY=memcpy and CUDA_MODULE_LOADING=EAGER; FABRIC_LIB_MOE_VARIANTS=0
# skips that).

moe_parts=${FABRIC_LIB_MOE_PARTS:-memory tests bench python sanitize}
moe_want() { [[ " $moe_parts " == *" $1 "* ]]; }
moe_tests=$build/apps/moe/device/moe_device_tests
moe_log=$out/moe.log
: >"$moe_log"

if moe_want memory; then
  t0=$(date +%s)
  echo "== moe_memory (bytes per rank; DeepSeek-V3, fp8 + 56 scales -> bf16)" >>"$out/bench.txt"
  status=0
  for shape in "tokens=128" "tokens=4096"; do
    for world in 2 4 8; do
      "$build/apps/moe/moe_memory" $shape world=$world >>"$out/bench.txt" 2>&1 || status=1
    done
  done
  "$build/apps/moe/moe_memory" tokens=4096 world=4 overflow=16384 >>"$out/bench.txt" 2>&1 || status=1
  result moe-memory "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
fi

# While the tests run: when the provider watchdog reports a stuck call, the stacks of every rank
# process (cuda-gdb attaches to programs; the image has no gdb) go to $out/moe-stacks.txt, once.
moe_stack_watch() {
  local gdb
  gdb=$(command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)
  [ -x "$gdb" ] || return 0
  while sleep 1; do
    grep -q "has not returned from a call" "$moe_log" || continue
    local pid
    for pid in $(pgrep -f moe_device_rank); do
      echo "=== pid $pid: $(tr '\0' ' ' </proc/"$pid"/cmdline)"
      timeout 90 "$gdb" -p "$pid" -batch -nx -ex "set pagination off" -ex "info threads" \
        -ex "thread apply all bt 30" 2>&1 | grep -vE "^\[New Thread|^warning: " | head -n 400
    done >>"$out/moe-stacks.txt" 2>&1
    return 0
  done
}

if moe_want tests; then
  t0=$(date +%s)
  stamp "moe device tests"
  echo "== moe_device_tests ($(nvidia-smi -L 2>/dev/null | wc -l) GPU(s))" >>"$moe_log"
  moe_stack_watch &
  watch_pid=$!
  timeout 300 "$moe_tests" --gtest_color=no --gtest_filter='-*MoeDeviceSanitized*' >>"$moe_log" 2>&1
  status=$?
  kill "$watch_pid" 2>/dev/null
  wait "$watch_pid" 2>/dev/null
  result moe-tests "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
  grep -E "^\[  (PASSED|FAILED|  OK) |^\[==========\] .* ran" "$moe_log" | tail -n 20 | tee -a "$out/summary.txt" >&2
  if [ $status -ne 0 ] && [ "${FABRIC_LIB_MOE_VARIANTS:-1}" = 1 ]; then
    # Which part is at fault: the failing proxy cases again with every GPU copy through
    # cudaMemcpyAsync (no page-copy kernel), then with every module loaded at start.
    for variant in "FABRIC_LIB_IPC_COPY=memcpy" "CUDA_MODULE_LOADING=EAGER"; do
      t0=$(date +%s)
      echo "== moe_device_tests, proxy cases, $variant" >>"$moe_log"
      env "$variant" timeout 150 "$moe_tests" --gtest_color=no \
        --gtest_filter='*Determinism*:*decode_proxy_ep2*' >>"$moe_log" 2>&1
      vstatus=$?
      result "moe-${variant%%=*}" "$([ $vstatus -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
    done
  fi
fi

if moe_want bench; then
  t0=$(date +%s)
  stamp "moe benchmark"
  echo "== MoE dispatch/combine (path,shape,world,rank,metric,p50,p99,samples; microseconds)" >>"$out/bench.txt"
  timeout 300 "$moe_tests" --bench "$out/moe_bench.csv" >>"$out/bench.txt" 2>>"$moe_log"
  status=$?
  result moe-bench "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
  "$py" "$root/apps/moe/device/moe_bench_plot.py" "$out/moe_bench.csv" "$out/moe_bench.png" >>"$out/bench.txt" 2>&1 ||
    echo "(no plot: $("$py" -c 'import matplotlib' 2>&1 | tail -n1))" >>"$out/bench.txt"
fi

if moe_want python; then
  t0=$(date +%s)
  stamp "moe python on CUDA tensors"
  echo "== pytest apps/moe/device/python" >>"$moe_log"
  (cd "$out" && PYTHONPATH="$build/python" timeout 240 "$py" -m pytest -v -s -rA -p no:cacheprovider \
    -o faulthandler_timeout=200 "$root/apps/moe/device/python") >>"$moe_log" 2>&1
  status=$?
  result moe-python "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
fi

if moe_want sanitize; then
  if command -v compute-sanitizer >/dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
    sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck; do
      t0=$(date +%s)
      stamp "moe kernels under compute-sanitizer --tool $tool"
      echo "== compute-sanitizer --tool $tool" >>"$moe_log"
      # The sanitizer's own report goes to one file per rank process (not into the ranks' stdout,
      # which carries the launcher's line protocol); --error-exitcode fails the rank, so the test.
      MOE_RANK_WRAPPER="$sanitizer --tool $tool --error-exitcode 9 --log-file $out/moe-$tool-%p.log" timeout 300 \
        "$moe_tests" --gtest_color=no --gtest_filter='*MoeDeviceSanitized*' >>"$moe_log" 2>&1
      status=$?
      result "moe-$tool" "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
      grep -E "^\[  (PASSED|FAILED|  OK) " "$moe_log" | tail -n 4 | tee -a "$out/summary.txt" >&2
      cat "$out"/moe-$tool-*.log 2>/dev/null | grep -E "ERROR SUMMARY|RACECHECK SUMMARY" | sort | uniq -c |
        tee -a "$out/summary.txt" >&2
    done
  else
    result moe-sanitize "SKIPPED" 0
  fi
fi
