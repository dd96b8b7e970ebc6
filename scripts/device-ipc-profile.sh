# The "ipcprofile" step of scripts/device-test.sh (sourced by it after its build; uses its $root,
# $build, $out, $py, stamp and result): where a paged write's time goes on this machine's CPU.
#   cpu-share   engine-overhead-bench (the engine's work per WR, the provider taken out) and
#               ipc-domain-bench (the ipc domain's work per page, the GPU taken out), with this
#               machine's cores; and the GPU's share: page-copy-kernel-bench (the page-copy
#               kernel alone, 4096 x 4 KiB requests at window 4, against contiguous copies);
#   cpu-profile where the CPU time of fabric-bench --provider ipc goes, by function, at the points
#               FABRIC_LIB_IPC_PROFILE names (below): a sampling profile (gperftools' libprofiler,
#               SIGPROF on CPU time) of both processes, read with google-pprof per thread
#               (the initiator's worker and submitting thread, the target's worker). The image has no perf, gdb or strace; carry
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
  echo "== page-copy-kernel-bench"
  timeout 120 "$build/tests/bench/page-copy-kernel-bench"
} >"$out/ipc_profile.txt" 2>&1
status=$?
result ipc-cpu-share "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
grep -E "ns per WR|engine work per WR|page-copy kernel|contiguous cudaMemcpyAsync|verification" "$out/ipc_profile.txt" | tee -a "$out/summary.txt" >&2


t0=$(date +%s)
prof_root=/tmp/fabric-lib-prof
# One sampled fabric-bench run: its label, then fabric-bench's arguments after the common ones.
# Prints, for the initiator (the process whose samples include IpcBench::time_engine), the samples
# under its worker and under the submitting thread, and for the target the samples under its worker.
profile_point() {
  local label=$1
  shift
  rm -f "$prof_root"/out/*
  echo "== cpu-profile $label: fabric-bench --provider ipc $*"
  CPUPROFILE="$prof_root/out/p" CPUPROFILE_FREQUENCY=1000 LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}" \
    LD_PRELOAD="$libs/libprofiler.so.0" timeout 150 "$build/tools/fabric-bench" --local --quiet --provider ipc \
    --max-inflight 4GiB --max-region 2GiB --only engine "$@" 2>&1 | grep -E "^(paged|single)"
  # The launching process writes p, each process it starts p_<pid>.
  local f focus role
  for f in "$prof_root"/out/p*; do
    if grep -q time_engine <(perl "$root/.deb/prof/google-pprof" --text --focus=time_engine "$build/tools/fabric-bench" "$f" 2>/dev/null); then
      role="initiator"
      set -- GroupWorker::thread_main IpcBench::time_engine
    elif grep -q serve_ipc_target <(perl "$root/.deb/prof/google-pprof" --text --focus=serve_ipc_target "$build/tools/fabric-bench" "$f" 2>/dev/null); then
      role="target"
      set -- GroupWorker::thread_main
    else
      continue
    fi
    for focus in "$@"; do
      echo "-- $label, $role ($(basename "$f")): samples under $focus (flat, then cumulative)"
      perl "$root/.deb/prof/google-pprof" --text --focus="$focus" "$build/tools/fabric-bench" "$f" 2>/dev/null | head -30
      perl "$root/.deb/prof/google-pprof" --text --cum --focus="$focus" "$build/tools/fabric-bench" "$f" 2>/dev/null | sed -n 2,40p
    done
  done
}
# FABRIC_LIB_IPC_PROFILE picks the points (default: paged4k, the step's first purpose):
#   paged4k    paged writes, 4096 pages of 4 KiB per request, window 4, 1 domain, 10 s;
#   single64k  single 64 KiB writes, window 16, both engines spinning, 1 domain then 4 domains, 5 s
#              each (where the 4-domain group's extra time per request goes).
if ls "$root"/.deb/prof/libgoogle-perftools4_*.deb >/dev/null 2>&1 && [ -f "$root/.deb/prof/google-pprof" ]; then
  mkdir -p "$prof_root/out"
  for deb in "$root"/.deb/prof/*.deb; do dpkg-deb -x "$deb" "$prof_root"; done
  libs=$prof_root/usr/lib/x86_64-linux-gnu
  status=0
  for point in ${FABRIC_LIB_IPC_PROFILE:-paged4k}; do
    stamp "ipc profile: sampling profile of fabric-bench --provider ipc ($point)"
    case $point in
      paged4k)
        profile_point paged4k --mode paged --page-sizes 4KiB --pages-per-request 4096 --window 4 --domains 1 --duration 10 ;;
      single64k)
        for d in 1 4; do
          profile_point "single64k-x$d" --mode single --sizes 64KiB --window 16 --spin --target-spin --domains "$d" --duration 5
        done ;;
      *) echo "== unknown profile point $point"; false ;;
    esac >>"$out/ipc_profile.txt" 2>&1 || status=1
  done
  result ipc-cpu-profile "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
else
  echo "== cpu-profile skipped: no .deb/prof/ (libgoogle-perftools4 and google-pprof; this file's header)" >>"$out/ipc_profile.txt"
  stamp "ipc profile: no .deb/prof/, the sampling profile is skipped"
fi
