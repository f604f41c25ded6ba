#!/usr/bin/env bash
# Parallel requests in the qcow2 library (see lib/WRITING.md, "Locking"):
# 4 threads write, zero and discard, half of it in clusters they all
# share (different bytes of the same clusters), half in clusters of
# their own (freed and reallocated under load), and flush, over a
# recording hostio with slow writes and flushes, while 2 readers check
# that every byte they read is one some writer put there.  Then: a slow
# write must hold off a discard of its cluster (claims), a slow read
# must keep a freed cluster from reuse (the reuse barrier), 4 threads
# writing different clusters must take < 0.6 of one thread's time, and
# with the barrier switched off the slow read must notice.  The crash
# images must keep each thread's flushed data and pass qemu-img check
# with at most leaks (see test_parallel in test-qcow2-write-unit.c).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
unit=$abs_builddir/test-qcow2-write-unit
cd "$T"

n=0
for opts in cluster_size=4k cluster_size=512,refcount_bits=64 \
            compat=0.10,cluster_size=1k; do
  n=$((n + 1))
  "$QEMU_IMG" create -q -f qcow2 -o $opts p$n.qcow2 512k
  mkdir p$n.d
  "$unit" parallel p$n.qcow2 p$n.d $n 150
  for f in p$n.d/crash-*.qcow2; do
    check_leaks_only $f "$opts"
  done
  [ "$(ls p$n.d | wc -l)" -eq 150 ] || fail "$opts: wrong number of crash images"
  rm -rf p$n.d
  "$unit" barrier-off p$n.qcow2
done
