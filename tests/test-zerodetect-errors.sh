#!/usr/bin/env bash
# zerodetect: bad parameter values are refused at startup with one clear
# line naming the parameter; good ones are accepted.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require_filter_version
ZD=$(filter_so zerodetect)

# bad VALUE-REGEXP PARAM: nbdkit must refuse to start, printing exactly
# one line, which matches the regexp.
bad ()
{
  local pattern=$1 param=$2 out
  expect_error "^nbdkit: error: $pattern\$" \
    "$NBDKIT" -U - --filter="$ZD" null 1M "$param" --run true
  out=$("$NBDKIT" -U - --filter="$ZD" null 1M "$param" --run true 2>&1) || :
  [ "$(echo "$out" | wc -l)" -eq 1 ] || fail "$param: more than one line: $out"
}
good ()
{
  "$NBDKIT" -U - --filter="$ZD" null 1M "$@" --run true ||
    fail "refused good parameters: $*"
}

bad 'zerodetect=foo: expected on, unmap or off' zerodetect=foo
bad 'zerodetect=: expected on, unmap or off' zerodetect=
bad 'zerodetect=ON: expected on, unmap or off' zerodetect=ON
bad 'zerodetect-granularity=1000: must be 0 or a power of 2 between 512 and 64M' \
  zerodetect-granularity=1000
bad 'zerodetect-granularity=256: must be .*' zerodetect-granularity=256
bad 'zerodetect-granularity=128M: must be .*' zerodetect-granularity=128M
bad 'zerodetect-granularity=1E: must be .*' zerodetect-granularity=1E
bad 'zerodetect-granularity=abc: expected a size such as .*' zerodetect-granularity=abc
bad 'zerodetect-granularity=-1: expected a size .*' zerodetect-granularity=-1
bad 'zerodetect-granularity=64KB: expected a size .*' zerodetect-granularity=64KB
bad 'zerodetect-granularity=: expected a size .*' zerodetect-granularity=

good zerodetect=on
good zerodetect=unmap
good zerodetect=off
good zerodetect-granularity=0
good zerodetect-granularity=512
good zerodetect-granularity=4k
good zerodetect-granularity=64M zerodetect=unmap
echo "PASS: zerodetect parameters are checked"
