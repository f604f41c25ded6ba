#!/usr/bin/python3
# Make hostile qcow2 images by patching one field of a valid one.
#   test-qcow2-patch.py IMG field OFFSET FMT EXPR   header field (struct FMT)
#   test-qcow2-patch.py IMG l1 INDEX EXPR           active L1 entry
#   test-qcow2-patch.py IMG l2 INDEX EXPR           entry of the first L2
#   test-qcow2-patch.py IMG l2bitmap INDEX EXPR     extended L2 bitmap
#   test-qcow2-patch.py IMG ext TYPE LEN            first header extension
#   test-qcow2-patch.py IMG featname BIT NAME       first feature name entry
#   test-qcow2-patch.py IMG snap INDEX OFFSET FMT EXPR  field of a snapshot
#                                                   table entry
#   test-qcow2-patch.py IMG snaphuge                a new table at the end of
#       the file, over qemu's 64 MiB limit (1024 entries of 64 KiB names)
#   test-qcow2-patch.py IMG print EXPR              print a value
# EXPR is Python over: cs (cluster size), l1 (L1 offset), l2 (first L2
# table offset), data (host offset of guest cluster 0), reftable, eof,
# snaptab (snapshot table offset), snapl1 (L1 offset of the first
# snapshot).
# SPDX-License-Identifier: BSD-3-Clause
import os
import struct
import sys

path, what = sys.argv[1], sys.argv[2]
f = open(path, "r+b")
hdr = f.read(512)
cs = 1 << struct.unpack_from(">I", hdr, 20)[0]
l1 = struct.unpack_from(">Q", hdr, 40)[0]
reftable = struct.unpack_from(">Q", hdr, 48)[0]
version = struct.unpack_from(">I", hdr, 4)[0]
hdr_len = struct.unpack_from(">I", hdr, 100)[0] if version >= 3 else 72
ext_l2 = version >= 3 and struct.unpack_from(">Q", hdr, 72)[0] & 16
entry = 16 if ext_l2 else 8
eof = os.path.getsize(path)
f.seek(l1)
l2 = struct.unpack(">Q", f.read(8))[0] & 0x00fffffffffffe00
data = 0
if l2:
    f.seek(l2)
    data = struct.unpack(">Q", f.read(8))[0] & 0x00fffffffffffe00
nb_snapshots, snaptab = struct.unpack_from(">IQ", hdr, 60)


def snap_entry(index):
    """Offset of snapshot table entry INDEX (entries have variable
    lengths: extra data, ID and name follow the 40-byte header)."""
    off = snaptab
    for _ in range(index):
        f.seek(off)
        e = f.read(40)
        id_len, name_len = struct.unpack_from(">HH", e, 12)
        extra = struct.unpack_from(">I", e, 36)[0]
        off = (off + 40 + extra + id_len + name_len + 7) & ~7
    return off


snapl1 = 0
if nb_snapshots:
    f.seek(snaptab)
    snapl1 = struct.unpack(">Q", f.read(8))[0]
env = dict(cs=cs, l1=l1, l2=l2, data=data, reftable=reftable, eof=eof,
           snaptab=snaptab, snapl1=snapl1)


def val(expr):
    return eval(expr, {}, env)


def put(offset, fmt, value):
    f.seek(offset)
    f.write(struct.pack(">" + fmt, value))


if what == "field":
    put(int(sys.argv[3], 0), sys.argv[4], val(sys.argv[5]))
elif what == "l1":
    put(l1 + 8 * int(sys.argv[3]), "Q", val(sys.argv[4]))
elif what == "l2":
    put(l2 + entry * int(sys.argv[3]), "Q", val(sys.argv[4]))
elif what == "l2bitmap":
    put(l2 + entry * int(sys.argv[3]) + 8, "Q", val(sys.argv[4]))
elif what == "ext":
    f.seek(hdr_len)
    f.write(struct.pack(">II", int(sys.argv[3], 0), int(sys.argv[4], 0)))
elif what == "featname":
    # Find the feature name table extension and rewrite its first entry.
    off = hdr_len
    while off + 8 <= cs:
        f.seek(off)
        t, n = struct.unpack(">II", f.read(8))
        if t == 0:
            # No table (qemu-img create writes none): add one here, the
            # zeroes after it end the extension list.
            f.seek(off)
            f.write(struct.pack(">II", 0x6803f857, 48))
            t = 0x6803f857
        if t == 0x6803f857:
            f.seek(off + 8)
            name = sys.argv[4].encode().ljust(46, b"\0")
            f.write(struct.pack(">BB", 0, int(sys.argv[3])) + name)
            break
        off += 8 + ((n + 7) & ~7)
elif what == "snap":
    put(snap_entry(int(sys.argv[3])) + int(sys.argv[4], 0), sys.argv[5],
        val(sys.argv[6]))
elif what == "snaphuge":
    # Sparse: only the entry headers are written.
    n, step = 1024, (40 + 0xffff + 7) & ~7
    table = (eof + cs - 1) // cs * cs
    for i in range(n):
        f.seek(table + i * step)
        f.write(struct.pack(">QIHH", 0, 0, 0, 0xffff) + bytes(24))
    f.truncate(table + n * step)
    put(60, "I", n)
    put(64, "Q", table)
elif what == "print":
    print(val(sys.argv[3]))
else:
    sys.exit("unknown command " + what)
f.close()
