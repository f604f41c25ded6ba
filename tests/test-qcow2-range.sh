#!/usr/bin/env bash
# qcow2 inside a byte range of a file (issue 19 item 6): image-offset=
# and image-length= serve the qcow2 image that starts at an offset of a
# file (a disk inside an OVA), as qemu serves qcow2 over
# raw{offset, size}.  Reads, extents and writes are checked against
# qemu reading the same bytes through its raw offset/size options, in
# both cache modes: every byte outside the range stays as it was, a
# write that needs room past a fixed range fails with ENOSPC, an
# open-ended range grows the file, and bad ranges and parameter mixes
# are refused with one line.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require qemu-img
require qemu-io
cd "$T"

M=1048576
OFF=$((M + 1536)) # 512-aligned, as a tar member is, but not 4K-aligned
"$QEMU_IMG" create -q -f qcow2 m.qcow2 16M
"$QEMU_IO" -f qcow2 -c 'write -P 0x5a 1M 2M' -c 'write -P 0x33 10M 64k' m.qcow2 >/dev/null
L=$(stat -c %s m.qcow2)
RS=$((L + 4 * M)) # room for 4 MiB of new clusters
head -c $OFF /dev/urandom >prefix
head -c $((64 * 1024)) /dev/urandom >suffix
{ cat prefix m.qcow2; head -c $((4 * M)) /dev/zero; cat suffix; } >ova.orig

json () # FILE [SIZE]
{
  local size=${2:+, \"size\": $2}
  echo "json:{\"driver\": \"qcow2\", \"file\": {\"driver\": \"raw\", \"offset\": $OFF$size, \"file\": {\"driver\": \"file\", \"filename\": \"$T/$1\"}}}"
}
outside_intact () # FILE WHAT
{
  cmp -s -n $OFF prefix "$1" || fail "$2: bytes before the range changed"
  [ "$(tail -c $((64 * 1024)) "$1" | md5sum)" = "$(md5sum <suffix)" ] ||
    fail "$2: bytes after the range changed"
}

"$QEMU_IMG" compare -q -f qcow2 m.qcow2 "$(json ova.orig $RS)" ||
  fail "test set-up: qemu does not see m.qcow2 inside ova.orig"

WRITES=(-c 'write -P 0x77 5M 3M' -c 'write -P 0x11 15M 1M' -c 'write -z 1M 64k'
        -c 'write -P 0x44 10M 512')
cp m.qcow2 ref.qcow2
"$QEMU_IO" -f qcow2 "${WRITES[@]}" ref.qcow2 >/dev/null

for cache in writeback none; do
  cp ova.orig ova
  start_nbdkit r-$cache "$IMAGE_PLUGIN" file=ova format=qcow2 cache=$cache \
    image-offset=$OFF image-length=$RS
  "$QEMU_IMG" compare -q -f raw "$(uri r-$cache)" -F qcow2 m.qcow2 ||
    fail "cache=$cache: reads differ from qemu's"
  # Extents from the image's tables: data where qemu wrote, holes elsewhere.
  nbdsh --base-allocation -u "$(uri r-$cache)" -c '
M = 1 << 20
ext = []
def f(ctx, off, entries, err):
    for i in range(0, len(entries), 2):
        ext.append((entries[i], entries[i + 1]))
off = 0
while off < 16 * M:
    ext.clear()
    h.block_status(16 * M - off, off, f)
    for n, flags in ext:
        inside = lambda a, b: off < b and off + n > a
        if inside(1 * M, 3 * M) or inside(10 * M, 10 * M + 65536):
            assert flags == 0, ("data reported as", off, n, flags)
        else:
            assert flags & 2, ("hole not zero", off, n, flags)
        off += n
' || fail "cache=$cache: wrong extents"
  "$QEMU_IO" -f raw "${WRITES[@]}" "$(uri r-$cache)" >/dev/null
  stop_nbdkit r-$cache
  "$QEMU_IMG" check -q "$(json ova $RS)" || fail "cache=$cache: qemu-img check"
  "$QEMU_IMG" compare -q "$(json ova $RS)" ref.qcow2 ||
    fail "cache=$cache: after the writes qemu reads other data than the reference"
  outside_intact ova "cache=$cache"

  # No room for 12 MiB more inside the fixed range: ENOSPC, nothing
  # written outside it.
  start_nbdkit f-$cache "$IMAGE_PLUGIN" file=ova format=qcow2 cache=$cache \
    image-offset=$OFF image-length=$RS
  nbdsh -u "$(uri f-$cache)" -c '
import errno, os
try:
    for off in range(0, 16 << 20, 1 << 20):
        h.pwrite(os.urandom(1 << 20), off)
    h.flush()
except nbd.Error as e:
    assert e.errnum == errno.ENOSPC, e
else:
    raise AssertionError("16 MiB of new data fit into a 4 MiB gap")
' || fail "cache=$cache: a full range did not fail with ENOSPC"
  stop_nbdkit f-$cache
  outside_intact ova "cache=$cache, full range"
done

# Open-ended (no image-length): the image is the file's end and grows.
{ cat prefix m.qcow2; } >tail.img
start_nbdkit t "$IMAGE_PLUGIN" file=tail.img format=qcow2 image-offset=$OFF
"$QEMU_IO" -f raw "${WRITES[@]}" "$(uri t)" >/dev/null
stop_nbdkit t
[ "$(stat -c %s tail.img)" -gt $((OFF + L)) ] || fail "open-ended range: the file did not grow"
"$QEMU_IMG" check -q "$(json tail.img)" || fail "open-ended range: qemu-img check"
"$QEMU_IMG" compare -q "$(json tail.img)" ref.qcow2 || fail "open-ended range: data"
cmp -s -n $OFF prefix tail.img || fail "open-ended range: bytes before it changed"

# Refused, with one line: ranges past the end, raw, create, not qcow2.
size=$(stat -c %s ova.orig)
for args in "image-offset=$((size + 1))" \
            "image-offset=$OFF image-length=$((size - OFF + 1))" \
            "format=raw image-offset=$OFF" "image-offset=$OFF" \
            "create=true size=1M image-offset=$OFF" \
            "image-offset=0"; do
  fmt=format=qcow2
  case $args in format=raw*) fmt= ;; esac
  [ "$args" = "image-offset=$OFF" ] && fmt= # format=auto
  rc=0
  out=$("$NBDKIT" -U - "$IMAGE_PLUGIN" file=ova.orig $fmt $args --run 'exit 0' 2>&1) || rc=$?
  [ $rc != 0 ] || fail "$fmt $args: accepted"
  [ "$(printf '%s\n' "$out" | grep -c error)" = 1 ] || fail "$fmt $args: not one error line: $out"
done
# (image-offset=0 over ova.orig is refused because the file does not
# start with a qcow2 header.)
