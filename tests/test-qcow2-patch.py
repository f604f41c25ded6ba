#!/usr/bin/python3
# Make hostile qcow2 images by patching one field of a valid one.
#   test-qcow2-patch.py IMG field OFFSET FMT EXPR   header field (struct FMT)
#   test-qcow2-patch.py IMG l1 INDEX EXPR           active L1 entry
#   test-qcow2-patch.py IMG l2 INDEX EXPR           entry of the first L2
#   test-qcow2-patch.py IMG l2bitmap INDEX EXPR     extended L2 bitmap
#   test-qcow2-patch.py IMG ext TYPE LEN            first header extension
#   test-qcow2-patch.py IMG featname BIT NAME       first feature name entry
#   test-qcow2-patch.py IMG print EXPR              print a value
# EXPR is Python over: cs (cluster size), l1 (L1 offset), l2 (first L2
# table offset), data (host offset of guest cluster 0), reftable, eof.
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
env = dict(cs=cs, l1=l1, l2=l2, data=data, reftable=reftable, eof=eof)


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
elif what == "print":
    print(val(sys.argv[3]))
else:
    sys.exit("unknown command " + what)
f.close()
