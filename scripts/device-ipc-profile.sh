# The "ipcprofile" step of scripts/device-test.sh (sourced by it after its build; uses its $root,
# $build, $out, $py, stamp and result): where a paged write's time goes on this machine's CPU.
#   cpu-share   engine-overhead-bench (the engine's work per WR, the provider taken out) and
#               ipc-domain-bench (the ipc domain's work per page, the GPU taken out), with this
#               machine's cores;
# (Sampling the worker's stacks with cuda-gdb, the image's only debugger, was tried on 2026-12-02:
# its stacks had no symbols past libc, and the sampled process crashed inside libcudadebugger.)
# Adds to $OUT: ipc_profile.txt.
t0=$(date +%s)
stamp "ipc profile: CPU shares"
{
  echo "== engine-overhead-bench --requests 20000 --repeats 3"
  timeout 120 "$build/tests/bench/engine-overhead-bench" --requests 20000 --repeats 3
  echo "== ipc-domain-bench"
  timeout 120 "$build/tests/bench/ipc-domain-bench"
} >"$out/ipc_profile.txt" 2>&1
status=$?
result ipc-cpu-share "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
grep -E "ns per WR|engine work per WR" "$out/ipc_profile.txt" | tee -a "$out/summary.txt" >&2

