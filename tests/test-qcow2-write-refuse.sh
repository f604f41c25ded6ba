#!/usr/bin/env bash
# What a writable open of the qcow2 library refuses, each with its own
# message (see qcow2_open_writable and qcow2_rc_open): dirty images,
# external data files, and a refcount table naming one block twice.
# Autoclear bits are cleared.  A plain image, one with internal
# snapshots and one with extended L2 entries open.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/test-qcow2-functions.sh"
require qemu-img
unit=$abs_builddir/test-qcow2-write-unit
cd "$T"

refused () # IMAGE MESSAGE
{
  ! "$unit" openw "$1" 2>err.out ||
    fail "$1: a writable open succeeded"
  grep -q "$2" err.out || fail "$1: expected '$2', got: $(cat err.out)"
}

"$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k plain.qcow2 1M
"$unit" openw plain.qcow2 || fail "a plain image does not open writable"

cp plain.qcow2 dirty.qcow2
patch dirty.qcow2 field 72 Q 1
refused dirty.qcow2 "the image is dirty"

cp plain.qcow2 snap.qcow2
"$QEMU_IMG" snapshot -c s1 snap.qcow2
"$unit" openw snap.qcow2 || fail "an image with a snapshot does not open writable"

"$QEMU_IMG" create -q -f qcow2 -o extended_l2=on ext.qcow2 1M
"$unit" openw ext.qcow2 || fail "an extended L2 image does not open writable"

"$QEMU_IMG" create -q -f qcow2 -o data_file=data.raw df.qcow2 1M
refused df.qcow2 "external data file is not supported yet"

# Two table entries for one block: entry 1 becomes entry 0.
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512 dup.qcow2 8M
"$QEMU_IO" -f qcow2 -c 'write 0 4M' dup.qcow2 >/dev/null
/usr/bin/python3 - dup.qcow2 <<'PY'
import struct, sys
f = open(sys.argv[1], "r+b")
reftable = struct.unpack_from(">Q", f.read(56), 48)[0]
f.seek(reftable)
e0, e1 = struct.unpack(">QQ", f.read(16))
assert e1 != 0, "the image needs two refcount blocks"
f.seek(reftable + 8)
f.write(struct.pack(">Q", e0))
PY
refused dup.qcow2 "names block .* twice"

# An unknown autoclear bit is cleared by the writable open.
cp plain.qcow2 auto.qcow2
patch auto.qcow2 field 88 Q '1 << 40'
"$unit" openw auto.qcow2 || fail "autoclear: the writable open failed"
[ "$(/usr/bin/python3 -c 'import struct, sys
print(struct.unpack_from(">Q", open(sys.argv[1], "rb").read(96), 88)[0])' \
     auto.qcow2)" = 0 ] || fail "autoclear bits were not cleared"
"$QEMU_IMG" check -q auto.qcow2 || fail "auto.qcow2 is not clean"
