#!/usr/bin/env bash
# I/O errors while writing through the qcow2 library: the Nth write,
# zero or flush of the file fails (EIO), for 100 values of N spread over
# a run of random writes, zeroes and flushes (see test_fault in
# test-qcow2-write-unit.c).  The failing request fails, the image then
# refuses every request, closing does not crash, and the file keeps all
# data the last successful flush made durable.  qemu-img check must
# accept every file with at most leaks.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
unit=$abs_builddir/test-qcow2-write-unit
cd "$T"

n=0
for opts in cluster_size=512,refcount_bits=16 cluster_size=4k,refcount_bits=64 \
            compat=0.10,cluster_size=1k extended_l2=on,cluster_size=16k; do
  n=$((n + 1))
  "$QEMU_IMG" create -q -f qcow2 -o $opts f$n.qcow2 1M
  mkdir f$n.d
  "$unit" fault f$n.qcow2 f$n.d $n 100 | tee fault.out
  # The open gives the empty image the linear layout: every call it
  # makes is a failure point too.
  points=$(sed -n 's/.*calls (\([0-9]*\) at open), \([0-9]*\) failure points/\2/p' fault.out)
  open_points=$(sed -n 's/.*calls (\([0-9]*\) at open).*/\1/p' fault.out)
  [ "${open_points:-0}" -gt 0 ] || fail "$opts: the open made no calls (no layout?)"
  for f in f$n.d/fault-*.qcow2; do
    check_leaks_only $f "$opts"
  done
  [ "$(ls f$n.d | wc -l)" -eq $((points + 1)) ] ||
    fail "$opts: wrong number of files"
done
