# The "weights" step of scripts/device-test.sh (sourced by it after its build; uses its $root,
# $build, $out, $py, stamp and result): the RL weight-transfer app (apps/weights, issue 14) on the
# GPU machine. GPU checks only (the CPU tests run in CI). Expected on one H200 (16 cores), after
# the build (which adds about 30 s for the app's targets): about 2.5 minutes.
#   weights-fp8        weights_fp8_device_check: the CUDA fp8 128x128 block kernel against the CPU
#                      reference, bit for bit (8 cases: edges, pitches, zero/NaN/inf blocks, ties,
#                      subnormals, real layer shapes), then check_fp8_torch.py: the kernel's bytes
#                      and scales against torch.float8_e4m3fn on the GPU (~15 s);
#   weights-gpu-tests  weights_integration_tests --gtest_filter='Gpu*': 4 trainer processes with
#                      FSDP shards in GPU memory -> 2 inference processes, over ipc, prepare on the
#                      GPU, ten steps, every byte and scale equal to the reference load (~20 s);
#   weights-e2e        apps/weights/tests/device/test_weights_gpu_e2e.py: identical logits on the
#                      GPU over ipc, 2 trainers -> a bf16 and an fp8 inference instance, 3 steps:
#                      the built-in model (f32 shards) and a transformers Qwen3-MoE (bf16 shards;
#                      skipped with the reason if transformers does not import) (~45 s);
#   weights-bench      python -m fabric_lib.weights.bench --device cuda --provider ipc: one
#                      DeepSeek-V3 MoE layer (23 GB of bf16) from 2 trainers into one fp8 rank,
#                      shards resident and offloaded, against the copy-only time of the same
#                      bytes; exposed transfer MET/MISSED (<= 5 % of the step); the measured
#                      per-stage rates, then fabric-weights-bench with them (~75 s).
# Run it alone: FABRIC_LIB_DEVICE_STEPS=weights bash scripts/device-test.sh (carry [".deb"]), or
# bash apps/weights/tests/device/device-weights.sh (the same).
# Adds to $OUT: weights.log (everything), weights_pipeline.csv, weights_pipeline_projection.csv,
# weights_pipeline.png (with matplotlib); tables go to bench.txt, one line per part to summary.txt.

weights_log=$out/weights.log
: >"$weights_log"

t0=$(date +%s)
stamp "weights: fp8 kernel vs the CPU reference and vs torch float8_e4m3fn"
mkdir -p "$build/weights-fp8-cases"
{
  echo "== weights_fp8_device_check (CUDA kernel vs CPU reference)"
  timeout 180 "$build/apps/weights/tests/device/weights_fp8_device_check" "$build/weights-fp8-cases"
} >>"$weights_log" 2>&1
status=$?
{
  echo "== check_fp8_torch.py (kernel vs torch.float8_e4m3fn)"
  timeout 120 "$py" "$root/apps/weights/tests/device/check_fp8_torch.py" "$build/weights-fp8-cases"
} >>"$weights_log" 2>&1
status=$((status | $?))
result weights-fp8 "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
grep -E "passed, .* failed|-> fabric-weights-bench" "$weights_log" | tee -a "$out/summary.txt" >&2

t0=$(date +%s)
stamp "weights: integration tests on GPU memory (Gpu*)"
echo "== weights_integration_tests --gtest_filter='Gpu*' ($(nvidia-smi -L 2>/dev/null | wc -l) GPU(s))" >>"$weights_log"
timeout 240 "$build/apps/weights/tests/weights_integration_tests" --gtest_color=no --gtest_filter='Gpu*' >>"$weights_log" 2>&1
status=$?
result weights-gpu-tests "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$weights_log" | tail -n 5 | tee -a "$out/summary.txt" >&2

t0=$(date +%s)
stamp "weights: identical logits on the GPU (ipc)"
echo "== pytest apps/weights/tests/device/test_weights_gpu_e2e.py" >>"$weights_log"
(cd "$out" && PYTHONPATH="$build/python" timeout 300 "$py" -m pytest -v -s -rA -p no:cacheprovider \
  -o faulthandler_timeout=280 "$root/apps/weights/tests/device/test_weights_gpu_e2e.py") >>"$weights_log" 2>&1
status=$?
result weights-e2e "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
grep -E "^(PASSED|FAILED|SKIPPED|ERROR) " "$weights_log" | tee -a "$out/summary.txt" >&2

t0=$(date +%s)
stamp "weights: pipeline benchmark (python -m fabric_lib.weights.bench --device cuda --provider ipc)"
echo "== fabric_lib.weights.bench --device cuda --provider ipc" >>"$out/bench.txt"
PYTHONPATH="$build/python" timeout 420 "$py" -m fabric_lib.weights.bench --device cuda --provider ipc \
  --csv "$out/weights_pipeline.csv" --plot "$out/weights_pipeline.png" \
  --weights-bench "$build/apps/weights/fabric-weights-bench" >"$out/weights-bench.tmp" 2>&1
status=$?
cat "$out/weights-bench.tmp" >>"$weights_log"
grep -vE "^(Kimi-K2|DeepSeek-V3|model),|^$" "$out/weights-bench.tmp" >>"$out/bench.txt"
rm -f "$out/weights-bench.tmp"
result weights-bench "$([ $status -eq 0 ] && echo ok || echo MISSED/FAILED)" $(($(date +%s) - t0))
