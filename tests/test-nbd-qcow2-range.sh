#!/usr/bin/env bash
# qcow2 inside a byte range of a file (issue 19 item 6), side by side
# with qemu-nbd: imageio's json: spec for a qcow2 disk inside an OVA,
# qcow2 over raw{offset, size} over file, serves the same disk through
# both (reads, then writes that qemu reads back through the same
# spec), changes no byte outside the range, and a range past the end
# of the file makes both exit 1 at start.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$abs_top_srcdir/tests/nbd-functions.sh"
require nbdsh
require qemu-img
require qemu-io
cd "$T"

M=1048576
OFF=$((3 * 512 + M))
"$QEMU_IMG" create -q -f qcow2 m.qcow2 16M
"$QEMU_IO" -f qcow2 -c 'write -P 0x5a 1M 2M' -c 'write -P 0x33 10M 64k' m.qcow2 >/dev/null
L=$(stat -c %s m.qcow2)
RS=$(( (L + 4 * M + 511) / 512 * 512 ))
head -c $OFF /dev/urandom >prefix
head -c 65536 /dev/urandom >suffix
{ cat prefix m.qcow2; head -c $((RS - L)) /dev/zero; cat suffix; } >ova.orig
spec () # FILE OFFSET SIZE
{
  echo "json:{\"driver\": \"qcow2\", \"file\": {\"driver\": \"raw\", \"offset\": $2, \"size\": $3, \"file\": {\"driver\": \"file\", \"filename\": \"$T/$1\"}}}"
}
WRITES=(-c 'write -P 0x77 5M 3M' -c 'write -P 0x11 15M 1M' -c 'write -z 1M 64k')
cp m.qcow2 ref.qcow2
"$QEMU_IO" -f qcow2 "${WRITES[@]}" ref.qcow2 >/dev/null

for kind in qemu ours; do
  cp ova.orig $kind.ova
  start_fg $kind $kind --persistent --socket="$T/$kind.sock" --cache=none --aio=native \
    --discard=unmap "$(spec $kind.ova $OFF $RS)"
  u="nbd+unix:///?socket=$T/$kind.sock"
  [ "$(nbdinfo --size "$u")" = $((16 * M)) ] || fail "$kind: export size"
  "$QEMU_IMG" compare -q -f raw "$u" -F qcow2 m.qcow2 || fail "$kind: reads differ"
  "$QEMU_IO" -f raw "${WRITES[@]}" "$u" >/dev/null || fail "$kind: writes failed"
  stop_fg $kind
  "$QEMU_IMG" check -q "$(spec $kind.ova $OFF $RS)" || fail "$kind: qemu-img check"
  "$QEMU_IMG" compare -q "$(spec $kind.ova $OFF $RS)" ref.qcow2 ||
    fail "$kind: after the writes the disk differs from the reference"
  cmp -s -n $OFF prefix $kind.ova || fail "$kind: bytes before the range changed"
  [ "$(tail -c 65536 $kind.ova | md5sum)" = "$(md5sum <suffix)" ] ||
    fail "$kind: bytes after the range changed"

  # Ranges past the end of the file: exit 1 at start.
  size=$(stat -c %s ova.orig)
  for r in "$((size + 512)) 512" "$OFF $(( (size - OFF + 512) / 512 * 512 ))"; do
    set -- $r
    rc=0
    timeout -k 2 10 "$(server_prog $kind)" --socket="$T/bad.sock" \
      "$(spec ova.orig $1 $2)" 2>bad.err || rc=$?
    [ $rc = 1 ] || fail "$kind: range $r: exit $rc, expected 1 ($(cat bad.err))"
    grep -q "containing file" bad.err || fail "$kind: range $r: $(cat bad.err)"
  done
done
