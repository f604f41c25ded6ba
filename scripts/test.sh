#!/usr/bin/env bash
# The whole test suite, as CI runs it: install what is missing, build with
# -Werror, run `make check`, then again with ASan+UBSan, then the fuzzer.
# Prints "N passed, N failed" at the end.
# SPDX-License-Identifier: BSD-3-Clause
set -uo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export PATH

top=$(cd "$(dirname "$0")/.." && pwd)
passed=0 failed=0 skipped=0
status=0

# Add up one build's automake test results.
count_results ()
{
  local log=$1/tests/test-suite.log n
  [ -f "$log" ] || { echo "test: no $log" >&2; failed=$((failed + 1)); return; }
  n=$(sed -n 's/^# PASS: *//p' "$log"); passed=$((passed + ${n:-0}))
  n=$(sed -n 's/^# FAIL: *//p' "$log"); failed=$((failed + ${n:-0}))
  n=$(sed -n 's/^# ERROR: *//p' "$log"); failed=$((failed + ${n:-0}))
  n=$(sed -n 's/^# XPASS: *//p' "$log"); failed=$((failed + ${n:-0}))
  n=$(sed -n 's/^# SKIP: *//p' "$log"); skipped=$((skipped + ${n:-0}))
}

run_suite ()
{
  local build=$1; shift
  echo "=== build $build ($*)"
  bash "$top/scripts/setup.sh" "$build" "$@" || { status=1; failed=$((failed + 1)); return; }
  echo "=== make check in $build"
  if ! make -C "$build" -j"$(nproc)" check >"$build/check.out" 2>&1; then
    status=1
    grep -E '^(FAIL|ERROR)' "$build/check.out" || tail -40 "$build/check.out"
    for f in "$build"/tests/*.log; do
      case "$f" in */test-suite.log) continue ;; esac
      grep -q '^:test-result: \(FAIL\|ERROR\)' "${f%.log}.trs" 2>/dev/null || continue
      echo "---- $f"; tail -40 "$f"
    done
  fi
  grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)' "$build/tests/test-suite.log" || true
  count_results "$build"
}

run_suite "$top/build" --enable-werror
run_suite "$top/build-asan" --enable-werror --enable-sanitizers

# The qcow2 parser fuzzer, when it exists, for a bounded time.
if grep -q '^fuzz:' "$top/build/lib/Makefile" 2>/dev/null; then
  echo "=== fuzzing (make fuzz, ${FUZZ_SECONDS:-60} s)"
  if make -C "$top/build/lib" fuzz FUZZ_SECONDS="${FUZZ_SECONDS:-60}" >"$top/build/fuzz.out" 2>&1; then
    passed=$((passed + 1)); tail -3 "$top/build/fuzz.out"
  else
    failed=$((failed + 1)); status=1; tail -40 "$top/build/fuzz.out"
  fi
fi

echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] || status=1
exit $status
