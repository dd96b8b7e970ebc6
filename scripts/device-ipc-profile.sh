# The "ipcprofile" step of scripts/device-test.sh (sourced by it after its build; uses its $root,
# $build, $out, $py, stamp and result): where a paged write's time goes on this machine's CPU.
#   cpu-share   engine-overhead-bench (the engine's work per WR, the provider taken out) and
#               ipc-domain-bench (the ipc domain's work per page, the GPU taken out), with this
#               machine's cores;
#   cpu-profile where the CPU time of fabric-bench --provider ipc's paged writes (4096 pages of 4 KiB
#               per request) goes, by function: a sampling profile (gperftools' libprofiler,
#               SIGPROF on CPU time) of the initiator's process, read with google-pprof per thread
#               (the worker, the submitting thread). The image has no perf, gdb or strace; carry
#               the profiler as Debian packages in .deb/prof/ (not unpacked into the build prefix):
#                 mkdir -p .deb/prof && cd .deb/prof && apt-get download libgoogle-perftools4 \
#                   libtcmalloc-minimal4 libunwind8 && cp /usr/bin/google-pprof .   # (google-perftools)
#               Skipped, and said so, without them. CUDA-driver frames show as the nearest
#               exported libcuda symbol (cuVDPAUCtxCreate and the like): read them as "inside the
#               driver" under the runtime call above them.
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


t0=$(date +%s)
prof_root=/tmp/fabric-lib-prof
if ls "$root"/.deb/prof/libgoogle-perftools4_*.deb >/dev/null 2>&1 && [ -f "$root/.deb/prof/google-pprof" ]; then
  stamp "ipc profile: sampling profile of fabric-bench --provider ipc (paged 4096 x 4 KiB)"
  mkdir -p "$prof_root/out" && rm -f "$prof_root"/out/*
  for deb in "$root"/.deb/prof/*.deb; do dpkg-deb -x "$deb" "$prof_root"; done
  libs=$prof_root/usr/lib/x86_64-linux-gnu
  {
    echo "== cpu-profile: fabric-bench --provider ipc --mode paged, 4096 pages of 4 KiB, window 4, 1 domain, 10 s"
    CPUPROFILE="$prof_root/out/p" CPUPROFILE_FREQUENCY=1000 LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}" \
      LD_PRELOAD="$libs/libprofiler.so.0" timeout 150 "$build/tools/fabric-bench" --local --quiet --provider ipc \
      --mode paged --page-sizes 4KiB --pages-per-request 4096 --window 4 --max-inflight 4GiB --max-region 2GiB \
      --domains 1 --duration 10 --only engine 2>&1 | grep -E "^paged"
    # The launching process writes p, each process it starts p_<pid>; the initiator's engine is
    # the one whose samples include IpcBench::time_engine.
    for f in "$prof_root"/out/p*; do
      grep -q time_engine <(perl "$root/.deb/prof/google-pprof" --text --focus=time_engine "$build/tools/fabric-bench" "$f" 2>/dev/null) || continue
      for focus in GroupWorker::thread_main IpcBench::time_engine; do
        echo "-- $(basename "$f"): samples under $focus (flat, then cumulative)"
        perl "$root/.deb/prof/google-pprof" --text --focus="$focus" "$build/tools/fabric-bench" "$f" 2>/dev/null | head -30
        perl "$root/.deb/prof/google-pprof" --text --cum --focus="$focus" "$build/tools/fabric-bench" "$f" 2>/dev/null | sed -n 2,40p
      done
    done
  } >>"$out/ipc_profile.txt" 2>&1
  status=$?
  result ipc-cpu-profile "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
else
  echo "== cpu-profile skipped: no .deb/prof/ (libgoogle-perftools4 and google-pprof; this file's header)" >>"$out/ipc_profile.txt"
  stamp "ipc profile: no .deb/prof/, the sampling profile is skipped" 
fi
