#!/usr/bin/python3
# A seeded stream of NBD requests on one connection, checked against an
# in-memory model: writes (some with FUA) at any offset, zeroes with and
# without NO_HOLE, trims, flushes and reads.  The same seed gives the
# same requests, so two servers given the same image must end with the
# same bytes.  One connection, unlike tests/randops, so that it also
# runs against a server that serves only one client (--shared=1).
#
#   nbd-opstream.py URI SEED OPS
#
# Trims are 64K-aligned: servers may trim less than asked (whole
# blocks of their own size), and an aligned trim is punched the same
# way by any of them.  What a trim leaves is read back at once and must
# be, block by block, either the old data or zeroes; it then becomes
# the model.
# SPDX-License-Identifier: BSD-3-Clause

import random
import sys

import nbd

uri, seed, ops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
h = nbd.NBD()
h.connect_uri(uri)
size = h.get_size()
if size > 64 << 20:
    sys.exit("nbd-opstream: export too large for the model")


def read_all():
    # In pieces: a request may not exceed the server's maximum block
    # size (32M for qemu-nbd).
    return b"".join(h.pread(min(16 << 20, size - o), o)
                    for o in range(0, size, 16 << 20))


model = bytearray(read_all())
can_trim = h.can_trim()
can_fua = h.can_fua()
counts = {"write": 0, "zero": 0, "trim": 0, "flush": 0, "read": 0}


def span(maxlen):
    off = rng.randrange(size)
    return off, rng.randint(1, min(maxlen, size - off))


for _ in range(ops):
    op = rng.choices(["write", "zero", "trim", "flush", "read"],
                     [50, 15, 10, 5, 20])[0]
    if op == "write":
        off, n = span(256 << 10)
        data = rng.randbytes(n)
        fua = can_fua and rng.random() < 0.25
        h.pwrite(data, off, nbd.CMD_FLAG_FUA if fua else 0)
        model[off:off + n] = data
    elif op == "zero":
        off, n = span(1 << 20)
        flags = nbd.CMD_FLAG_NO_HOLE if rng.random() < 0.5 else 0
        h.zero(n, off, flags)
        model[off:off + n] = bytes(n)
    elif op == "trim":
        if not can_trim or size < 64 << 10:
            continue
        blocks = size >> 16
        b = rng.randrange(blocks)
        nb = rng.randint(1, min(16, blocks - b))
        off, n = b << 16, nb << 16
        h.trim(n, off)
        got = h.pread(n, off)
        for o in range(0, n, 4096):
            old = model[off + o:off + o + 4096]
            new = got[o:o + 4096]
            if new != old and new != bytes(len(new)):
                sys.exit("nbd-opstream: trim at %d left neither the old "
                         "data nor zeroes at %d" % (off, off + o))
        model[off:off + n] = got
    elif op == "flush":
        h.flush()
    else:
        off, n = span(256 << 10)
        if h.pread(n, off) != model[off:off + n]:
            sys.exit("nbd-opstream: read at %d+%d differs from the model"
                     % (off, n))
    counts[op] += 1

h.flush()
got = read_all()
if got != model:
    first = next(i for i in range(size) if got[i] != model[i])
    sys.exit("nbd-opstream: final read differs from the model at %d" % first)
h.shutdown()
print("nbd-opstream: %s" % " ".join("%s=%d" % kv for kv in counts.items()))
