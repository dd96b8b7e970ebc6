# The "ipcshape" step of scripts/device-test.sh (not by default; sourced by it after its build;
# uses its $root, $build, $out, gtest_step, stamp and result): the page-copy kernel's shape,
# A/B'd in one build. First the copy engine's kernel tests (CopyEngine*: every shape moves its
# bytes), then fabric-bench paged writes over ipc — 64 x 256 KiB and 4096 x 4 KiB
# pages per request, window 16 — with FABRIC_LIB_IPC_LAUNCH_WARPS (a flush cut into pieces
# smaller than 16 KiB, down to 2 KiB, until its launches run this many warps; 0: always 16 KiB)
# and FABRIC_LIB_IPC_COPY_LOADS (16-byte loads in flight per lane: 4 or 8), alternating over two
# rounds. Rows go to summary.txt as "shape w<warps> l<loads> r<round>: paged ...".
# FABRIC_LIB_IPCSHAPE_SHAPES ("warps:loads ...", default all four) and FABRIC_LIB_IPCSHAPE_ROUNDS
# (default 2) narrow or lengthen the A/B.
spin=()
[ "$(nproc)" -ge 8 ] && spin=(--spin --target-spin)
gtest_step copy-engine-tests 'CopyEngine*' 200

t0=$(date +%s)
stamp "ipc page-copy kernel shape A/B (FABRIC_LIB_IPC_LAUNCH_WARPS x FABRIC_LIB_IPC_COPY_LOADS)"
echo "== fabric-bench --provider ipc --mode paged, kernel shapes" >>"$out/bench.txt"
status=0
for round in $(seq 1 "${FABRIC_LIB_IPCSHAPE_ROUNDS:-2}"); do
  for shape in ${FABRIC_LIB_IPCSHAPE_SHAPES:-0:4 0:8 8192:4 8192:8}; do
    warps=${shape%:*} loads=${shape#*:}
    for pages in 64 4096; do
      sizes=256KiB
      [ "$pages" = 4096 ] && sizes=4KiB
      echo "-- round $round, min warps $warps, loads $loads, $pages pages of $sizes" >>"$out/bench.txt"
      FABRIC_LIB_IPC_LAUNCH_WARPS=$warps FABRIC_LIB_IPC_COPY_LOADS=$loads timeout 90 "$build/tools/fabric-bench" \
        --local --quiet --provider ipc --mode paged --domains 1 "${spin[@]}" --page-sizes "$sizes" \
        --pages-per-request "$pages" --window 16 --max-inflight 4GiB --max-region 2GiB --duration 0.2 \
        >"$out/shape-ab.txt" 2>&1 || status=1
      cat "$out/shape-ab.txt" >>"$out/bench.txt"
      grep -E "^paged" "$out/shape-ab.txt" | sed "s/^/shape w$warps l$loads r$round: /" >>"$out/summary.txt"
    done
  done
done
result ipc-shape-ab "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
