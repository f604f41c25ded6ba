#!/usr/bin/env bash
# Refcounts written by the qcow2 library, judged by qemu-img check, at
# widths 1, 16 and 64 bits with 512-byte clusters (many refcount blocks,
# and a table that must grow): the library claims clusters and sets
# counts without referencing them, so check must report exactly those
# clusters as leaked with exactly those counts, and nothing else; after
# qemu repairs the leaks the image is clean and its data unchanged.
# See test_refcount in test-qcow2-write-unit.c.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
unit=$abs_builddir/test-qcow2-write-unit
cd "$T"

for bits in 1 16 64; do
  img=rc$bits.qcow2
  "$QEMU_IMG" create -q -f qcow2 -o cluster_size=512,refcount_bits=$bits $img 64M
  "$QEMU_IO" -f qcow2 -c 'write -P 1 0 100k' -c 'write -P 2 10M 64k' $img >/dev/null
  "$QEMU_IMG" convert -f qcow2 -O raw $img before.raw
  "$unit" refcount $img expected.list

  rc=0
  "$QEMU_IMG" check $img >check.out 2>&1 || rc=$?
  [ $rc -eq 3 ] || fail "width $bits: qemu-img check exit $rc, expected 3 (leaks only): $(cat check.out)"
  ! grep -q ERROR check.out || fail "width $bits: qemu-img check found errors: $(cat check.out)"
  sed -n 's/^Leaked cluster \([0-9]*\) refcount=\([0-9]*\) reference=0$/\1 \2/p' \
    check.out | sort >leaked.list
  sort expected.list >expected.sorted
  [ "$(wc -l <expected.sorted)" -ge 7 ] || fail "width $bits: too few clusters claimed"
  cmp -s leaked.list expected.sorted ||
    fail "width $bits: qemu-img check's leaks differ from what was claimed:
$(diff expected.sorted leaked.list)"

  "$QEMU_IMG" check -q -r leaks $img >/dev/null 2>&1 || true
  "$QEMU_IMG" check $img >check.out 2>&1 ||
    fail "width $bits: not clean after repairing the leaks: $(cat check.out)"
  "$QEMU_IMG" compare -q -f qcow2 -F raw $img before.raw ||
    fail "width $bits: the image's data changed"
done
