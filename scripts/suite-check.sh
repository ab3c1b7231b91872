# Sourced by scripts/test and scripts/test-lanes: whether one suite's run passed, read from
# its log. A failure, a skipped test, a run of no test or a time limit reached fails it; the
# reasons go to standard error.
#
#   check_suite NAME LOG EXIT_CODE [LIMIT]
check_suite() {
  local name=$1 out=$2 code=$3 limit=${4:-its limit} failed=0
  grep -E '✘|✔ Test run|Test run with|error:|Fatal' "$out" >&2 || true
  if [ "$code" -eq 124 ] || [ "$code" -eq 137 ]; then
    echo "$name did not finish within $limit; tests started and never finished:" >&2
    comm -23 <(sed -nE 's/^◇ Test ([^ ]*) started\.$/\1/p' "$out" | grep -vx run | sort -u) \
             <(sed -nE 's/^[✔✘] Test ([^ ]*) .*(passed|failed).*/\1/p' "$out" | sort -u) >&2
    failed=1
  fi
  if [ "$code" -ne 0 ] || grep -q '✘' "$out"; then
    echo "$name FAILED (see $out)" >&2; failed=1
  fi
  if grep -qE '➜|skipped' "$out"; then
    echo "$name skipped tests: a skipped suite is a failure here" >&2; grep -E '➜|skipped' "$out" | head >&2; failed=1
  fi
  if ! grep -qE 'Test run with [1-9][0-9]* test' "$out"; then
    echo "$name ran no tests" >&2; failed=1
  fi
  return $failed
}
