#!/usr/bin/python3
# Compare our export's block status with qemu's map of the same image.
#   test-qcow2-map.py QEMU-MAP.json NBD-URI
# SPDX-License-Identifier: BSD-3-Clause
#
# Rules, checked byte for byte over the whole disk:
#  - where we say ZERO, qemu must say zero, or (where we are more precise
#    than qemu) the export must read zeroes there;
#  - where we say HOLE, qemu must say data=false;
#  - where qemu says zero, we must say ZERO: as precise as qemu, from the
#    L1/L2 tables and from holes in the host file under allocated
#    clusters (e.g. preallocation=metadata).
# Exit 1 with the first disagreement.
import json
import sys

import nbd

HOLE, ZERO = nbd.STATE_HOLE, nbd.STATE_ZERO

qmap = json.load(open(sys.argv[1]))
h = nbd.NBD()
h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
h.connect_uri(sys.argv[2])
size = h.get_size()

ours = []                       # (start, length, flags)


def cb(metacontext, offset, entries, err):
    if metacontext != nbd.CONTEXT_BASE_ALLOCATION:
        return 0
    for i in range(0, len(entries), 2):
        ours.append((offset, entries[i], entries[i + 1]))
        offset += entries[i]
    return 0


off = 0
while off < size:
    n = min(size - off, 1 << 30)
    before = len(ours)
    h.block_status(n, off, cb)
    if len(ours) == before:
        sys.exit("no extents returned at %d" % off)
    # Extents must start where asked and never go past the request.
    end = ours[-1][0] + ours[-1][1]
    if ours[before][0] != off or end > off + n:
        sys.exit("bad extents for [%d, %d): %r" % (off, off + n,
                                                    ours[before:]))
    off = end
h.shutdown()

if qmap[-1]["start"] + qmap[-1]["length"] != size:
    sys.exit("qemu map size %d != export size %d"
             % (qmap[-1]["start"] + qmap[-1]["length"], size))

i = j = 0
pos = 0
more_precise = []
while pos < size:
    o_start, o_len, o_flags = ours[i]
    q = qmap[j]
    end = min(o_start + o_len, q["start"] + q["length"])
    where = "[%d, %d) ours flags=%d, qemu zero=%s data=%s" % (
        pos, end, o_flags, q["zero"], q["data"])
    if (o_flags & ZERO) and not q["zero"]:
        # We may be more precise than qemu (qemu does not always look
        # for holes in the host file): allowed only if it reads as
        # zeroes (the caller checks that our reading equals qemu's).
        more_precise.append((pos, end, where))
    if (o_flags & HOLE) and q["data"]:
        sys.exit("we say hole but qemu says data: " + where)
    if q["zero"] and not (o_flags & ZERO):
        sys.exit("qemu knows it is zero but we do not: " + where)
    pos = end
    if pos >= o_start + o_len:
        i += 1
    if pos >= q["start"] + q["length"]:
        j += 1
h = nbd.NBD()
h.connect_uri(sys.argv[2])
for start, end, where in more_precise:
    for o in range(start, end, 1 << 24):
        n = min(end - o, 1 << 24)
        if h.pread(n, o) != bytes(n):
            sys.exit("we say zero but it has data: " + where)
h.shutdown()
print("map ok: %d extents from us, %d from qemu" % (len(ours), len(qmap)))
