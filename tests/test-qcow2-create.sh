#!/usr/bin/env bash
# Images created by the qcow2 library (qcow2_create), in the linear and
# compact layouts: qemu-img check accepts them empty and after random
# writes and qemu-img compare agrees with the reference; qemu can write
# to them too.  The linear layout's promise: after every cluster is
# written once in random order, guest and host order agree (qemu-img map
# shows one constant offset, qemu-img check 0% fragmented), while the
# compact layout fragments (so the check can fail).  Images qemu-img
# made get the linear layout at their first writable open (adopt.c).
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

  "$unit" shuffle $img s$n.raw $n $layout
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

# Images qemu-img made get the linear layout at their first writable
# open when they are empty (auto), or whatever they hold (linear); the
# layout survives a reopen (our header extension), and qemu writing to
# the image afterwards.  512-byte clusters with 64-bit refcounts make
# the open grow the refcount table first.
for spec in "cluster_size=65536 auto 64M" "compat=0.10,cluster_size=4096 auto 16M" \
            "cluster_size=512,refcount_bits=64 auto 8M" \
            "extended_l2=on,cluster_size=32768 auto 32M" \
            "cluster_size=65536 linear 64M"; do
  set -- $spec
  opts=$1 layout=$2 size=$3
  n=$((n + 1))
  img=q$n.qcow2
  "$QEMU_IMG" create -q -f qcow2 -o $opts $img $size
  if [ $layout = linear ]; then
    # Not empty: auto would leave it compact, linear lays it out anyway.
    "$QEMU_IO" -f qcow2 -c 'write -P 7 1M 64k' $img >/dev/null
    cp $img q$n-auto.qcow2
    "$unit" shuffle q$n-auto.qcow2 qa$n.raw $n auto
    [ "$(deltas q$n-auto.qcow2)" -gt 1 ] ||
      fail "q$n-auto.qcow2 ($opts): auto gave an image with data the linear layout"
  fi
  "$unit" shuffle $img qs$n.raw $n $layout
  check_clean $img "qemu-made, after a shuffled upload ($spec)"
  "$QEMU_IMG" compare -q -f qcow2 -F raw $img qs$n.raw ||
    fail "$img: differs from the reference after the shuffled upload ($spec)"
  # The cluster qemu wrote (linear case) stays where qemu put it.
  want=1
  [ $layout = auto ] || want=2
  d=$(deltas $img) f=$(fragmented $img)
  [ "$d" = $want ] ||
    fail "$img ($spec): $d different host-guest offsets, expected $want"
  [ $layout != auto ] || [ "$f" = 0.00 ] ||
    fail "$img ($spec): $f% fragmented, expected 0"
  # Apparent size: about the virtual size (the layout's offset is small).
  apparent=$(stat -c %s $img)
  [ "$apparent" -le $(( $("$QEMU_IMG" info --output=json $img |
       /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["virtual-size"])') + (4 << 20) )) ] ||
    fail "$img ($spec): apparent size $apparent, far past the virtual size"
  # Reopened (a second shuffle rewrites every cluster in place): still
  # one offset; then qemu writes and our layout is still there after.
  "$QEMU_IO" -f qcow2 -c 'discard 0 64k' $img >/dev/null
  "$unit" shuffle $img qs$n.raw $((n + 100)) auto
  check_clean $img "qemu-made, reopened ($spec)"
  [ "$(deltas $img)" = $want ] || fail "$img ($spec): layout lost at reopen"
  echo "ok: adopted $img ($spec)"
done
