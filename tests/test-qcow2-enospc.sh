#!/usr/bin/env bash
# qcow2 writable on a block device (a loop device), compact layout: space.
#  - tight: a device of exactly `qemu-img measure`'s fully allocated
#    size; after a full write, trims and zeroes that unmap 4 MiB then
#    rewrite it, no flush between (and sometimes one): every request
#    succeeds (the writer commits, lets the reuse barrier pass and
#    reuses the freed clusters instead of failing with ENOSPC), the
#    disk reads what the model says, qemu-img check is clean;
#    the same with 4 connections at once (randops);
#  - full: a device too small for the disk: writes end in ENOSPC, the
#    image is not failed: reads, flushes and, once a trim freed space,
#    writes succeed again; clean;
#  - roomy: a device larger than needed: after a full write, rounds of
#    trim/zero + rewrite never take the highest used offset past the
#    fully allocated size (qemu-img check's image end offset).
# Before the fix: ENOSPC on the first rewrite of "tight" and the image
# failed until restart; "full" failed every request after the ENOSPC;
# "roomy" grew to 1.5 times the fully allocated size (in this test it
# met ENOSPC first).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
require nbdsh
require losetup
[ "$(id -u)" -eq 0 ] || skip "needs root for losetup"
cd "$T"
on_exit '[ -n "${loopdev:-}" ] && losetup -d "$loopdev"'
on_exit stop_all_servers

M=$((1 << 20))
SIZE=48M
FULL=$("$QEMU_IMG" measure -O qcow2 --size $SIZE | awk '/fully/ {print $4}')
[ -n "$FULL" ] || fail "qemu-img measure said nothing"

# device FILE-SIZE: a fresh loop device over a file of that size.
device ()
{
  [ -n "${loopdev:-}" ] && { losetup -d "$loopdev"; loopdev=; }
  rm -f dev.img
  truncate -s "$1" dev.img
  loopdev=$(losetup -f --show dev.img) || skip "no loop device"
  "$NBDKIT" -U - "$IMAGE_PLUGIN" file="$loopdev" format=qcow2 create=force \
    size=$SIZE --run true || fail "create on $loopdev failed"
}

end_offset ()
{
  "$QEMU_IMG" check -f qcow2 "$loopdev" 2>&1 |
    sed -n 's/^Image end offset: \([0-9]*\)$/\1/p'
}

clean ()
{
  local rc=0
  "$QEMU_IMG" check -f qcow2 "$loopdev" >check.out 2>&1 || rc=$?
  [ $rc -eq 0 ] || fail "$1: qemu-img check exit $rc: $(head -20 check.out)"
}

# PARTS: which parts to run (all by default; to check one on old code).
PARTS=${PARTS:-tight tight4 full roomy}

# tight, in four modes.
for mode in trim zero-trim trim-flush zero-keep; do
  [[ " $PARTS " == *" tight "* ]] || break
  device "$FULL"
  start_nbdkit tight "$IMAGE_PLUGIN" file="$loopdev"
  MODE=$mode nbdsh -u "$(uri tight)" -c '
import os, random
M = 1 << 20
mode = os.environ["MODE"]
size = h.get_size()
model = bytearray(size)
r = random.Random(7)
for off in range(0, size, 4 * M):
    d = os.urandom(4 * M)
    h.pwrite(d, off)
    model[off:off + 4 * M] = d
h.flush()
for i in range(40):
    off = r.randrange(0, size // M - 4) * M
    if mode.startswith("trim"):
        h.trim(4 * M, off)
    elif mode == "zero-trim":
        h.zero(4 * M, off)
    else:
        h.zero(4 * M, off, flags=nbd.CMD_FLAG_NO_HOLE)
    if mode.endswith("-flush"):
        h.flush()
    # Half of them rewritten in pieces, so that runs end inside it.
    n = 4 * M if i % 2 else 256 * 1024
    for o in range(off, off + 4 * M, n):
        d = os.urandom(n)
        h.pwrite(d, o)
        model[o:o + n] = d
    if r.random() < 0.2:
        h.flush()
h.flush()
for off in range(0, size, 4 * M):
    assert h.pread(4 * M, off) == model[off:off + 4 * M], off
' || fail "tight ($mode): a request failed (see above)"
  stop_nbdkit tight
  clean "tight ($mode)"
  e=$(end_offset)
  [ "$e" -le "$FULL" ] || fail "tight ($mode): end offset $e > $FULL"
done

# tight, 4 connections at once (randops: writes, zeroes with and without
# MAY_TRIM, trims, flushes), the disk full first: reclaims of several
# writers wait for each other's requests, never for ever, never ENOSPC.
if [[ " $PARTS " == *" tight4 "* ]]; then
  [ -x "$RANDOPS" ] || fail "$RANDOPS not built"
  device "$FULL"
  start_nbdkit tight4 "$IMAGE_PLUGIN" file="$loopdev"
  nbdsh -u "$(uri tight4)" -c '
import os
M = 1 << 20
for off in range(0, h.get_size(), 4 * M):
    h.pwrite(os.urandom(4 * M), off)
h.flush()
'
  timeout 600 "$RANDOPS" -c 4 --interleave -n 300 --max-len=1048576 -s 5 \
    "$(uri tight4)" >randops.out 2>&1 ||
    fail "tight, 4 connections: $(tail -5 randops.out)"
  stop_nbdkit tight4
  clean "tight (4 connections)"
fi

# full: room for about half of the disk.
if [[ " $PARTS " == *" full "* ]]; then
device $((FULL / 2))
start_nbdkit full "$IMAGE_PLUGIN" file="$loopdev"
nbdsh -u "$(uri full)" -c '
import os, errno
M = 1 << 20
size = h.get_size()
written = {}
nospc = None
for off in range(0, size, M):
    d = os.urandom(M)
    try:
        h.pwrite(d, off)
    except nbd.Error as e:
        assert e.errnum == errno.ENOSPC, e
        nospc = off
        break
    written[off] = d
assert nospc is not None, "a device of half the size took the whole disk"
# Not failed: what was written reads back, a flush succeeds, a write
# where there is no space still fails with ENOSPC, not EIO.
h.flush()
for off, d in written.items():
    assert h.pread(M, off) == d, off
try:
    h.pwrite(os.urandom(M), nospc)
    assert False, "wrote into a full device"
except nbd.Error as e:
    assert e.errnum == errno.ENOSPC, e
# Space freed: the next writes succeed, with no flush between.
h.trim(4 * M, 0)
for off in range(0, 4 * M, M):
    written.pop(off)
for off in range(nospc, nospc + 4 * M, M):
    d = os.urandom(M)
    h.pwrite(d, off)
    written[off] = d
h.flush()
assert h.pread(4 * M, 0) == bytes(4 * M)
for off, d in written.items():
    assert h.pread(M, off) == d, off
' || fail "full: see above"
stop_nbdkit full
clean "full"
fi

# roomy: 1.5 times the fully allocated size.
if [[ " $PARTS " == *" roomy "* ]]; then
device $((FULL * 3 / 2))
start_nbdkit roomy "$IMAGE_PLUGIN" file="$loopdev"
nbdsh -u "$(uri roomy)" -c '
import os
M = 1 << 20
size = h.get_size()
for off in range(0, size, 4 * M):
    h.pwrite(os.urandom(4 * M), off)
h.flush()
'
for round in 1 2 3 4 5 6; do
  ROUND=$round nbdsh -u "$(uri roomy)" -c '
import os, random
M = 1 << 20
size = h.get_size()
r = random.Random(int(os.environ["ROUND"]))
for i in range(20):
    off = r.randrange(0, size // M - 4) * M
    h.trim(4 * M, off) if r.random() < 0.5 else h.zero(4 * M, off)
    h.pwrite(os.urandom(4 * M), off)
    if r.random() < 0.3:
        h.flush()
h.flush()
'
  e=$(end_offset)
  [ "$e" -le "$FULL" ] ||
    fail "roomy: round $round: highest used offset $e > fully allocated $FULL"
done
stop_nbdkit roomy
clean "roomy"
fi
echo "OK: tight, full and roomy within $FULL bytes"
