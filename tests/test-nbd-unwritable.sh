#!/usr/bin/env bash
# An image that cannot be opened for writing (issue 19 item 7), side by
# side with qemu-nbd: without -r both exit 1 at start with "Operation
# not permitted" (they do not start a read-only server); with -r both
# serve it read-only.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$abs_top_srcdir/tests/nbd-functions.sh"
require nbdsh
require qemu-img
cd "$T"

head -c 1M /dev/urandom >d.raw
"$QEMU_IMG" create -q -f qcow2 d.qcow2 1M
chattr +i d.raw d.qcow2 2>/dev/null ||
  fail "chattr +i is not supported in $T (the test needs ext4, XFS or btrfs)"
on_exit "chattr -i '$T/d.raw' '$T/d.qcow2'"

for kind in qemu ours; do
  prog=$(server_prog $kind)
  for f in raw qcow2; do
    for fmt in "-f $f" ""; do
      rc=0
      timeout -k 2 10 "$prog" $fmt --socket="$T/$kind.sock" d.$f 2>err || rc=$?
      [ $rc = 1 ] || fail "$kind $fmt d.$f: exit $rc, expected 1 ($(cat err))"
      grep -q "Operation not permitted" err || fail "$kind $fmt d.$f: $(cat err)"
      [ "$(wc -l <err)" -le 2 ] || fail "$kind $fmt d.$f: too many lines: $(cat err)"
    done
    start_fg $kind $kind-$f -r -f $f --socket="$T/$kind-$f.sock" d.$f
    [ "$(nbdsh -u "nbd+unix:///?socket=$T/$kind-$f.sock" -c 'print(h.is_read_only())')" = True ] ||
      fail "$kind -r d.$f: not a read-only export"
    stop_fg $kind-$f
  done
done
