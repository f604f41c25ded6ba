#!/usr/bin/env bash
# Writing through the qcow2 library (single-threaded write path, compact
# allocation): random writes of every size against a reference (see
# test_write in test-qcow2-write-unit.c), then qemu-img check must find
# no error and no leak, and qemu-img compare must find the image equal
# to the reference.  Images cover the cases a write meets: empty,
# 512-byte clusters with refcount widths 1 and 64 and a 2-table L2 cache
# (commits in the middle of requests), v2, compressed clusters (copied
# and freed), zero clusters plain and preallocated, a backing file, and
# preallocated metadata (overwrites in place).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
unit=$abs_builddir/test-qcow2-write-unit
cd "$T"

run () # NAME SEED OPS [L2-CACHE [BACKING]]
{
  local name=$1 rc=0
  shift
  "$unit" write $name.qcow2 $name.raw "$@"
  "$QEMU_IMG" check $name.qcow2 >check.out 2>&1 || rc=$?
  [ $rc -eq 0 ] || fail "$name: qemu-img check exit $rc: $(cat check.out)"
  "$QEMU_IMG" compare -q -f qcow2 -F raw $name.qcow2 $name.raw ||
    fail "$name: the image differs from the reference"
}

head -c 6M /dev/urandom >src.raw

"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k empty.qcow2 16M
run empty 1 300

"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512,refcount_bits=1 rc1.qcow2 8M
run rc1 2 300 1
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512,refcount_bits=64 rc64.qcow2 8M
run rc64 3 300 1

"$QEMU_IMG" create -q -f qcow2 -o compat=0.10,cluster_size=1k v2.qcow2 9M
run v2 4 300 2048

# Compressible (random data would be stored uncompressed), and large
# enough that some compressed clusters are left at the end.
head -c 12M /dev/urandom | base64 -w 0 | head -c 16M >text.raw
"$QEMU_IMG" convert -c -f raw -O qcow2 -o cluster_size=4k text.raw comp.qcow2
run comp 5 40
[ "$("$QEMU_IMG" check comp.qcow2 | sed -n 's/.* \([0-9.]*\)% compressed.*/\1/p')" != 0.00 ] ||
  fail "comp: no compressed cluster is left: the test no longer covers them"

"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k zero.qcow2 8M
"$QEMU_IO" -f qcow2 -c 'write -P 3 0 2M' -c 'write -z 100k 300k' \
  -c 'write -z -u 1M 100k' zero.qcow2 >/dev/null
run zero 6 300

"$QEMU_IMG" create -q -f qcow2 -b src.raw -F raw -o cluster_size=2k back.qcow2
run back 7 300 0 "$T/src.raw"

"$QEMU_IMG" create -q -f qcow2 -o cluster_size=64k,preallocation=metadata \
  prealloc.qcow2 7777777
size_before=$(stat -c %s prealloc.qcow2)
run prealloc 8 100
# Every cluster was preallocated: overwrites stay in place.
[ "$(stat -c %s prealloc.qcow2)" -le "$size_before" ] ||
  fail "prealloc: the file grew from $size_before to $(stat -c %s prealloc.qcow2)"

# Zero requests (keeping or releasing clusters, fast or not) and discards
# mixed with the writes: the same judges.  A v2 image over a backing
# file cannot mark clusters zero and must write zeroes instead.
wzero () # NAME SEED OPS [L2-CACHE [BACKING]]
{
  local name=$1 rc=0
  shift
  "$unit" wzero $name.qcow2 $name.raw "$@"
  "$QEMU_IMG" check $name.qcow2 >check.out 2>&1 || rc=$?
  [ $rc -eq 0 ] || fail "$name: qemu-img check exit $rc: $(head -20 check.out)"
  "$QEMU_IMG" compare -q -f qcow2 -F raw $name.qcow2 $name.raw ||
    fail "$name: the image differs from the reference"
}
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k z1.qcow2 16M
wzero z1 11 300
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512,refcount_bits=1 z2.qcow2 8M
wzero z2 12 300 1
"$QEMU_IMG" create -q -f qcow2 -o compat=0.10,cluster_size=1k z3.qcow2 9M
wzero z3 13 300 2048
"$QEMU_IMG" create -q -f qcow2 -b src.raw -F raw -o cluster_size=2k z4.qcow2
wzero z4 14 300 0 "$T/src.raw"
"$QEMU_IMG" create -q -f qcow2 -o compat=0.10,cluster_size=2k -b src.raw \
  -F raw z5.qcow2
wzero z5 15 300 0 "$T/src.raw"
"$QEMU_IMG" convert -c -f raw -O qcow2 -o cluster_size=4k text.raw z6.qcow2
wzero z6 16 100
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=64k,preallocation=metadata \
  z7.qcow2 7777777
wzero z7 17 200

# Internal snapshots: the active layer's L2 tables and data are shared
# with them until written.  Writes, zeroes and discards must leave every
# snapshot as it was, and qemu must still be able to delete one and find
# the image clean.
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k snap.qcow2 16M
"$QEMU_IO" -f qcow2 -c 'write -P 1 0 8M' -c 'write -z 9M 1M' snap.qcow2 >/dev/null
"$QEMU_IMG" snapshot -c s1 snap.qcow2
"$QEMU_IMG" convert -O raw snap.qcow2 s1.raw
"$QEMU_IO" -f qcow2 -c 'write -P 2 4M 8M' snap.qcow2 >/dev/null
"$QEMU_IMG" snapshot -c s2 snap.qcow2
"$QEMU_IMG" convert -O raw snap.qcow2 s2.raw
wzero snap 18 300
for s in s1 s2; do
  "$QEMU_IMG" convert -l snapshot.name=$s -O raw snap.qcow2 $s-after.raw
  cmp -s $s.raw $s-after.raw || fail "snapshot $s changed"
done
"$QEMU_IMG" snapshot -d s1 snap.qcow2
"$QEMU_IMG" check snap.qcow2 >check.out 2>&1 ||
  fail "not clean after qemu deleted a snapshot: $(cat check.out)"

# Extended L2 entries: subclusters qemu wrote partly (allocated, zero,
# unallocated over a backing file) are filled in place before the entry
# says the whole cluster is data; zeroes set the bitmap's zero bits.
"$QEMU_IMG" create -q -f qcow2 -o extended_l2=on,cluster_size=64k x1.qcow2 16M
wzero x1 21 300
"$QEMU_IMG" create -q -f qcow2 -o extended_l2=on,cluster_size=16k x2.qcow2 8M
"$QEMU_IO" -f qcow2 -c 'write -P 3 1k 2k' -c 'write -P 4 100k 300k' \
  -c 'write -z 50k 10k' -c 'write -z -u 600k 64k' x2.qcow2 >/dev/null
wzero x2 22 300 1
"$QEMU_IMG" create -q -f qcow2 -o extended_l2=on,cluster_size=32k -b src.raw \
  -F raw x3.qcow2
"$QEMU_IO" -f qcow2 -c 'write -P 5 3k 5k' -c 'write -P 6 70k 1k' x3.qcow2 >/dev/null
wzero x3 23 300 0 "$T/src.raw"
"$QEMU_IMG" convert -c -f raw -O qcow2 -o extended_l2=on,cluster_size=16k \
  text.raw x4.qcow2
wzero x4 24 100
