# The "ipc" step of scripts/device-test.sh (sourced by it, after its build; uses its $root,
# $build, $out, $py, $device_tests, stamp and result). On one GPU the peer processes share GPU 0,
# on two they use GPU 1; the step works the same on nvidia-h200 and nvidia-h200-x2:
#   ipc-tests   device_tests --gtest_filter='Ipc/*:CopyEngine*': the copy engine's page-copy
#                  kernel driven directly (gathers and plain copies of many lengths, bytes checked;
#                  a faulting copy reported with an error, with completion words and events), and
#                  the integration matrix on GPU memory over
#                  ipc (1 and 4 domains): every operation, bytes and imm counts verified, early
#                  arrivals, a target kernel reading the bytes at its imm flag, thousands in flight,
#                  stop() with work in flight (both sides), kill -9 of the peer, forged keys/ranges;
#   ipc-python  tests/device/ipc_python: torch CUDA tensors between two processes;
#   ipc-bench   fabric-bench --provider ipc: single and paged writes against
#                  cudaMemcpyPeerAsync of the same bytes (ratios), paged writes once per GPU copy
#                  mode (memcpy / batch / kernel, to choose the default), imm round trips p50/p99.
#   ipc-bench-split  the single writes with 4 domains again, shards split over them (--max-shards 4).
#   ipc-launcher-ab  paged writes with the copy engine's launcher thread at its default threshold,
#                  off and at 256 copies, alternating (scripts/device-ipc-launcher.sh).
#   ipc-torch-gather  tools/fabric_bench/ipc_gather_vs_torch.py: paged writes of 4096 scattered
#                  pages over 4 GiB buffers against torch index_copy_ and a contiguous copy_.
# Adds to $OUT: ipc_bench.csv, ipc_bench_split.csv, ipc_gather_vs_torch.csv (the other output goes into device-tests.log, bench.txt and
# summary.txt).

# shellcheck source=device-ipc-tests.sh
source "$root/scripts/device-ipc-tests.sh"

t0=$(date +%s)
stamp "ipc bandwidth and latency (fabric-bench --provider ipc)"
echo "== fabric-bench --provider ipc (raw = cudaMemcpyPeerAsync of the same bytes)" >>"$out/bench.txt"
spin=()
[ "$(nproc)" -ge 8 ] && spin=(--spin --target-spin)
timeout 300 "$build/tools/fabric-bench" --local --provider ipc --mode single,paged,imm --domains 1,4 "${spin[@]}" \
  --sizes 4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB,64MiB,256MiB --page-sizes 4KiB,8KiB,16KiB,32KiB,64KiB,256KiB \
  --pages-per-request 64 --window 16 --max-inflight 256MiB --max-region 512MiB --copy-modes memcpy,batch,kernel \
  --duration 0.2 --latency-iterations 2000 --csv "$out/ipc_bench.csv" >>"$out/bench.txt" 2>&1
status=$?
result ipc-bench "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))

# The same single writes with 4 domains, each write's shards split over them (--max-shards 4: what
# the default did before it kept a one-medium group's shards on one domain), in the same run.
t0=$(date +%s)
stamp "ipc single writes split over 4 domains (--max-shards 4)"
echo "== fabric-bench --provider ipc --mode single --domains 4 --max-shards 4" >>"$out/bench.txt"
timeout 200 "$build/tools/fabric-bench" --local --provider ipc --mode single --domains 4 --max-shards 4 "${spin[@]}" \
  --sizes 256KiB,1MiB,4MiB,16MiB --window 16 --max-inflight 256MiB --max-region 512MiB \
  --duration 0.2 --csv "$out/ipc_bench_split.csv" >>"$out/bench.txt" 2>&1
status=$?
result ipc-bench-split "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))


# shellcheck source=device-ipc-launcher.sh
source "$root/scripts/device-ipc-launcher.sh"

# shellcheck source=device-ipc-gather.sh
source "$root/scripts/device-ipc-gather.sh"
