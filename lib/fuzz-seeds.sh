#!/usr/bin/env bash
# Make the fuzzer's seed corpus: small qcow2 images covering the format's
# features, written by qemu-img/qemu-io (the reference implementation).
#   fuzz-seeds.sh DIR
# SPDX-License-Identifier: BSD-3-Clause
set -eu   # no pipefail: "head" closing a pipe is expected
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
dir=$1
mkdir -p "$dir"
cd "$dir"

io () { qemu-io -f qcow2 "$@" >/dev/null; }

img () # NAME SIZE OPTIONS
{
  qemu-img create -q -f qcow2 -o "$3" "$1" "$2"
  io -c 'write -P 0x11 0 1k' -c 'write -P 0x22 3k 2k' \
     -c 'write -z 8k 4k' -c 'write -P 0x33 20k 1k' "$1"
}

img v2-512.qcow2 64k compat=0.10,cluster_size=512
img v3-512.qcow2 64k cluster_size=512
img v3-1k-rc1.qcow2 64k cluster_size=1k,refcount_bits=1
img v3-4k-rc64.qcow2 128k cluster_size=4k,refcount_bits=64
img v3-16k-extl2.qcow2 256k cluster_size=16k,extended_l2=on
img v3-4k-lazy.qcow2 64k cluster_size=4k,lazy_refcounts=on
qemu-img create -q -f qcow2 -o cluster_size=512,preallocation=metadata \
  prealloc.qcow2 16k

# Compressed clusters, both algorithms, and with extended L2.
head -c 65536 /dev/urandom | base64 | head -c 65536 >plain.raw
for c in zlib zstd; do
  qemu-img convert -q -c -f raw -O qcow2 \
    -o cluster_size=1k,compression_type=$c plain.raw comp-$c.qcow2
done
qemu-img convert -q -c -f raw -O qcow2 \
  -o cluster_size=16k,extended_l2=on,compression_type=zstd \
  plain.raw comp-extl2.qcow2
rm -f plain.raw

# An internal snapshot and a backing file name.
img snap.qcow2 32k cluster_size=512
qemu-img snapshot -c s1 snap.qcow2
io -c 'write -P 0x44 0 2k' snap.qcow2
# Snapshot 2 deleted: the table moves to freed clusters, and data
# written next lands after it.
img snapdel.qcow2 32k cluster_size=512
qemu-img snapshot -c s1 snapdel.qcow2
io -c 'write -P 0x46 4k 2k' snapdel.qcow2
qemu-img snapshot -c s2 snapdel.qcow2
qemu-img snapshot -d s2 snapdel.qcow2
io -c 'write -P 0x47 24k 4k' snapdel.qcow2
qemu-img create -q -f qcow2 -o cluster_size=512 \
  -b v3-512.qcow2 -F qcow2 overlay.qcow2
io -c 'write -P 0x55 1k 1k' overlay.qcow2
ls -l
