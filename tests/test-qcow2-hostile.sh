#!/usr/bin/env bash
# Hand-made hostile images: each table or offset the image declares is
# bent out of shape, and we must answer with the exact error (at
# start-up, or as an I/O error for the one read that hits it) and never
# crash, hang or read outside the file.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/test-qcow2-functions.sh"
require qemu-img
require qemu-io
require nbdsh
cd "$T"

n=0

# read_fails IMG OFFSET 'MESSAGE' [PARAMS...]: the server starts,
# a read at OFFSET fails with EIO and the log has IMG: MESSAGE; the
# server survives and still serves a good area (the last 64 KiB).
read_fails ()
{
  local img=$1 off=$2 msg=$3 srv pid
  shift 3
  n=$((n + 1))
  srv=h$n
  start_fg $srv "$IMAGE_PLUGIN" file="$T/$img" "$@"
  pid=$(pidof_srv $srv)
  expect_error 'Input/output error|EIO' \
    nbdsh -u "$(uri $srv)" -c "h.pread(4096, $off)"
  grep -Eq "error: $T/$img: $msg\$" "$(logfile $srv)" ||
    fail "$img: expected '$msg' in the log: $(cat "$(logfile $srv)")"
  nbdsh -u "$(uri $srv)" -c '
buf = h.pread(65536, h.get_size() - 65536)
assert buf == b"\x77" * 65536' ||
    fail "$img: the server no longer serves good data"
  kill -0 "$pid" || fail "$img: the server died"
  stop_async $srv
  echo "ok: $img read fails: $msg"
}

# A valid image: data at 0, 64 KiB of 0x77 at the end.
"$QEMU_IMG" create -q -f qcow2 good.qcow2 1G
"$QEMU_IO" -f qcow2 -c 'write -P 0x11 0 64k' -c 'write -P 0x77 1048512k 64k' \
  good.qcow2 >/dev/null
mk () { cp good.qcow2 "$1"; shift; patch "$@"; }

# ---- refused at start-up ----
mk l1-huge.qcow2 l1-huge.qcow2 field 36 I 0x10000000
refused l1-huge.qcow2 \
  'L1 table is too large \(268435456 entries, limit 33554432 bytes\)'
mk l1-eof.qcow2 l1-eof.qcow2 field 40 Q 0x100000000
refused l1-eof.qcow2 'L1 table at 0x100000000 \(16 bytes\) extends beyond the end of the file \([0-9]+ bytes\)'
mk l1-unaligned.qcow2 l1-unaligned.qcow2 field 40 Q 'l1 + 8'
refused l1-unaligned.qcow2 \
  'L1 table offset 0x[0-9a-f]+ is not aligned to a cluster'
mk l1-header.qcow2 l1-header.qcow2 field 40 Q 0
refused l1-header.qcow2 'L1 table at 0 overlaps the header'
mk l1-small.qcow2 l1-small.qcow2 field 36 I 0
refused l1-small.qcow2 \
  'L1 table is too small \(0 entries for a disk needing 2\)'
mk rt-huge.qcow2 rt-huge.qcow2 field 56 I 0xffffffff
refused rt-huge.qcow2 \
  'refcount table is too large \(4294967295 entries, limit 8388608 bytes\)'
mk rt-none.qcow2 rt-none.qcow2 field 56 I 0
refused rt-none.qcow2 'image has no refcount table'
mk rt-eof.qcow2 rt-eof.qcow2 field 48 Q '1 << 50'
refused rt-eof.qcow2 'refcount table at 0x4000000000000 \(65536 bytes\) extends beyond the end of the file \([0-9]+ bytes\)'
mk snap-huge.qcow2 snap-huge.qcow2 field 60 I 0x7fffffff
refused snap-huge.qcow2 'too many snapshots \(2147483647\)'
mk snap-eof.qcow2 snap-eof.qcow2 field 60 I 1000
patch snap-eof.qcow2 field 64 Q 'eof - eof % cs'
refused snap-eof.qcow2 'snapshot table at 0x[0-9a-f]+ \(40000 bytes\) extends beyond the end of the file \([0-9]+ bytes\)'
mk size-huge.qcow2 size-huge.qcow2 field 24 Q '1 << 63'
refused size-huge.qcow2 'virtual size 9223372036854775808 is too large'
mk ext-len.qcow2 ext-len.qcow2 ext 0x12345678 0xffffffff
refused ext-len.qcow2 \
  'header extension 0x12345678 is too large \(4294967295 bytes\)'
mk ext-bitmaps.qcow2 ext-bitmaps.qcow2 ext 0x23852875 16
refused ext-bitmaps.qcow2 'bitmaps extension has length 16, expected 24'
mk backing-off.qcow2 backing-off.qcow2 field 8 Q 0x7fffffffffff
patch backing-off.qcow2 field 16 I 10
refused backing-off.qcow2 'invalid backing file name offset 0x7fffffffffff'
mk hdrlen.qcow2 hdrlen.qcow2 field 100 I 0xfffffff8
refused hdrlen.qcow2 'invalid header length 4294967288'

# ---- snapshot tables ----
# The table is walked entry by entry at open (as qemu does) to learn its
# size, so a bad entry refuses the image even when no snapshot is served.
# qemu writes the table last here, and does not pad the file after it.
cp good.qcow2 good-nosnap.qcow2
"$QEMU_IMG" snapshot -c s1 good.qcow2
mk snap-extra.qcow2 snap-extra.qcow2 snap 0 36 I 1025
refused snap-extra.qcow2 'snapshot 0 has too much extra data \(1025 bytes\)'
mk snap-trunc.qcow2 snap-trunc.qcow2 snap 0 14 H 0xffff
refused snap-trunc.qcow2 'snapshot table is truncated'
mk snap-64m.qcow2 snap-64m.qcow2 snaphuge
refused snap-64m.qcow2 \
  'snapshot table is too large \(more than 67108864 bytes\)'
mk snap-l1-eof.qcow2 snap-l1-eof.qcow2 snap 0 0 Q '1 << 40'
refused snap-l1-eof.qcow2 'snapshot L1 table at 0x10000000000 \(16 bytes\) extends beyond the end of the file \([0-9]+ bytes\)' snapshot=s1
refused snap-l1-eof.qcow2 "snapshot 'nope' not found" snapshot=nope
# Sized from its entries, the table is still metadata.
mk snap-data.qcow2 snap-data.qcow2 l2 0 'snaptab'
read_fails snap-data.qcow2 0 \
  'data cluster offset 0x[0-9a-f]+ overlaps metadata \(guest offset 0\)'
mv good-nosnap.qcow2 good.qcow2

# ---- refused on the read that meets them ----
mk l2-unaligned.qcow2 l2-unaligned.qcow2 l1 0 '(l2 + 512) | 1 << 63'
read_fails l2-unaligned.qcow2 0 \
  'L2 table offset 0x[0-9a-f]+ is not aligned \(L1 index 0\)'
mk l2-eof.qcow2 l2-eof.qcow2 l1 0 '0x1000000000'
read_fails l2-eof.qcow2 0 'L2 table offset 0x1000000000 is beyond the end of the file \(L1 index 0\)'
mk l2-on-l1.qcow2 l2-on-l1.qcow2 l1 0 l1
# Writable, an L1 entry naming another table is refused at open
# (test-qcow2-overlap.sh has more); read-only, the read meeting it fails.
refused l2-on-l1.qcow2 'refusing to write this image: the active L2 table at 0x[0-9a-f]+ would overlap the active L1 table there \(the image is corrupt: check it with qemu-img check\)'
read_fails l2-on-l1.qcow2 0 \
  'L2 table offset 0x[0-9a-f]+ overlaps metadata \(L1 index 0\)' readonly=true
mk data-eof.qcow2 data-eof.qcow2 l2 0 '0x100000000 | 1 << 63'
read_fails data-eof.qcow2 0 'data cluster offset 0x100000000 is beyond the end of the file \(guest offset 0\)'
mk data-reftable.qcow2 data-reftable.qcow2 l2 1 'reftable'
read_fails data-reftable.qcow2 65536 \
  'data cluster offset 0x[0-9a-f]+ overlaps metadata \(guest offset 0x10000\)'
mk data-l1.qcow2 data-l1.qcow2 l2 0 'l1'
read_fails data-l1.qcow2 0 \
  'data cluster offset 0x[0-9a-f]+ overlaps metadata \(guest offset 0\)'
mk data-unaligned.qcow2 data-unaligned.qcow2 l2 0 'data + 512'
read_fails data-unaligned.qcow2 0 \
  'data cluster offset 0x[0-9a-f]+ is not aligned \(guest offset 0\)'
mk comp-header.qcow2 comp-header.qcow2 l2 0 '1 << 62 | 100'
read_fails comp-header.qcow2 0 \
  'compressed cluster offset 0x64 is outside the image data'
mk comp-eof.qcow2 comp-eof.qcow2 l2 0 '1 << 62 | (eof + 4096)'
read_fails comp-eof.qcow2 0 \
  'compressed cluster offset 0x[0-9a-f]+ is outside the image data'
# Compressed descriptor over plain data: not a deflate stream.
mk comp-garbage.qcow2 comp-garbage.qcow2 l2 0 '1 << 62 | 127 << 54 | data'
read_fails comp-garbage.qcow2 0 'cannot decompress the deflate cluster at 0x[0-9a-f]+ \([0-9]+ bytes\)'

# Extended L2: a subcluster both allocated and zero is invalid.
"$QEMU_IMG" create -q -f qcow2 -o extended_l2=on good.qcow2 1G
"$QEMU_IO" -f qcow2 -c 'write -P 0x11 0 64k' -c 'write -P 0x77 1048512k 64k' \
  good.qcow2 >/dev/null
mk extl2-bitmap.qcow2 extl2-bitmap.qcow2 l2bitmap 0 '0x0000000100000001'
read_fails extl2-bitmap.qcow2 0 'invalid L2 entry 0x[0-9a-f]+ bitmap 0x100000001 \(guest offset 0\)'
mk extl2-unalloc.qcow2 extl2-unalloc.qcow2 l2 0 0
read_fails extl2-unalloc.qcow2 0 'invalid L2 entry 0 bitmap 0xffffffff \(guest offset 0\)'
