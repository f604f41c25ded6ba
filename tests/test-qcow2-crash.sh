#!/usr/bin/env bash
# Power failures during writes, zeroes and discards through the qcow2
# library: a recording
# hostio logs every write and flush, and 2100 images a crash could have
# left (everything a completed flush made durable, any subset of later
# writes, torn at sectors) are built at random points of the log (see
# test_crash in test-qcow2-write-unit.c, which checks that each opens
# and keeps all flushed data).  qemu-img check must accept every one:
# leaks are allowed (exit 3), errors never.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
unit=$abs_builddir/test-qcow2-write-unit
cd "$T"

crash () # NAME SEED
{
  local name=$1 seed=$2 f rc n=0
  mkdir $name.d
  "$unit" crash $name.qcow2 $name.d $seed 300 300
  for f in $name.d/crash-*.qcow2; do
    check_leaks_only $f "crash image"
    n=$((n + 1))
  done
  [ $n -eq 300 ] || fail "$name: $n crash images, expected 300"
  rm -rf $name.d
}

# 512-byte clusters and 64-bit refcounts: refcount blocks are made and
# the table grows during the run.
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512,refcount_bits=64 rc64.qcow2 2M
crash rc64 1
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k,refcount_bits=1 rc1.qcow2 4M
crash rc1 2
"$QEMU_IMG" create -q -f qcow2 -o compat=0.10,cluster_size=1k v2.qcow2 3M
crash v2 3
# Compressed clusters: overwriting them frees clusters after commits.
head -c 2M /dev/urandom | base64 -w 0 | head -c 3M >text.raw
"$QEMU_IMG" convert -c -f raw -O qcow2 -o cluster_size=2k text.raw comp.qcow2
crash comp 4
# Extended L2 entries, with subclusters qemu wrote partly.
"$QEMU_IMG" create -q -f qcow2 -o extended_l2=on,cluster_size=16k extl2.qcow2 2M
"$QEMU_IO" -f qcow2 -c 'write -P 3 1k 2k' -c 'write -P 4 100k 300k' \
  -c 'write -z 50k 10k' extl2.qcow2 >/dev/null
crash extl2 7
# The linear layout of an image the library created.
"$unit" create lin.qcow2 $((2 << 20)) 10 16 linear
crash lin 5
# Internal snapshots: L2 tables copied for the active layer, shared
# data released.  The snapshot must read the same in every crash image.
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=1k snap.qcow2 2M
"$QEMU_IO" -f qcow2 -c 'write -P 7 0 1536k' snap.qcow2 >/dev/null
"$QEMU_IMG" snapshot -c s1 snap.qcow2
"$QEMU_IMG" convert -O raw snap.qcow2 s1.raw
mkdir snap.d
"$unit" crash snap.qcow2 snap.d 6 300 300
for f in snap.d/crash-*.qcow2; do
  check_leaks_only $f "crash image, snapshot"
done
for f in snap.d/crash-1[0-9].qcow2 snap.d/crash-299.qcow2; do
  "$QEMU_IMG" convert -l snapshot.name=s1 -O raw $f s1-crash.raw
  cmp -s s1.raw s1-crash.raw || fail "$f: the snapshot changed"
done
