#!/usr/bin/env bash
# image plugin, raw: block status agrees with SEEK_DATA/SEEK_HOLE on the
# file, never reaches past the request, and every range reported as
# zero reads as zeroes.  Many request shapes, unaligned ones included,
# in both cache modes.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh

img=$T/disk.img
size=$((16 * 1024 * 1024))
truncate -s $size "$img"
# Data at the start, scattered extents of varied sizes, a written run of
# zeroes (allocated: data, yet reads as zero), data at the very end.
w () { dd if=/dev/urandom of="$img" bs=4096 seek="$1" count="$2" conv=notrunc status=none; }
w 0 1; w 10 3; w 256 1; w 300 64; w 1000 2; w 2047 1; w 4095 1
dd if=/dev/zero of="$img" bs=4096 seek=2000 count=16 conv=notrunc status=none

for cache in writeback none; do
  start_nbdkit "$cache" "$IMAGE_PLUGIN" file="$img" cache="$cache"
  IMG="$img" nbdsh --base-allocation -u "$(uri "$cache")" -c '
import os, random
# Unaligned requests on purpose, even where the export advises 512.
h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
fd = os.open(os.environ["IMG"], os.O_RDONLY)
size = h.get_size()
assert h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION)

def file_is_data(off):
    """Is off in a data extent of the file (per SEEK_DATA)?"""
    try:
        return os.lseek(fd, off, os.SEEK_DATA) == off
    except OSError:
        return False   # ENXIO: only holes after off

def next_data(off):
    try:
        return os.lseek(fd, off, os.SEEK_DATA)
    except OSError:
        return size

def check(off, count, flags=0):
    got = []
    def cb(ctx, o, entries, err):
        if ctx == nbd.CONTEXT_BASE_ALLOCATION:
            got.append((o, list(entries)))
        return 0
    h.block_status(count, off, cb, flags)
    assert len(got) == 1 and got[0][0] == off, got
    e = got[0][1]
    assert len(e) >= 2 and len(e) % 2 == 0, e
    pos = off
    for i in range(0, len(e), 2):
        length, f = e[i], e[i + 1]
        assert length > 0, (off, count, e)
        end = pos + length
        # Never beyond the request (the plugin clips).
        assert end <= off + count, ("past request", off, count, e)
        hole = bool(f & nbd.STATE_HOLE)
        zero = bool(f & nbd.STATE_ZERO)
        assert hole == zero, ("hole without zero or back", f)
        # Same classification as SEEK_DATA/SEEK_HOLE over the whole
        # extent: a hole holds no data, a data extent no hole.
        assert file_is_data(pos) != hole, ("start", pos, f)
        if hole:
            assert next_data(pos) >= end, ("data inside hole", pos, end)
        else:
            assert os.lseek(fd, pos, os.SEEK_HOLE) >= end, ("hole inside data", pos, end)
        if hole:
            assert contents.count(0, pos, end) == length, ("zero range has data", pos, length)
        pos = end
    if flags & nbd.CMD_FLAG_REQ_ONE:
        assert len(e) == 2, e
    else:
        # Without REQ_ONE the plugin covers the whole request.
        assert pos == off + count, ("short", off, count, e)

# The export read once per phase (16M): zero ranges are checked on it.
def read_all():
    return b"".join(h.pread(4 << 20, o) for o in range(0, size, 4 << 20))
contents = read_all()

K = 4096
shapes = [(0, size), (1, size - 1), (0, 1), (size - 1, 1), (5 * K - 7, 3 * K),
          (2000 * K, 16 * K), (2000 * K - 1, 16 * K + 2), (300 * K + 5, 64 * K),
          (size - K, K), (4095 * K - 3, 3)]
rnd = random.Random(7)
for _ in range(200):
    o = rnd.randrange(size)
    shapes.append((o, rnd.randint(1, size - o)))
for off, count in shapes:
    check(off, count)
    check(off, count, nbd.CMD_FLAG_REQ_ONE)

# After writes, zeroes (hole or not) and trims through NBD, still exact.
h.pwrite(b"\xff" * 12345, 7 * K + 3)
h.zero(64 * K, 300 * K, nbd.CMD_FLAG_NO_HOLE)
h.zero(64 * K, 320 * K)
h.trim(4 * K, 1000 * K)
contents = read_all()
for _ in range(100):
    o = rnd.randrange(size)
    check(o, rnd.randint(1, size - o))
check(0, size)
'
done
