#!/usr/bin/env bash
# Group commit in the qcow2 library: 4 threads write their own clusters
# (sharing L2 tables and refcount blocks) and flush often over a
# recording hostio with slow flushes.  Flushes must share commits (fewer
# commits than flush calls), and 300 crash images per run must keep
# every thread's flushed data (see test_group in
# test-qcow2-write-unit.c) and pass qemu-img check with at most leaks.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
unit=$abs_builddir/test-qcow2-write-unit
cd "$T"

n=0
for opts in cluster_size=4k cluster_size=512,refcount_bits=64 \
            compat=0.10,cluster_size=1k; do
  n=$((n + 1))
  "$QEMU_IMG" create -q -f qcow2 -o $opts g$n.qcow2 512k
  mkdir g$n.d
  "$unit" group g$n.qcow2 g$n.d $n 300
  for f in g$n.d/crash-*.qcow2; do
    check_leaks_only $f "$opts"
  done
  [ "$(ls g$n.d | wc -l)" -eq 300 ] || fail "$opts: wrong number of crash images"
  rm -rf g$n.d
done
