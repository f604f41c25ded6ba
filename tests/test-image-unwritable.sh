#!/usr/bin/env bash
# An image that cannot be opened for writing (issue 19 item 7): without
# readonly=true the plugin refuses to start, with one line that names
# the file and the reason, for raw and qcow2, as qemu-nbd exits 1
# ("Operation not permitted") without -r; it is never served as a
# read-only export in place of the writable one asked for.  With
# readonly=true it is served.  The case: an immutable file (chattr +i,
# which even root cannot open for writing: EPERM; EACCES and EROFS take
# the same path).
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
    rc=0
    timeout 20 "$NBDKIT" -f --log=stderr -U "$T/n.sock" "$IMAGE_PLUGIN" \
      file=d.$f format=$f cache=$cache 2>n.err || rc=$?
    [ $rc != 0 ] && [ $rc != 124 ] ||
      fail "immutable $f, cache=$cache: started (exit $rc) instead of refusing"
    grep -q "d.$f: cannot open for writing: Operation not permitted" n.err ||
      fail "immutable $f, cache=$cache: unexpected message: $(cat n.err)"
    [ "$(grep -c 'error' n.err)" = 1 ] ||
      fail "immutable $f, cache=$cache: not one line: $(cat n.err)"
    # format=auto takes the same path.
    rc=0
    timeout 20 "$NBDKIT" -f --log=stderr -U "$T/n.sock" "$IMAGE_PLUGIN" \
      file=d.$f cache=$cache 2>n.err || rc=$?
    [ $rc != 0 ] && [ $rc != 124 ] || fail "immutable $f, format=auto: started"

    start_nbdkit ro-$f-$cache "$IMAGE_PLUGIN" file=d.$f readonly=true cache=$cache
    [ "$(nbdsh -u "$(uri ro-$f-$cache)" -c 'print(h.is_read_only())')" = True ] ||
      fail "immutable $f with readonly=true: not read-only"
    stop_nbdkit ro-$f-$cache
  done
done
