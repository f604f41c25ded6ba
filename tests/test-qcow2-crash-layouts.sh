#!/usr/bin/env bash
# Power failures through the qcow2 library on images with extended L2
# entries, in the layout the library creates, and with an internal
# snapshot (refcounts and formats: test-qcow2-crash.sh).  See
# crash_images in test-qcow2-functions.sh.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/test-qcow2-functions.sh"
require qemu-img
unit=$abs_builddir/test-qcow2-write-unit
cd "$T"

# Extended L2 entries, with subclusters qemu wrote partly.
"$QEMU_IMG" create -q -f qcow2 -o extended_l2=on,cluster_size=16k extl2.qcow2 2M
"$QEMU_IO" -f qcow2 -c 'write -P 3 1k 2k' -c 'write -P 4 100k 300k' \
  -c 'write -z 50k 10k' extl2.qcow2 >/dev/null
crash_images extl2 7
# The linear layout of an image the library created.
"$unit" create lin.qcow2 $((2 << 20)) 10 16 linear
crash_images lin 5
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
