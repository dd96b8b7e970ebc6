# The "hostbench" step of scripts/device-test.sh (sourced by it, after its build; uses its $root,
# $build, $out, stamp and result): fabric-bench on host memory with this machine's cores (16 on
# nvidia-h200), tcp over loopback and shm, 1 and 4 domains, every mode, both sides busy-polling —
# the engine against the raw libfabric loop in the same run, with the targets' MET/MISSED lines
# (docs/benchmarks.md). Then shm again with --trust-provider-calls (the latency modes only: by
# default only the worker calls shm, the opt-in lets application threads post and poll).
# Bandwidth points take the best of two alternating engine/raw runs (--repeats 2): single runs on
# that machine moved a raw shm point 1.5x between sweeps (docs/benchmarks.md, 2026-12-05).
# Adds to $OUT: hostbench_tcp.csv/.txt, hostbench_shm.csv/.txt, hostbench_shm_trusted.csv/.txt.

hostbench_sweep() {  # provider, time limit (s), name suffix, modes, extra fabric-bench arguments...
  local provider=$1 limit=$2 name=hostbench_${1//;/_}$3 modes=$4
  shift 4
  t0=$(date +%s)
  stamp "fabric-bench --provider $provider $* (host memory, spin)"
  timeout "$limit" "$build/tools/fabric-bench" --local --spin --target-spin --provider "$provider" --domains 1,4 \
    --mode "$modes" --duration 0.2 --latency-iterations 300 --sizes 4KiB,64KiB,256KiB,1MiB,4MiB,16MiB \
    --page-sizes 4KiB,8KiB,16KiB,32KiB,64KiB --scatter-peers 8,64 --repeats 2 "$@" --csv "$out/$name.csv" >"$out/$name.txt" 2>>"$out/bench.txt"
  status=$?
  result "$name" "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
  grep -E "MISSED|met" "$out/$name.txt" | sed 's/^/  /' >>"$out/summary.txt"
}
hostbench_sweep tcp 300 "" all
hostbench_sweep shm 240 "" all
hostbench_sweep shm 100 _trusted submit,imm,scatter --trust-provider-calls
