#!/usr/bin/env bash
# image plugin, raw: readonly=true and nbdkit -r give a read-only export
# whose writes, zeroes and trims fail with EPERM and leave the file
# untouched.  A file that cannot be opened for writing (immutable) is
# served so with readonly=true and nbdkit -r, and writable connections
# to it are refused (issue 19 item 7), as qemu-nbd refuses it without
# -r; see also test-image-unwritable.sh.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh

img=$T/disk.img
head -c 4M /dev/urandom >"$img"
sum=$(md5sum <"$img")

SCRIPT='
import errno
assert h.is_read_only()
assert h.pread(4096, 8192) == open(IMG, "rb").read()[8192:8192 + 4096]
h.set_strict_mode(0)   # send them anyway: the server must refuse
for what, call in [("write", lambda: h.pwrite(b"x" * 512, 0)),
                   ("write fua", lambda: h.pwrite(b"x" * 512, 0, nbd.CMD_FLAG_FUA)),
                   ("zero", lambda: h.zero(4096, 0)),
                   ("trim", lambda: h.trim(4096, 0))]:
    try:
        call()
    except nbd.Error as e:
        assert e.errnum == errno.EPERM, (what, e)
    else:
        raise AssertionError(what + " succeeded on a read-only export")
'

for cache in writeback none; do
  start_nbdkit ro-$cache "$IMAGE_PLUGIN" file="$img" readonly=true cache=$cache
  nbdsh -u "$(uri ro-$cache)" -c "IMG='$img'" -c "$SCRIPT"
  start_nbdkit r-$cache -r "$IMAGE_PLUGIN" file="$img" cache=$cache
  nbdsh -u "$(uri r-$cache)" -c "IMG='$img'" -c "$SCRIPT"
done

# An immutable file cannot be opened for writing even by root: with
# readonly=true it is served read-only.
if chattr +i "$img" 2>/dev/null; then
  on_exit "chattr -i '$img'"
  start_nbdkit immutable "$IMAGE_PLUGIN" file="$img" readonly=true
  nbdsh -u "$(uri immutable)" -c "IMG='$img'" -c "$SCRIPT"
  stop_nbdkit immutable
  chattr -i "$img"
else
  echo "note: chattr +i not supported on $T, immutable case not run" >&2
fi

[ "$(md5sum <"$img")" = "$sum" ] || fail "a read-only export changed the file"
