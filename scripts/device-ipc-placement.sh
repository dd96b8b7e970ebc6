# FABRIC_LIB_DEVICE_STEPS=ipcplace (not by default; sourced by scripts/device-test.sh after its
# build; uses its $root, $build, $out, $py, stamp and result): where a four-domain ipc group's
# writes go, in rounds of one build. Shapes: x1 (one domain), x4 (four domains, the default
# route: a one-medium group's requests all start on domain 0), x4-pinned (--pin-domain 0: every
# write one WR on domain 0) and x4-spread (FABRIC_LIB_ONE_MEDIUM_SPREAD=1: requests rotate over
# the domains). The order of the shapes rotates from round to round: on one H100 (2026-12-07) a
# shape run in a fixed position read lower in every round, raw baselines too (docs/gpu.md).
# Points: single 64 KiB / 256 KiB / 1 MiB, paged 4 and 16 KiB (64 pages), window 16.
# FABRIC_LIB_IPC_PLACE_ROUNDS (default 6) rounds, stopping early past
# FABRIC_LIB_IPC_PLACE_SECONDS (default 300). Writes ipc_placement.txt (every run's output under
# its "== r<round> pos<position> <shape>" header); tools/fabric_bench/rounds_summary.py's medians
# and ratios to x1 go to bench.txt and summary.txt.
spin=()
[ "$(nproc)" -ge 8 ] && spin=(--spin --target-spin)
t0=$(date +%s)
stamp "ipc placement rounds: x1 / x4 / x4-pinned / x4-spread, the order rotating"
shapes=(x1 x4 x4-pinned x4-spread)
place_log=$out/ipc_placement.txt
: >"$place_log"
status=0
for round in $(seq "${FABRIC_LIB_IPC_PLACE_ROUNDS:-6}"); do
  [ $(($(date +%s) - t0)) -gt "${FABRIC_LIB_IPC_PLACE_SECONDS:-300}" ] && break
  for k in "${!shapes[@]}"; do
    shape=${shapes[$(((round + k) % ${#shapes[@]}))]}
    args=(--domains 4)
    place_env=()
    case $shape in
      x1) args=(--domains 1) ;;
      x4-pinned) args+=(--pin-domain 0) ;;
      x4-spread) place_env=(FABRIC_LIB_ONE_MEDIUM_SPREAD=1) ;;
    esac
    echo "== r$round pos$k $shape" >>"$place_log"
    env "${place_env[@]}" timeout 90 "$build/tools/fabric-bench" --local --provider ipc "${spin[@]}" "${args[@]}" \
      --mode single,paged --sizes 64KiB,256KiB,1MiB --page-sizes 4KiB,16KiB --window 16 --max-inflight 256MiB \
      --max-region 2GiB --duration 0.2 --repeats 2 >>"$place_log" 2>&1 || status=1
  done
done
{
  echo "== ipc placement rounds (engine Gbps medians; ratios to x1, rounds ahead)"
  "$py" "$root/tools/fabric_bench/rounds_summary.py" "$place_log" --reference x1 || status=1
} >"$out/ipc-placement-summary.txt" 2>&1
cat "$out/ipc-placement-summary.txt" >>"$out/bench.txt"
cat "$out/ipc-placement-summary.txt" >>"$out/summary.txt"
rm -f "$out/ipc-placement-summary.txt"
result ipc-placement "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
