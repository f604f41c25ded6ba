#!/usr/bin/env bash
# qcow2 reads byte for byte like qemu, and maps like qemu, over a matrix
# of images that qemu-img/qemu-io make here and now: versions, cluster
# and refcount sizes, zero and discarded clusters, preallocation,
# deflate/zstd compression, extended L2, lazy refcounts with a dirty
# image, bitmaps.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/test-qcow2-functions.sh"
require qemu-img
require qemu-io
require nbdsh
ulimit -c 0
cd "$T"


n=0
# check IMG [PLUGIN-PARAMS...]: our export equals qemu's reading of IMG,
# and our extents agree with `qemu-img map`.
check ()
{
  local img=$1 srv
  shift
  n=$((n + 1))
  srv=m$n
  # readonly=true: a reading test (a dirty image is only refused for
  # writing), and the images stay as qemu made them.
  start_nbdkit $srv "$IMAGE_PLUGIN" file="$T/$img" readonly=true "$@"
  "$QEMU_IMG" compare -q -f qcow2 -F raw "$T/$img" "$(uri $srv)" ||
    fail "$img: contents differ from qemu's reading"
  check_map "$T/$img" "$(uri $srv)"
  stop_async $srv
  echo "ok: $img $*"
}

qio ()
{
  "$QEMU_IO" -f qcow2 "$@" >/dev/null
}

# A mix of every kind of cluster, with unaligned edges, on a 4 MiB disk.
pattern ()
{
  qio -c 'write -P 0x11 0 64k' \
      -c 'write -P 0x22 100k 3k' \
      -c 'write -z 512k 256k' \
      -c 'write -P 0x33 1M 512k' \
      -c 'write -z 1088k 64k' \
      -c 'write -z -u 1216k 64k' \
      -c 'discard 1344k 128k' \
      -c 'write -P 0x44 1536k 7k' \
      -c 'write -P 0x66 2047k 2k' \
      -c 'write -P 0x55 4091k 5k' "$1"
}

make_img () # NAME CREATE-OPTIONS
{
  "$QEMU_IMG" create -q -f qcow2 -o "$2" "$1" 4M
  pattern "$1"
}

# Versions and cluster sizes.
make_img v2-64k.qcow2 compat=0.10
make_img v2-512.qcow2 compat=0.10,cluster_size=512
for cs in 512 4k 64k 2M; do
  make_img v3-$cs.qcow2 cluster_size=$cs
done
# Refcount widths (only metadata changes, but the layout moves).
for rb in 1 8 64; do
  make_img rc$rb.qcow2 cluster_size=4k,refcount_bits=$rb
done
# Preallocation: allocated clusters that were never written.
for p in metadata falloc full; do
  make_img prealloc-$p.qcow2 preallocation=$p
done
make_img prealloc-v2.qcow2 compat=0.10,preallocation=metadata
# Extended L2: 32 subclusters per cluster, unaligned writes.
make_img extl2-64k.qcow2 extended_l2=on
make_img extl2-32k.qcow2 extended_l2=on,cluster_size=32k
make_img extl2-2M.qcow2 extended_l2=on,cluster_size=2M
make_img extl2-prealloc.qcow2 extended_l2=on,preallocation=metadata
qio -c 'write -z 2k 2k' -c 'write -z -u 64k 3k' -c 'write -P 0x77 70k 1k' \
    extl2-prealloc.qcow2

# Lazy refcounts, left dirty by a simulated crash.
make_img lazy.qcow2 lazy_refcounts=on
qio -c 'write -P 0x99 3M 64k' -c abort lazy.qcow2 2>/dev/null || :
"$QEMU_IMG" info lazy.qcow2 | grep -q 'corrupt: false' ||
  fail "lazy.qcow2: expected a clean-but-dirty image"
/usr/bin/python3 -c '
import struct, sys
f = open(sys.argv[1], "rb"); f.seek(72)
if not struct.unpack(">Q", f.read(8))[0] & 1:
    sys.exit("lazy.qcow2 is not dirty")' lazy.qcow2
# Bitmaps (ignored for reading).
make_img bitmaps.qcow2 cluster_size=64k
"$QEMU_IMG" bitmap --add bitmaps.qcow2 b0
"$QEMU_IMG" bitmap --add -g 128k bitmaps.qcow2 b1
qio -c 'write -P 0xaa 2M 64k' bitmaps.qcow2

# Compressed clusters: text compresses, random does not (qemu then
# stores it uncompressed), zeroes become holes.
{
  head -c 1M /dev/urandom
  yes 'compressible text for the qcow2 matrix' | head -c 1536k
  head -c 512k /dev/zero
  head -c 800k /dev/urandom | base64 -w 0 | head -c 1M
} >src.raw
for ct in zlib zstd; do
  for cs in 512 4k 2M; do
    "$QEMU_IMG" convert -q -c -f raw -O qcow2 \
      -o compression_type=$ct,cluster_size=$cs src.raw comp-$ct-$cs.qcow2
  done
  "$QEMU_IMG" convert -q -c -f raw -O qcow2 \
    -o compression_type=$ct,extended_l2=on src.raw comp-$ct-extl2.qcow2
  # Compressed clusters partly overwritten, zeroed and discarded.
  "$QEMU_IMG" convert -q -c -f raw -O qcow2 -o compression_type=$ct \
    src.raw comp-$ct-mixed.qcow2
  pattern comp-$ct-mixed.qcow2
  cp comp-$ct-extl2.qcow2 comp-$ct-extl2-mixed.qcow2
  pattern comp-$ct-extl2-mixed.qcow2
done

for img in *.qcow2; do
  check "$img"
done
# The same through a tiny L2 cache, so that tables are evicted and
# reloaded all the time.
check v3-512.qcow2 l2-cache-size=2k
check extl2-64k.qcow2 l2-cache-size=1
check comp-zstd-4k.qcow2 l2-cache-size=8k

# readonly=true serves qcow2 read-only (writing: test-qcow2-serve-*.sh).
start_nbdkit ro "$IMAGE_PLUGIN" file="$T/v3-64k.qcow2" readonly=true
nbdsh -u "$(uri ro)" -c '
assert h.is_read_only()
try:
    h.pwrite(b"x" * 512, 0)
    assert False, "write to a qcow2 export succeeded"
except nbd.Error as e:
    print("write refused: %s" % e)' || fail "the qcow2 export is not read-only"
# format=qcow2 on a raw file is refused.
head -c 1M /dev/zero >plain.raw
expect_error "error: $T/plain.raw: not a qcow2 image \\(bad magic\\)\$" \
  start_refused bad "$IMAGE_PLUGIN" file="$T/plain.raw" format=qcow2
echo "ok: read-only export, format=qcow2 refuses raw"
