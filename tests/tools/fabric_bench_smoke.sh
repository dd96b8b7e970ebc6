#!/usr/bin/env bash
# Smoke test of fabric-bench on one provider: every mode with tiny counts (--quick), CSV output.
# Checks the exit status, the exact CSV header, a row for every mode (with the raw baseline's
# columns filled for single and paged, the plain/prepared ratio on prepared rows, metrics on/off op
# rates and their ratio on the metrics row), and the tool's verification verdict.
# usage: fabric_bench_smoke.sh FABRIC_BENCH PROVIDER DOMAINS [PLOT_PNG]
# (PROVIDER udp_rxd stands for "udp;ofi_rxd", whose ';' CMake test commands cannot carry.)
set -uo pipefail
bench=$1 provider=${2/udp_rxd/udp;ofi_rxd} domains=$3 plot=${4:-}
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
args=(--local --quick --mode all --provider "$provider" --domains "$domains" --format csv)
[ -n "$plot" ] && args+=(--plot "$plot")
"$bench" "${args[@]}" >"$out" 2>"$err"
rc=$?
fail() {
  echo "FAIL: $*"
  echo "--- stdout"; cat "$out"
  echo "--- stderr"; cat "$err"
  exit 1
}
[ "$rc" -eq 0 ] || fail "exit status $rc"
header=$(head -n1 "$out")
[ "$header" = "mode,provider,domains,size,engine_gbps,raw_gbps,ratio,engine_mops,raw_mops,p50_us,p99_us" ] ||
  fail "CSV header is '$header'"
for mode in single paged imm imm-raw scatter-post scatter-post-observed scatter-complete scatter-post-raw scatter-complete-raw submit plain-paged prepared-paged plain-scatter prepared-scatter metrics; do
  grep -q "^$mode,[^,]*,$domains," "$out" || fail "no $mode row for $domains domain(s)"
done
# single/paged rows carry engine, raw and ratio; latency rows carry p50/p99.
awk -F, 'NR > 1 && ($1 == "single" || $1 == "paged") && ($5 == "" || $6 == "" || $7 == "") { bad = 1 }
         NR > 1 && ($1 == "imm" || $1 == "submit" || $1 ~ /^scatter/ || $1 ~ /^(plain|prepared)-/) && ($10 == "" || $11 == "") { bad = 1 }
         NR > 1 && $1 ~ /^prepared-/ && $7 == "" { bad = 1 }
         NR > 1 && $1 == "metrics" && ($7 == "" || $8 == "" || $9 == "") { bad = 1 }
         NR > 1 && NF != 11 { bad = 1 }
         END { exit bad }' "$out" || fail "a row misses its columns"
grep -q "verification passed" "$err" || fail "no verification verdict"
if [ -n "$plot" ]; then
  [ -s "$plot" ] || fail "no plot written"
  rm -f "$plot"
fi
# --pin-domain is ipc's, below every --domains: refused (usage, exit 2) elsewhere, with its name.
usage_refused() {  # expected message, args...
  local want=$1 msg
  shift
  msg=$("$bench" --local --quick --mode single "$@" 2>&1 >/dev/null)
  local r=$?
  [ "$r" -eq 2 ] && [[ "$msg" == *"$want"* ]] || fail "fabric-bench $* gave exit $r, '$msg' (want 2, '$want')"
}
usage_refused "bad --pin-domain (ipc only)" --provider "$provider" --domains "$domains" --pin-domain 0
usage_refused "bad --pin-domain (below every --domains)" --provider ipc --domains 1,4 --pin-domain 1
echo "ok: $(($(wc -l <"$out") - 1)) rows; $(grep "verification passed" "$err")"
