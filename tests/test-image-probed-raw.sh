#!/usr/bin/env bash
# format=auto on a raw file (issue 18 item 6): as qemu does for a raw
# image whose format it probed, a write, zero or trim that would make
# the first sector name another format fails with EPERM and leaves the
# file as it was (else the next start would serve a different disk);
# every other change of the first sector is made; format=raw is not
# restricted.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require qemu-img
cd "$T"

"$QEMU_IMG" create -q -f qcow2 hdr.qcow2 1G
truncate -s 4M disk.raw
SCRIPT='
import errno
hdr = open("hdr.qcow2", "rb").read(65536)

def refused(what, call):
    try:
        call()
    except nbd.Error as e:
        assert e.errnum == errno.EPERM, (what, e)
    else:
        raise AssertionError(what + ": accepted on a probed raw image")

before = h.pread(512, 0)
# A whole qcow2 header, and one built from two writes.
refused("qcow2 header", lambda: h.pwrite(hdr, 0))
refused("qcow2 header, FUA", lambda: h.pwrite(hdr[:512], 0, nbd.CMD_FLAG_FUA))
h.pwrite(b"\0\0\0\x03", 4)
refused("qcow2 magic over a version", lambda: h.pwrite(b"QFI\xfb", 0))
refused("vmdk magic", lambda: h.pwrite(b"KDMV", 0))
refused("vdi signature", lambda: h.pwrite(b"\x7f\x10\xda\xbe", 0x40))
# Zeroing (and punching) can complete a magic too: "QEDX" -> "QED\0".
h.pwrite(b"QEDX", 0)
refused("zero", lambda: h.zero(1, 3))
refused("trim", lambda: h.trim(1, 3))
refused("zero, no hole", lambda: h.zero(1, 3, nbd.CMD_FLAG_NO_HOLE))
assert h.pread(4, 0) == b"QEDX"
# What keeps the sector raw is written: data, zeroes, a header elsewhere.
h.pwrite(b"\xaa" * 512, 0)
h.zero(512, 0)
h.pwrite(hdr[:512], 4096)
h.pwrite(b"x" * 1000, 100)
h.flush()
'
# In the foreground, to keep its log (a forked nbdkit drops stderr).
export SCRIPT
"$NBDKIT" --log=stderr -U - "$IMAGE_PLUGIN" file=disk.raw \
  --run 'nbdsh -u "$uri" -c "$SCRIPT"' 2>auto.log ||
  { cat auto.log >&2; fail "format=auto: the client script failed"; }
grep -q "refusing a write at offset 0: the image's format was probed as raw" auto.log ||
  fail "no log line for the refused write: $(cat auto.log)"
# The file is still a raw disk, with the accepted writes in it.
python3 -c '
d = open("disk.raw", "rb").read()
assert d[:100] == b"\0" * 100 and d[100:1100] == b"x" * 1000, "first sector"
assert d[4096:4100] == b"QFI\xfb", "header at 4096"
' || fail "the accepted writes are not in the file"
start_nbdkit again "$IMAGE_PLUGIN" file=disk.raw
[ "$(nbdinfo --size "$(uri again)")" = $((4 << 20)) ] ||
  fail "after the refused writes the file is no longer served as the raw disk"
stop_nbdkit again

# Two writes that are each harmless but together make a qcow2 header,
# sent at once, 40 times, with every read of the file slowed down
# (fault-shim.so: the check reads the sector before the write): the
# check and the change are one step, so exactly one of the two is
# refused each time.
truncate -s 1M race.raw
(
  export LD_PRELOAD="$abs_builddir/fault-shim.so${LD_PRELOAD:+:$LD_PRELOAD}"
  export FAULT_PATH="$T/race.raw" FAULT_PREAD_DELAY_MS=20
  start_nbdkit race "$IMAGE_PLUGIN" file="$T/race.raw"
) || fail "race: nbdkit did not start"
nbdsh -u "$(uri race)" -c '
import errno
for i in range(40):
    h.pwrite(bytes(512), 0)
    parts = [(b"QFI\xfb", 0), (b"\0\0\0\x03", 4)]
    if i % 2:
        parts.reverse()
    cookies = [h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(d)), o) for d, o in parts]
    refused = 0
    for c in cookies:
        while True:
            try:
                if h.aio_command_completed(c):
                    break
            except nbd.Error as e:
                assert e.errnum == errno.EPERM, e
                refused += 1
                break
            h.poll(-1)
    assert refused == 1, ("round", i, "refused", refused, h.pread(8, 0))
    assert h.pread(8, 0) != b"QFI\xfb\0\0\0\x03", ("round", i, "header built")
' || fail "two writes at once built a qcow2 header (or both were refused)"
stop_nbdkit race

# cache=none goes through the same check.
start_nbdkit direct "$IMAGE_PLUGIN" file=disk.raw cache=none
nbdsh -u "$(uri direct)" -c '
import errno
try:
    h.pwrite(open("hdr.qcow2", "rb").read(512), 0)
except nbd.Error as e:
    assert e.errnum == errno.EPERM, e
else:
    raise AssertionError("cache=none: header accepted")
'
stop_nbdkit direct

# format=raw: the client owns every byte.
start_nbdkit raw "$IMAGE_PLUGIN" file=disk.raw format=raw
nbdsh -u "$(uri raw)" -c 'h.pwrite(open("hdr.qcow2", "rb").read(65536), 0); h.flush()'
stop_nbdkit raw
cmp -n 65536 hdr.qcow2 disk.raw || fail "format=raw: the header write was not made"
