#!/usr/bin/env python3
# What a file system does with the calls the image plugin makes: statx
# DIOALIGN, O_DIRECT at 512 and 4096 alignment, fallocate PUNCH_HOLE and
# ZERO_RANGE, SEEK_DATA/SEEK_HOLE over data, holes, punched, zeroed and
# preallocated ranges, reflink, and copy-on-write (extents after 4 KiB
# overwrites in place).  Prints one "key<TAB>value" line per finding.
#
#   bench/fs-probe.py DIR        (DIR on the file system to probe)
#
# SPDX-License-Identifier: BSD-3-Clause
import ctypes
import errno
import mmap
import os
import random
import subprocess
import sys

KiB, MiB = 1024, 1024 * 1024
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 1, 2, 0x10
STATX_DIOALIGN = 0x2000
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def out(key, value):
    print(f"{key}\t{value}", flush=True)


def err(e):
    return errno.errorcode.get(e, str(e))


def fallocate(fd, mode, off, length):
    if libc.fallocate(fd, mode, off, length) != 0:
        return err(ctypes.get_errno())
    return "ok"


def alloc(fd):
    return os.fstat(fd).st_blocks * 512


def extents(path):
    r = subprocess.run(["filefrag", path], capture_output=True, text=True)
    try:
        return int(r.stdout.split()[-3])
    except (IndexError, ValueError):
        return "-"


def dioalign(path):
    buf = ctypes.create_string_buffer(256)
    AT_FDCWD = -100
    if libc.statx(AT_FDCWD, path.encode(), 0, STATX_DIOALIGN, buf) != 0:
        return "statx: " + err(ctypes.get_errno())
    mask = int.from_bytes(buf.raw[0:4], "little")
    if not mask & STATX_DIOALIGN:
        return "not reported"
    mem = int.from_bytes(buf.raw[152:156], "little")
    off = int.from_bytes(buf.raw[156:160], "little")
    return f"mem {mem} offset {off}" + (" (O_DIRECT unsupported)" if off == 0 else "")


def segments(fd, size):
    """Data segments as SEEK_DATA/SEEK_HOLE report them, in KiB."""
    segs, pos = [], 0
    while pos < size:
        try:
            d = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:
                break
            return "error " + err(e.errno)
        h = os.lseek(fd, d, os.SEEK_HOLE)
        segs.append(f"{d // KiB}-{h // KiB}")
        pos = h
    return " ".join(segs) or "none"


def main(d):
    p = os.path.join(d, "fs-probe.img")
    rnd = random.Random(1)
    data = bytes(rnd.getrandbits(8) for _ in range(64 * KiB)) * 16  # 1 MiB

    # O_DIRECT: statx first (the plugin's source of truth), then tries.
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, 4 * MiB)
    out("statx_dioalign", dioalign(p))
    os.close(fd)
    try:
        fd = os.open(p, os.O_RDWR | os.O_DIRECT)
    except OSError as e:
        out("o_direct_open", err(e.errno))
        fd = None
    if fd is not None:
        out("o_direct_open", "ok")
        m = mmap.mmap(-1, 3 * 4096)          # page-aligned memory
        m[:] = data[: len(m)]
        for name, off, length, moff in [
            ("o_direct_4096", 4096, 4096, 0),
            ("o_direct_512", 512, 512, 0),
            ("o_direct_mem512", 8192, 4096, 512),
        ]:
            try:
                n = os.pwrite(fd, memoryview(m)[moff:moff + length], off)
                out(name, "ok" if n == length else f"short {n}")
            except OSError as e:
                out(name, err(e.errno))
        os.close(fd)
    os.unlink(p)

    # Punch hole / zero range on 1 MiB of written data, and what
    # SEEK_DATA then reports: [0,1M) data with [256K,512K) punched and
    # [512K,768K) zeroed, [2M,3M) preallocated (fallocate mode 0), 4 MiB.
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, 4 * MiB)
    os.pwrite(fd, data, 0)
    os.fsync(fd)
    a0 = alloc(fd)
    r = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 256 * KiB, 256 * KiB)
    os.fsync(fd)
    a1 = alloc(fd)
    out("punch_hole", f"{r}, allocated {a0 // KiB} -> {a1 // KiB} KiB")
    r = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1000, 3000)
    z = os.pread(fd, 4096, 0)
    out("punch_hole_unaligned", f"{r}, bytes 1000-3999 read back zero: {z[1000:4000] == bytes(3000)},"
        f" rest kept: {z[:1000] == data[:1000] and z[4000:] == data[4000:4096]}")
    r = fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 512 * KiB, 256 * KiB)
    os.fsync(fd)
    a2 = alloc(fd)
    z = os.pread(fd, 256 * KiB, 512 * KiB)
    out("zero_range", f"{r}, allocated {a1 // KiB} -> {a2 // KiB} KiB, reads zero: {z == bytes(len(z))}")
    r = fallocate(fd, 0, 2 * MiB, MiB)
    os.fsync(fd)
    out("fallocate_prealloc", f"{r}, allocated {alloc(fd) // KiB} KiB")
    out("seek_data_segments_kib", segments(fd, 4 * MiB) +
        "  (written 0-1024 minus punched 256-512, zeroed 512-768; preallocated 2048-3072)")
    os.close(fd)

    # Reflink (XFS, btrfs) and copy-on-write: extents of a 64 MiB file
    # written in one go, then after 256 O_DIRECT (or buffered) 4 KiB
    # overwrites in place, fsynced.
    q = p + ".reflink"
    r = subprocess.run(["cp", "--reflink=always", p, q], capture_output=True, text=True)
    out("reflink", "ok" if r.returncode == 0 else r.stderr.strip().split(": ")[-1])
    if os.path.exists(q):
        os.unlink(q)
    os.unlink(p)
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    for off in range(0, 64 * MiB, MiB):
        os.pwrite(fd, data, off)
    os.fsync(fd)
    e0 = extents(p)
    os.close(fd)
    try:
        fd, how = os.open(p, os.O_RDWR | os.O_DIRECT), "O_DIRECT"
    except OSError:
        fd, how = os.open(p, os.O_RDWR), "buffered"
    m = mmap.mmap(-1, 4096)
    m[:] = data[:4096]
    for _ in range(256):
        os.pwrite(fd, m, rnd.randrange(0, 64 * MiB // 4096) * 4096)
    os.fsync(fd)
    os.close(fd)
    out("overwrite_extents", f"64 MiB written sequentially: {e0} extents; after 256 random "
        f"4 KiB {how} overwrites in place: {extents(p)} extents")
    os.unlink(p)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: fs-probe.py DIR")
    main(sys.argv[1])
