#!/usr/bin/env bash
# Power failures during writes, zeroes and discards through the qcow2
# library, on images of every refcount width, version 2 and compressed
# clusters (extended L2 entries, the library's own layout and internal
# snapshots: test-qcow2-crash-layouts.sh).  See crash_images in
# test-qcow2-functions.sh: qemu-img check must accept every image a
# crash could have left, and each keeps all flushed data.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/test-qcow2-functions.sh"
require qemu-img
cd "$T"

# 512-byte clusters and 64-bit refcounts: refcount blocks are made and
# the table grows during the run.
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512,refcount_bits=64 rc64.qcow2 2M
crash_images rc64 1
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k,refcount_bits=1 rc1.qcow2 4M
crash_images rc1 2
"$QEMU_IMG" create -q -f qcow2 -o compat=0.10,cluster_size=1k v2.qcow2 3M
crash_images v2 3
# Compressed clusters: overwriting them frees clusters after commits.
head -c 2M /dev/urandom | base64 -w 0 | head -c 3M >text.raw
"$QEMU_IMG" convert -c -f raw -O qcow2 -o cluster_size=2k text.raw comp.qcow2
crash_images comp 4
