# The "kv" step of scripts/device-test.sh (sourced by it after its build; uses its $root, $build,
# $out, $py, stamp and result): the KV-transfer app (apps/kv, issue 13) on the GPU machine.
#   kv-tests       ctest -L kv (unit, multi-process tcp/shm/reordered, Python end to end on the
#                  CPU with torch), the fuzzer excluded (no clang there);
#   kv-gpu-e2e     apps/kv/tests/device: the tiny attention model with its paged KV cache in GPU
#                  memory, prefiller and decoder processes on GPU 0 over the IPC backend
#                  ("ipc"), the prefill replayed as a CUDA graph whose per-layer stores into the
#                  prefiller's UVM word trigger the layer writes; tokens equal a monolithic run;
#   kv-bench-gpu   python -m fabric_lib.kv.bench --device cuda --provider ipc: a Qwen3-235B-like
#                  TP4 rank pair (94 layers, 1 KV head, head dim 128, bf16, 32 KiB pages), prompts
#                  4K/16K/32K/128K, chunks of 16K, real per-layer compute; exposed transfer time as
#                  a fraction of prefill, MET/MISSED (<= 1% at >= 16K, <= 3% at 4K);
#   kv-bench-cpu   fabric-kv-bench over tcp and shm (app vs engine paged writes, requests/s, the
#                  1,000-request no-slowdown check) on this machine's cores.
# Run it alone: FABRIC_LIB_DEVICE_STEPS=kv bash scripts/device-test.sh (carry [".deb"]).
# FABRIC_LIB_KV_PARTS (default "tests e2e bench-gpu bench-cpu") runs a subset.
# Adds to $OUT: kv.log, kv_gpu_bench.csv, kv_gpu_bench.png (with matplotlib), kv_cpu_bench.csv.

kv_parts=${FABRIC_LIB_KV_PARTS:-tests e2e bench-gpu bench-cpu}
kv_want() { [[ " $kv_parts " == *" $1 "* ]]; }
: >"$out/kv.log"

if kv_want tests; then
t0=$(date +%s)
stamp "kv: ctest -L kv"
(cd "$build" && timeout 400 ctest --output-on-failure -L kv -E 'fuzz') >>"$out/kv.log" 2>&1
status=$?
result kv-tests "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
grep -E "tests passed|tests failed" "$out/kv.log" | tee -a "$out/summary.txt" >&2
# Which ones, in the summary too: kv.log does not always come back from the device run.
grep -A10 "The following tests FAILED" "$out/kv.log" | tee -a "$out/summary.txt" >&2
fi

if kv_want e2e; then

t0=$(date +%s)
stamp "kv: GPU end to end (CUDA graph, UVM watcher, IPC backend)"
echo "== pytest apps/kv/tests/device" >>"$out/kv.log"
(cd "$out" && PYTHONPATH="$build/python" timeout 300 "$py" -m pytest -v -s -rA -p no:cacheprovider \
  -o faulthandler_timeout=280 "$root/apps/kv/tests/device") >>"$out/kv.log" 2>&1
status=$?
result kv-gpu-e2e "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
fi

if kv_want bench-gpu; then

t0=$(date +%s)
stamp "kv: exposed transfer time (python -m fabric_lib.kv.bench --device cuda)"
echo "== fabric_lib.kv.bench --device cuda --provider ipc" >>"$out/bench.txt"
PYTHONPATH="$build/python" timeout 500 "$py" -m fabric_lib.kv.bench --device cuda --provider ipc \
  --csv "$out/kv_gpu_bench.csv" --plot "$out/kv_gpu_bench.png" >>"$out/bench.txt" 2>&1
status=$?
result kv-bench-gpu "$([ $status -eq 0 ] && echo ok || echo MISSED/FAILED)" $(($(date +%s) - t0))
fi

if kv_want bench-cpu; then

t0=$(date +%s)
stamp "kv: fabric-kv-bench (CPU paths)"
status=0
for provider in tcp shm; do
  echo "== fabric-kv-bench --provider $provider" >>"$out/bench.txt"
  timeout 200 "$build/apps/kv/fabric-kv-bench" --provider "$provider" --csv "$out/kv_cpu_bench_$provider.csv" \
    >>"$out/bench.txt" 2>&1 || status=1
done
result kv-bench-cpu "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
fi
