#!/usr/bin/env bash
# Images created by the qcow2 library (qcow2_create), in the linear and
# compact layouts: qemu-img check accepts them empty and after random
# writes and qemu-img compare agrees with the reference; qemu can write
# to them too.  The linear layout's promise: after every cluster is
# written once in random order, guest and host order agree (qemu-img map
# shows one constant offset, qemu-img check 0% fragmented), while the
# compact layout fragments (so the check can fail).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
unit=$abs_builddir/test-qcow2-write-unit
cd "$T"

check_clean () # IMAGE WHAT
{
  local rc=0
  "$QEMU_IMG" check "$1" >check.out 2>&1 || rc=$?
  [ $rc -eq 0 ] || fail "$1 ($2): qemu-img check exit $rc: $(cat check.out)"
}

# Distinct host-minus-guest offsets of the data extents.
deltas ()
{
  "$QEMU_IMG" map --output=json -f qcow2 "$1" |
    /usr/bin/python3 -c '
import json, sys
print(len({e["offset"] - e["start"] for e in json.load(sys.stdin) if e["data"]}))'
}

fragmented () { "$QEMU_IMG" check "$1" | sed -n 's/.*allocated, \([0-9.]*\)% fragmented.*/\1/p'; }

n=0
for geo in "16 16 linear $((64 << 20))" "9 64 linear $((4 << 20))" \
           "12 1 linear $((16 << 20))" "9 16 compact $((4 << 20))" \
           "16 16 compact $((64 << 20))"; do
  set -- $geo
  bits=$1 rbits=$2 layout=$3 size=$4
  n=$((n + 1))
  img=c$n.qcow2
  "$unit" create $img $size $bits $rbits $layout
  check_clean $img "empty, $geo"
  [ "$("$QEMU_IMG" info --output=json $img |
       /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["virtual-size"])')" = $size ] ||
    fail "$img: wrong virtual size"

  cp $img w$img
  "$unit" write w$img w$n.raw $n 200 1
  check_clean w$img "after random writes, $geo"
  "$QEMU_IMG" compare -q -f qcow2 -F raw w$img w$n.raw ||
    fail "w$img: differs from the reference ($geo)"
  "$QEMU_IO" -f qcow2 -c 'write -P 9 4k 8k' w$img >/dev/null
  check_clean w$img "after qemu wrote to it, $geo"

  "$unit" shuffle $img s$n.raw $n
  check_clean $img "after a shuffled upload, $geo"
  "$QEMU_IMG" compare -q -f qcow2 -F raw $img s$n.raw ||
    fail "$img: differs from the reference after the shuffled upload"
  d=$(deltas $img) f=$(fragmented $img)
  if [ $layout = linear ]; then
    [ "$d" = 1 ] || fail "$img ($geo): $d different host-guest offsets, expected 1"
    [ "$f" = 0.00 ] || fail "$img ($geo): $f% fragmented, expected 0"
  else
    [ "$d" -gt 1 ] || fail "$img ($geo): compact layout came out linear: the test would not see a broken linear one"
  fi
done
