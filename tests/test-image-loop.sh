#!/usr/bin/env bash
# image plugin, raw, on a block device (a loop device): size and sector
# from the ioctls, zero and trim of ranges that are not sector-aligned
# (nbdkit's file plugin fails those), FAST_ZERO, and differential random
# operations in both cache modes, checked against the backing file.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require losetup
[ -x "$RANDOPS" ] || fail "$RANDOPS not built"
RMW="$abs_builddir/test-image-rmw"
require_loop_devices

img=$T/backing.img
size=$((32 * 1024 * 1024))
truncate -s $size "$img"
dd if=/dev/urandom of="$img" bs=1M count=4 seek=2 conv=notrunc status=none
dev=$(losetup -f --show "$img") || fail "losetup failed"
# Servers first, then the device (hooks run last-registered first).
on_exit "losetup -d '$dev'"
on_exit stop_all_servers

start_nbdkit blk "$IMAGE_PLUGIN" file="$dev"
nbdinfo "$(uri blk)" >"$T/info"
grep -q "export-size: $size " "$T/info" || fail "size: $(cat "$T/info")"
grep -q "block_size_minimum: 1$" "$T/info" || fail "minimum: $(cat "$T/info")"

nbdsh -u "$(uri blk)" -c '
import os, errno
M = 1 << 20
assert h.can_zero() and h.can_trim() and h.can_fast_zero() and h.can_fua()
data = os.urandom(4 * M)
h.pwrite(data, 8 * M)
# Unaligned zero: partial sectors written, the middle by ioctl.
h.zero(M + 1001, 8 * M + 777)
assert h.pread(777, 8 * M) == data[:777]
assert h.pread(M + 1001, 8 * M + 777) == bytes(M + 1001)
assert h.pread(4 * M - 777 - M - 1001, 9 * M + 1778) == data[777 + M + 1001:]
# The same with NO_HOLE and FUA.
h.zero(333, 10 * M + 100, nbd.CMD_FLAG_NO_HOLE | nbd.CMD_FLAG_FUA)
assert h.pread(333, 10 * M + 100) == bytes(333)
# Unaligned trim succeeds (partial sectors are left alone).
h.trim(M + 1234, 11 * M + 99)
assert h.pread(99, 11 * M) == data[3 * M:3 * M + 99]
# FAST_ZERO: the loop device zeroes natively, so it succeeds, unaligned too.
h.zero(M, 16 * M, nbd.CMD_FLAG_FAST_ZERO)
h.zero(M - 5, 18 * M + 3, nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE)
h.flush()
'

# Differential, unaligned, 2 connections; then the backing file must
# hold what randops verified (its final flush reaches the loop device).
"$RANDOPS" -c 2 --interleave -n 1000 -s 21 --dump="$T/blk.dump" "$(uri blk)"
cmp "$T/blk.dump" "$img" || fail "writeback: backing file differs"

# cache=none: O_DIRECT on the device, sector-aligned requests (the
# direct path; unaligned ones from strict clients: test-image-strict.sh),
# then concurrent sub-sector writes (read-modify-write) on a 2M window.
start_nbdkit dio "$IMAGE_PLUGIN" file="$dev" cache=none
grep -q "block_size_minimum: 1$" <(nbdinfo "$(uri dio)") ||
  fail "cache=none: minimum block size is not 1"
"$RANDOPS" -c 2 --interleave -n 1000 -s 22 --align=512 --dump="$T/dio.dump" "$(uri dio)"
cmp "$T/dio.dump" "$img" || fail "cache=none: backing file differs"
"$RMW" "$(uri dio)" 4 2 "$T/rmw.dump" $((2 * 1024 * 1024))
cmp "$T/rmw.dump" "$img" || fail "cache=none rmw: backing file differs"

# Only the slow zero path on a device: ioctls treated as refused.
start_nbdkit slow -D image.slowzero=1 "$IMAGE_PLUGIN" file="$dev"
"$RANDOPS" -n 600 -s 23 --dump="$T/slow.dump" "$(uri slow)" >"$T/slow.out"
cat "$T/slow.out"
grep -Eq '\(([1-9][0-9]*) fast refused\)' "$T/slow.out" ||
  fail "slowzero: no FAST_ZERO was refused"
cmp "$T/slow.dump" "$img" || fail "slowzero: backing file differs"
