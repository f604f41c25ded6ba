#!/usr/bin/env bash
# discard: bad parameter values are refused at startup with one clear
# line naming the parameter; good ones are accepted.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require_filter_version
DF=$(filter_so discard)

# bad REGEXP PARAM...: nbdkit must refuse to start, printing exactly one
# line, which matches the regexp.
bad ()
{
  local pattern=$1 out
  shift
  expect_error "^nbdkit: error: $pattern\$" \
    "$NBDKIT" -U - --filter="$DF" null 1M "$@" --run true
  out=$("$NBDKIT" -U - --filter="$DF" null 1M "$@" --run true 2>&1) || :
  [ "$(echo "$out" | wc -l)" -eq 1 ] || fail "$*: more than one line: $out"
}
good ()
{
  "$NBDKIT" -U - --filter="$DF" null 1M "$@" --run true ||
    fail "refused good parameters: $*"
}

bad 'discard=foo: expected pass, ignore, zero or refuse' discard=foo
bad 'discard=: expected pass, ignore, zero or refuse' discard=
bad 'discard-zero-trim=x: expected keep, never or always' discard-zero-trim=x
bad 'discard-granularity=3000: must be 0 or a power of 2 between 512 and 1G' \
  discard-granularity=3000
bad 'discard-granularity=256: must be .*' discard-granularity=256
bad 'discard-granularity=2G: must be .*' discard-granularity=2G
bad 'discard-granularity=x: expected a size such as .*' discard-granularity=x
bad 'discard-max=100: must be 0 \(no limit\) or at least 512' discard-max=100
bad 'discard-max=-5: expected a size .*' discard-max=-5
bad 'discard-max=98304 must be a multiple of discard-granularity=65536' \
  discard-max=96K discard-granularity=64K

for m in pass ignore zero refuse; do good discard=$m; done
for z in keep never always; do good discard-zero-trim=$z; done
good discard-granularity=0 discard-max=0
good discard-granularity=4K discard-max=1M
good discard-max=1000
good discard-granularity=1G discard-max=4G
echo "PASS: discard parameters are checked"
