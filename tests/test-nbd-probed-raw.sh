#!/usr/bin/env bash
# nbdstack-nbd without -f on a raw file (issue 18 item 6), side by side
# with qemu-nbd: both probe the format, guess raw, and refuse (EPERM) a
# write that would put a qcow2 header into block 0, leaving the file a
# raw disk; with -f raw both accept it.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$abs_top_srcdir/tests/nbd-functions.sh"
require nbdsh
require qemu-img
cd "$T"

"$QEMU_IMG" create -q -f qcow2 hdr.qcow2 1G
WRITE='
import errno, sys
try:
    h.pwrite(open("hdr.qcow2", "rb").read(65536), 0)
    h.flush()
    print("accepted")
except nbd.Error as e:
    print("EPERM" if e.errnum == errno.EPERM else "error %s" % e)
'
for kind in qemu ours; do
  for f in probe raw; do
    rm -f disk.raw
    truncate -s 4M disk.raw
    args=()
    [ $f = raw ] && args=(-f raw)
    start_fg $kind $kind-$f --socket="$T/$kind-$f.sock" "${args[@]}" disk.raw
    got=$(nbdsh -u "nbd+unix:///?socket=$T/$kind-$f.sock" -c "$WRITE")
    stop_fg $kind-$f
    case $f in
      probe) want=EPERM ;;
      raw) want=accepted ;;
    esac
    [ "$got" = "$want" ] || fail "$kind, -f $f: the header write: $got, expected $want"
    if [ $f = probe ]; then
      cmp -s -n 512 /dev/zero disk.raw || fail "$kind: refused write changed block 0"
      grep -q "probing guessed raw" "$T/$kind-$f.log" ||
        fail "$kind: no warning that the format was probed"
    else
      cmp -s -n 65536 hdr.qcow2 disk.raw || fail "$kind -f raw: the write was not made"
    fi
  done
done
