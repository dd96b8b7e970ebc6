# The "ipc-launcher-ab" sub-step of the ipc step (scripts/device-ipc.sh), also a step of its own,
# FABRIC_LIB_DEVICE_STEPS=ipclauncher (sourced by scripts/device-test.sh after its build; uses its
# $root, $build, $out, stamp and result). The copy engine's launcher thread, A/B'd in one build
# (docs/gpu.md, "The launcher thread"): paged writes of few large pages (64 x 64 KiB and
# 64 x 256 KiB: up to 1024 copies in a flush at window 16) and of many small ones (4096 x 4 KiB:
# 4096 copies a request), with the default threshold (2048 copies), with no launcher thread (0)
# and with 256 (what the flushes of 64-page requests reach), alternating over two rounds.
# Rows go to summary.txt as "launcher <threshold> r<round>: paged ...", tables to bench.txt.
spin=()
[ "$(nproc)" -ge 8 ] && spin=(--spin --target-spin)
t0=$(date +%s)
stamp "ipc launcher thread A/B (FABRIC_LIB_IPC_LAUNCHER_COPIES default / 0 / 256)"
echo "== fabric-bench --provider ipc --mode paged, FABRIC_LIB_IPC_LAUNCHER_COPIES default / 0 / 256" >>"$out/bench.txt"
status=0
for round in 1 2; do
  for copies in default 0 256; do
    launcher_env=()
    [ "$copies" != default ] && launcher_env=("FABRIC_LIB_IPC_LAUNCHER_COPIES=$copies")
    for pages in 64 4096; do
      sizes=64KiB,256KiB
      [ "$pages" = 4096 ] && sizes=4KiB
      echo "-- round $round, launcher copies: $copies, $pages pages of $sizes" >>"$out/bench.txt"
      env "${launcher_env[@]}" timeout 90 "$build/tools/fabric-bench" --local --quiet --provider ipc --mode paged \
        --domains 1 "${spin[@]}" --page-sizes "$sizes" --pages-per-request "$pages" --window 16 \
        --max-inflight 4GiB --max-region 2GiB --duration 0.3 >"$out/launcher-ab.txt" 2>&1 || status=1
      cat "$out/launcher-ab.txt" >>"$out/bench.txt"
      grep -E "^paged" "$out/launcher-ab.txt" | sed "s/^/launcher $copies r$round: /" >>"$out/summary.txt"
    done
  done
done
rm -f "$out/launcher-ab.txt"
result ipc-launcher-ab "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
