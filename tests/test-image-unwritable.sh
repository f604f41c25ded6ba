#!/usr/bin/env bash
# An image that cannot be opened for writing (issue 19 item 7): it is
# never served as a read-only export in place of the writable one asked
# for.  qemu-nbd exits 1 ("Operation not permitted") without -r; the
# plugin cannot see nbdkit -r at start-up, so it opens the image
# read-only and refuses every connection that is not read-only, with
# one line that names the file and the reason, for raw and qcow2 (a
# client sees the connection fail, not a read-only disk).  nbdkit -r and
# readonly=true serve it read-only.  The case: an immutable file
# (chattr +i, which even root cannot open for writing: EPERM; EACCES
# and EROFS take the same path).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require qemu-img
require qemu-nbd
cd "$T"

head -c 1M /dev/urandom >d.raw
"$QEMU_IMG" create -q -f qcow2 d.qcow2 1M
chattr +i d.raw d.qcow2 2>/dev/null ||
  fail "chattr +i is not supported in $T (the test needs ext4, XFS or btrfs)"
on_exit "chattr -i '$T/d.raw' '$T/d.qcow2'"

# The reference: qemu-nbd refuses both without -r.
for f in raw qcow2; do
  rc=0
  timeout 10 "$QEMU_NBD" -f $f --socket="$T/q.sock" d.$f 2>q.err || rc=$?
  [ $rc = 1 ] || fail "qemu-nbd, immutable $f: exit $rc (expected 1)"
  grep -q "Operation not permitted" q.err || fail "qemu-nbd: $(cat q.err)"
done

for f in raw qcow2; do
  for cache in writeback none; do
    for fmt in format=$f format=auto; do
      # In the foreground: a daemonized nbdkit's later errors do not
      # reach its log.
      rc=0
      timeout 60 "$NBDKIT" --log=stderr -U - "$IMAGE_PLUGIN" file=d.$f $fmt \
        cache=$cache --run 'nbdsh -u "$uri" -c "print(h.is_read_only())"' \
        >c.out 2>n.err || rc=$?
      [ $rc != 0 ] && [ $rc != 124 ] ||
        fail "immutable $f, $fmt cache=$cache: served ($(cat c.out)) instead of refusing the connection (exit $rc)"
      grep -q "d.$f: cannot open for writing: Operation not permitted" n.err ||
        fail "immutable $f, $fmt: unexpected message: $(cat n.err)"
      [ "$(grep -c 'error' n.err)" = 1 ] ||
        fail "immutable $f, $fmt: not one error line: $(cat n.err)"
    done

    start_nbdkit ro-$f-$cache "$IMAGE_PLUGIN" file=d.$f readonly=true cache=$cache
    [ "$(nbdsh -u "$(uri ro-$f-$cache)" -c 'print(h.is_read_only())')" = True ] ||
      fail "immutable $f with readonly=true: not read-only"
    stop_nbdkit ro-$f-$cache
    start_nbdkit r-$f-$cache -r "$IMAGE_PLUGIN" file=d.$f cache=$cache
    [ "$(nbdsh -u "$(uri r-$f-$cache)" -c 'print(h.is_read_only())')" = True ] ||
      fail "immutable $f with nbdkit -r: not read-only"
    stop_nbdkit r-$f-$cache
  done
done
