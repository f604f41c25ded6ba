#!/usr/bin/env bash
# The qcow2 library alone (no nbdkit) over in-memory host I/O: see
# test-qcow2-unit.c.  Images are made here by qemu-img.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
unit=$abs_builddir/test-qcow2-unit
cd "$T"

{
  yes 'unit test text' | head -c 1M
  head -c 1M /dev/urandom
  head -c 512k /dev/zero
  head -c 300k /dev/urandom | base64 -w 0 | head -c 400k
} >src.raw
"$QEMU_IMG" convert -q -f raw -O qcow2 -o cluster_size=512 src.raw c512.qcow2
"$QEMU_IMG" convert -q -c -f raw -O qcow2 -o compression_type=zstd,cluster_size=4k \
  src.raw zstd.qcow2
"$QEMU_IMG" convert -q -c -f raw -O qcow2 -o extended_l2=on src.raw ext.qcow2
"$QEMU_IO" -f qcow2 -c 'write -P 7 1k 2k' -c 'write -z 100k 6k' ext.qcow2 >/dev/null
for img in c512 zstd ext; do
  "$QEMU_IMG" convert -f qcow2 -O raw $img.qcow2 $img.raw
  "$unit" $img.qcow2 $img.raw
  "$unit" $img.qcow2 $img.raw 1      # smallest L2 cache
done

# Snapshots after qemu rewrote the table into freed clusters (A
# deleted), before B's L2 tables and data; then after C is taken, when
# the table moves to the end.
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512 snap.qcow2 3M
"$QEMU_IO" -f qcow2 -c 'write -P 1 0 100k' snap.qcow2 >/dev/null
"$QEMU_IMG" snapshot -c A snap.qcow2
"$QEMU_IO" -f qcow2 -c 'write -P 2 1M 300k' -c 'write -z 50k 10k' snap.qcow2 >/dev/null
"$QEMU_IMG" snapshot -c B snap.qcow2
"$QEMU_IMG" snapshot -d A snap.qcow2
cp snap.qcow2 snap-del.qcow2
"$QEMU_IO" -f qcow2 -c 'write -P 3 2M 200k' snap.qcow2 >/dev/null
"$QEMU_IMG" snapshot -c C snap.qcow2
"$QEMU_IO" -f qcow2 -c 'write -P 4 90k 20k' snap.qcow2 >/dev/null
for img_snap in snap-del:B snap:B snap:C; do
  img=${img_snap%:*} s=${img_snap#*:}
  "$QEMU_IMG" convert -f qcow2 -l snapshot.name=$s -O raw $img.qcow2 $img-$s.raw
  "$unit" $img.qcow2 $img-$s.raw 0 $s
  "$unit" $img.qcow2 $img-$s.raw 1 $s
  "$QEMU_IMG" convert -f qcow2 -O raw $img.qcow2 $img.raw
  "$unit" $img.qcow2 $img.raw
done
