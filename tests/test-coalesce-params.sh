#!/usr/bin/env bash
# coalesce: bad enum, boolean and range parameter values are refused at startup
# with the one-line message every component gives (common/
# parse-enum-param.h), naming the parameter; good ones are accepted.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require_filter_version
CO=$(filter_so coalesce)

# bad MESSAGE PARAM...: nbdkit must refuse to start with exactly this
# line and no other.
bad ()
{
  local msg=$1 out
  shift
  if out=$("$NBDKIT" -U - --filter="$CO" null 1M "$@" --run 'echo SERVED' 2>&1)
  then
    fail "accepted: $*"
  fi
  [ "$out" = "nbdkit: error: $msg" ] ||
    fail "for '$*': expected 'nbdkit: error: $msg', got '$out'"
}
good ()
{
  "$NBDKIT" -U - --filter="$CO" null 1M "$@" --run true ||
    fail "refused good parameters: $*"
}

bad 'coalesce-mode=bogus: expected writeback or writethrough' \
  coalesce-mode=bogus
bad 'coalesce-mode=: expected writeback or writethrough' coalesce-mode=
bad 'coalesce-mode=WRITEBACK: expected writeback or writethrough' \
  coalesce-mode=WRITEBACK
bad 'coalesce-mode=true: expected writeback or writethrough' \
  coalesce-mode=true
# nbdkit_parse_bool said "could not decipher boolean (maybe)".
bad 'coalesce-hugepages=maybe: expected true or false' coalesce-hugepages=maybe
bad 'coalesce-hugepages=: expected true or false' coalesce-hugepages=
bad 'coalesce-hugepages=2: expected true or false' coalesce-hugepages=2
bad 'coalesce-interleaved=yes: expected auto, direct or buffer' \
  coalesce-interleaved=yes
bad 'coalesce-interleaved=: expected auto, direct or buffer' coalesce-interleaved=
bad 'coalesce-order-wait=1001: must be between 0 and 1000' \
  coalesce-order-wait=1001

good coalesce-mode=writeback
good coalesce-order-wait=0
good coalesce-order-wait=1000
good coalesce-mode=writethrough
good coalesce-interleaved=direct
good coalesce-interleaved=auto
good coalesce-interleaved=buffer
for b in true false yes no on off 1 0 TRUE Off; do
  good coalesce-hugepages=$b
done
echo "PASS: coalesce enum and boolean parameters are checked"
