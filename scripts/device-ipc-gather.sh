# The torch comparison of the "ipc" step (sourced by scripts/device-ipc.sh, or alone as the step
# "ipcgather" of scripts/device-test.sh): tools/fabric_bench/ipc_gather_vs_torch.py moves 4096
# scattered pages between 4 GiB GPU buffers with paged writes over ipc, with torch index_copy_
# and with a contiguous copy_, and prints the ratios. Adds ipc_gather_vs_torch.csv to $OUT.
# 32 rounds of 4 requests each: 8 rounds were 32 requests, a ~2 ms measurement at 4 KiB pages.

t0=$(date +%s)
stamp "ipc paged writes against torch index_copy_ (tools/fabric_bench/ipc_gather_vs_torch.py)"
echo "== ipc_gather_vs_torch.py (4096 scattered pages over 4 GiB buffers)" >>"$out/bench.txt"
(cd "$out" && PYTHONPATH="$build/python" timeout 150 "$py" "$root/tools/fabric_bench/ipc_gather_vs_torch.py" \
  --rounds 32 --window 4 \
  >"$out/ipc_gather_vs_torch.csv" 2>>"$out/bench.txt")
status=$?
cat "$out/ipc_gather_vs_torch.csv" >>"$out/bench.txt"
grep "^# " "$out/ipc_gather_vs_torch.csv" | tee -a "$out/summary.txt" >&2
result ipc-torch-gather "$([ $status -eq 0 ] && echo ok || echo FAILED)" $(($(date +%s) - t0))
