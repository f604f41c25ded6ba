# Seeded differential client for nbdsh: writes buffers made of zero and
# data runs (aligned and not, stray bytes, bytes at block edges) at
# unaligned offsets, plus zeroes, flushes and reads, and checks the
# export against an in-memory reference.  randops only writes random
# data, which never contains zero blocks; this is what drives
# zerodetect's splitting.  Run as:
#   nbdsh -u URI -c "seed = N" -c "$(cat test-zerodetect-zero-runs.py)"
# With -c "trim_zero = True" it also trims, and trimmed ranges must then
# read as zero (discard=zero).
# SPDX-License-Identifier: BSD-3-Clause
import random
r = random.Random(seed)
size = h.get_size()
ref = bytearray(h.pread(size, 0))
fua = h.can_fua()
trim_zero = globals().get("trim_zero", False) and h.can_trim()

def make_buf(off, n):
    b = bytearray(n)
    pos = 0
    while pos < n:
        unit = r.choice((512, 4096, 65536))
        run = r.choice((unit, 2 * unit, r.randrange(1, 3 * unit)))
        end = min(n, pos + run)
        if r.random() < 0.4:
            b[pos:end] = r.randbytes(end - pos)
        pos = end
    for _ in range(r.choice((0, 0, 1, 3))):      # stray bytes in zero runs
        b[r.randrange(n)] = r.randrange(1, 256)
    for _ in range(r.choice((0, 1, 2))):         # and at block edges
        unit = r.choice((512, 4096, 65536))
        edge = off + r.randrange(0, n + unit, unit)
        edge -= edge % unit
        i = edge - off + r.choice((-1, 0))
        if 0 <= i < n:
            b[i] = r.randrange(1, 256)
    return bytes(b)

for i in range(200):
    k = r.random()
    off = r.randrange(size)
    if r.random() < 0.3:
        off -= off % r.choice((512, 4096, 65536))
    n = r.randrange(1, min(size - off, 700000) + 1)
    if k < 0.7:
        buf = make_buf(off, n)
        flags = nbd.CMD_FLAG_FUA if fua and r.random() < 0.15 else 0
        h.pwrite(buf, off, flags)
        ref[off:off + n] = buf
    elif k < 0.8:
        h.zero(n, off, nbd.CMD_FLAG_NO_HOLE if r.random() < 0.5 else 0)
        ref[off:off + n] = bytes(n)
    elif k < 0.85:
        h.flush()
    elif k < 0.9 and trim_zero:
        h.trim(n, off)
        ref[off:off + n] = bytes(n)
    else:
        got = h.pread(n, off)
        if got != ref[off:off + n]:
            raise Exception("seed %d op %d: read %d+%d differs" % (seed, i, off, n))
h.flush()
if h.pread(size, 0) != ref:
    raise Exception("seed %d: final contents differ from the reference" % seed)
