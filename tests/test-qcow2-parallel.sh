#!/usr/bin/env bash
# Many readers at once: nbdcopy (4 connections, many requests in flight,
# small requests) over images whose reads all go through shared state:
# a tiny L2 cache (constant eviction, readers finding every slot busy)
# and compressed clusters (per-thread decompression buffers).  The copy
# must equal qemu's reading.  In the sanitizer build this also checks the
# shared paths for memory errors under concurrency.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/test-qcow2-functions.sh"
require qemu-img
require nbdcopy
cd "$T"

{
  yes 'parallel readers of one qcow2 image' | head -c 3M
  head -c 2M /dev/urandom
  head -c 1M /dev/zero
  head -c 1500k /dev/urandom | base64 -w 0 | head -c 2M
} >src.raw
"$QEMU_IMG" convert -q -c -f raw -O qcow2 -o cluster_size=4k,compression_type=zstd \
  src.raw zstd.qcow2
"$QEMU_IMG" convert -q -c -f raw -O qcow2 -o extended_l2=on,cluster_size=16k \
  src.raw deflate-extl2.qcow2
"$QEMU_IMG" convert -q -f raw -O qcow2 -o cluster_size=512 src.raw small.qcow2

n=0
for img in zstd.qcow2 deflate-extl2.qcow2 small.qcow2; do
  for cache in 1 64k; do
    n=$((n + 1))
    start_nbdkit p$n "$IMAGE_PLUGIN" file="$T/$img" l2-cache-size=$cache
    rm -f out.raw
    nbdcopy --connections=4 --requests=32 --request-size=8192 \
      "$(uri p$n)" out.raw
    cmp src.raw out.raw || fail "$img l2-cache-size=$cache: copy differs"
    stop_async p$n
    echo "ok: $img l2-cache-size=$cache"
  done
done
