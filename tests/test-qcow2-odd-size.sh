#!/usr/bin/env bash
# qcow2 virtual sizes that are not a multiple of 512 (issue 18 item 5).
# qemu keeps a qcow2 virtual size in 512-byte sectors and drops a
# partial last one, so every byte the export accepts must be one qemu
# reads back: create=true size=1000 makes a 1024-byte image, as
# qemu-img create does, and an existing image whose header says 1000 is
# served at the 512 bytes qemu serves.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require qemu-img
require qemu-io
cd "$T"

vsize () { "$QEMU_IMG" info --output=json "$1" |
             python3 -c 'import json,sys; print(json.load(sys.stdin)["virtual-size"])'; }

# The reference: what qemu-img create makes of 1000 bytes.
"$QEMU_IMG" create -q -f qcow2 ref.qcow2 1000
[ "$(vsize ref.qcow2)" = 1024 ] || fail "qemu-img create 1000: $(vsize ref.qcow2)"

start_nbdkit c "$IMAGE_PLUGIN" file=c.qcow2 format=qcow2 create=true size=1000
got=$(nbdsh -u "$(uri c)" -c '
n = h.get_size()
h.pwrite(b"A" * n, 0)
h.flush()
print(n)')
stop_nbdkit c
[ "$got" = 1024 ] || fail "create=true size=1000: export size $got, expected 1024"
[ "$(vsize c.qcow2)" = 1024 ] || fail "created image: qemu sees $(vsize c.qcow2)"
"$QEMU_IO" -f qcow2 -r -c 'read -P 0x41 0 1024' c.qcow2 >/dev/null ||
  fail "qemu does not read back every byte the export accepted"
"$QEMU_IMG" check -q c.qcow2 || fail "created image: qemu-img check"

# create=true on the image it made: the same size, served as it is.
start_nbdkit c2 "$IMAGE_PLUGIN" file=c.qcow2 format=qcow2 create=true size=1000
[ "$(nbdinfo --size "$(uri c2)")" = 1024 ] || fail "create=true again: wrong size"
stop_nbdkit c2

# An image (from another tool) whose header says 1000 bytes: qemu
# serves 512 of them, and so must we.
"$QEMU_IMG" create -q -f qcow2 odd.qcow2 1M
python3 -c '
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(24); f.write(struct.pack(">Q", 1000))' odd.qcow2
q=$(vsize odd.qcow2)
start_nbdkit odd "$IMAGE_PLUGIN" file=odd.qcow2
got=$(nbdinfo --size "$(uri odd)")
stop_nbdkit odd
[ "$got" = "$q" ] || fail "header size 1000: served $got bytes, qemu serves $q"
