#!/usr/bin/env bash
# image plugin, raw: FAST_ZERO.  Where the kernel can zero quickly
# (ext4 here) fast zeroes succeed, punch a hole only with MAY_TRIM and
# keep the allocation without it.  Where only writing zeroes is left
# (simulated with -D image.slowzero=1) a FAST_ZERO request fails at once
# with ENOTSUP and changes nothing, and ordinary zeroes still work.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
[ -x "$RANDOPS" ] || fail "$RANDOPS not built"

PY='
import os, errno
M = 1 << 20
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
def blocks():
    h.flush()
    return os.stat(IMG).st_blocks * 512
def fill():
    h.pwrite(os.urandom(4 * M), 0)
'

for cache in writeback none; do
  img=$T/$cache.img
  truncate -s 8M "$img"
  start_nbdkit fast-$cache "$IMAGE_PLUGIN" file="$img" cache=$cache
  nbdsh -u "$(uri fast-$cache)" -c "IMG='$img'" -c "$PY" -c '
assert h.can_fast_zero() and h.can_zero()
fill()
b0 = blocks()
# No MAY_TRIM: zeroed, still allocated.
h.zero(M, M, nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE)
assert h.pread(M, M) == bytes(M)
b1 = blocks()
assert b1 >= b0 - 64 * 1024, ("NO_HOLE zero deallocated", b0, b1)
# MAY_TRIM: zeroed and deallocated.
h.zero(M, M, nbd.CMD_FLAG_FAST_ZERO)
assert h.pread(M, M) == bytes(M)
b2 = blocks()
assert b2 <= b1 - M + 64 * 1024, ("MAY_TRIM zero kept the blocks", b1, b2)
# Unaligned edges (partial sectors with cache=none) around a fast middle.
h.pwrite(b"\xee" * 20000, 3 * M - 10000)
h.zero(10000, 3 * M - 5000, nbd.CMD_FLAG_FAST_ZERO)
got = h.pread(20000, 3 * M - 10000)
assert got == b"\xee" * 5000 + bytes(10000) + b"\xee" * 5000, "unaligned fast zero"
'
done

# Only the slow path: FAST_ZERO refused, ordinary zero emulated.
for cache in writeback none; do
  img=$T/slow-$cache.img
  truncate -s 8M "$img"
  start_nbdkit slow-$cache -D image.slowzero=1 "$IMAGE_PLUGIN" file="$img" cache=$cache
  nbdsh -u "$(uri slow-$cache)" -c "IMG='$img'" -c "$PY" -c '
assert h.can_fast_zero()
fill()
before = h.pread(4 * M, 0)
for flags in (nbd.CMD_FLAG_FAST_ZERO, nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE):
    for off, n in ((M, M), (M + 7, M - 100)):
        try:
            h.zero(n, off, flags)
        except nbd.Error as e:
            assert e.errnum == errno.ENOTSUP, e
        else:
            raise AssertionError("FAST_ZERO succeeded with only the slow path")
assert h.pread(4 * M, 0) == before, "a refused FAST_ZERO changed data"
h.zero(M, M)
h.zero(2 * M + 5, M - 3, nbd.CMD_FLAG_NO_HOLE)
h.trim(M, 0)
assert h.pread(2 * M + 5, M - 3) == bytes(2 * M + 5)
assert h.pread(M - 3, 0) == before[:M - 3]
'
  # And differentially: randops counts the refusals and checks the rest.
  "$RANDOPS" -n 600 -s 5 $([ $cache = none ] && echo --align=512) \
    "$(uri slow-$cache)" >"$T/slow-$cache.out"
  cat "$T/slow-$cache.out"
  grep -Eq '\(([1-9][0-9]*) fast refused\)' "$T/slow-$cache.out" ||
    fail "slow-$cache: randops saw no FAST_ZERO refusal"
done
