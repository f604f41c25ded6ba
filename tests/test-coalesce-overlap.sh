#!/usr/bin/env bash
# coalesce: a storm of concurrent, heavily overlapping writes, zeroes,
# trims, flushes and reads (two connections, 16 requests in flight on
# each, all inside 512K) exercises the paths where a request must wait
# for another one's range: copying in, written back, being zeroed.  It
# must not hang or crash; every read must return, for each byte, either
# an older or a newer value, never a byte no request wrote; and once it
# settles, a final pass of writes must read back and land in the file.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
CO=$(filter_so coalesce)

truncate -s 1M "$T/disk.img"
start_nbdkit srv --filter="$CO" file "$T/disk.img" coalesce-delay=0 \
  coalesce-threads=16 coalesce-size=2M coalesce-max-write=128K
export URI="$(uri srv)" DISK="$T/disk.img"

timeout 120 nbdsh -c - <<'PY' || fail "storm failed or hung"
import os, random, time
rng = random.Random(11)
REGION = 512 * 1024
hs = []
for i in range(2):
    h = nbd.NBD(); h.connect_uri(os.environ["URI"]); hs.append(h)
# Every write fills its range with one byte value (1..255) so that a
# read can check that each byte is 0 or some value actually written.
written = {0}
errors = []
bufs = {}
def done(err):
    if err.value:
        errors.append("request failed: %d" % err.value)
    return 1
def issue(h):
    op = rng.random()
    off = rng.randrange(0, REGION - 1)
    # Sizes cover copies under the lock (< 64K), outside it (64K..128K)
    # and writes that bypass the buffer (>= 128K).
    n = rng.randrange(1, min(160 * 1024, REGION - off) + 1)
    if op < 0.55:
        v = rng.randrange(1, 256); written.add(v)
        h.aio_pwrite(bytes([v]) * n, off, completion=done)
    elif op < 0.7:
        h.aio_zero(n, off, completion=done,
                   flags=rng.choice([0, nbd.CMD_FLAG_NO_HOLE]))
    elif op < 0.75:
        h.aio_trim(n, off, completion=done)
    elif op < 0.8:
        h.aio_flush(completion=done)
    else:
        b = nbd.Buffer(n); bufs[id(b)] = b
        def check(err, b=b):
            if err.value == 0:
                bad = set(b.to_bytearray()) - written
                if bad:
                    errors.append(bad)
            else:
                errors.append("read failed: %d" % err.value)
            del bufs[id(b)]
            return 1
        h.aio_pread(b, off, completion=check)
end = time.time() + 4
ops = 0
while time.time() < end:
    for h in hs:
        while h.aio_in_flight() < 16:
            issue(h); ops += 1
        h.poll(0)
    hs[0].poll(1)
for h in hs:
    while h.aio_in_flight() > 0:
        h.poll(-1)
assert not errors, "reads returned bytes never written: %r" % errors[:5]
# Settle: a final deterministic pass from both connections.
final = bytearray(os.urandom(REGION))
for i in range(0, REGION, 4096):
    hs[(i // 4096) % 2].pwrite(bytes(final[i:i + 4096]), i)
for h in hs:
    assert h.pread(REGION, 0) == final, "final pass does not read back"
hs[1].flush()
with open(os.environ["DISK"], "rb") as f:
    assert f.read(REGION) == final, "final pass not in the file after flush"
print("storm: %d requests" % ops)
PY
echo "coalesce overlap: OK"
