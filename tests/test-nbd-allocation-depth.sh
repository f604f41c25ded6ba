#!/usr/bin/env bash
# --allocation-depth on a qcow2 layer served alone (issue 19 item 5).
# nbdkit cannot offer qemu:allocation-depth, which a client (imageio's
# snapshot download and shallow upload) uses on a layer opened with
# "backing": null to tell "not in this layer" from "zero"; qemu-nbd
# offers it.  So with -A and "backing": null on an image that has a
# backing file nbdstack-nbd refuses to start (exit 1, one line naming
# the reason) instead of serving data a client would take for zeroes;
# without -A, with the backing chain followed, or on an image without
# a backing file it serves, and the -A warning no longer claims that
# data is unaffected.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$abs_top_srcdir/tests/nbd-functions.sh"
require nbdsh
require nbdinfo
require qemu-img
require qemu-io
cd "$T"

"$QEMU_IMG" create -q -f qcow2 base.qcow2 4M
"$QEMU_IO" -f qcow2 -c 'write -P 0x11 0 1M' base.qcow2 >/dev/null
"$QEMU_IMG" create -q -f qcow2 -b base.qcow2 -F qcow2 top.qcow2
"$QEMU_IO" -f qcow2 -c 'write -P 0x22 2M 1M' top.qcow2 >/dev/null
alone () { echo "json:{\"driver\": \"qcow2\", \"backing\": null, \"file\": {\"driver\": \"file\", \"filename\": \"$T/$1\"}}"; }
chain () { echo "json:{\"driver\": \"qcow2\", \"file\": {\"driver\": \"file\", \"filename\": \"$T/$1\"}}"; }

# What a client gets from qemu-nbd: the context, which says that the
# first MiB is not in this layer (depth 0) although it reads as zeroes.
start_fg qemu q --persistent -r -A --socket="$T/q.sock" "$(alone top.qcow2)"
nbdinfo --map=qemu:allocation-depth "nbd+unix:///?socket=$T/q.sock" >q.map
stop_fg q
grep -Eq '^ +0 +[0-9]+ +0 +absent' q.map ||
  fail "qemu-nbd: expected depth 0 for the first MiB: $(cat q.map)"

# Ours cannot say that: refused, at start, with one line.
for ro in -r ""; do
  rc=0
  timeout -k 2 10 "$NBDSTACK_NBD" $ro -A --socket="$T/o.sock" "$(alone top.qcow2)" 2>o.err || rc=$?
  [ $rc = 1 ] || fail "-A $ro, backing null: exit $rc, expected 1 ($(cat o.err))"
  [ "$(wc -l <o.err)" = 1 ] || fail "-A $ro: not one line: $(cat o.err)"
  grep -q "allocation-depth" o.err && grep -q "backing file" o.err ||
    fail "-A $ro: the message does not name the reason: $(cat o.err)"
done

# Served: without -A (the layer alone, as qemu-nbd serves it) ...
check () # NAME WANT-FIRST-MIB-BYTE
{
  nbdsh -u "nbd+unix:///?socket=$T/$1.sock" -c "
M = 1 << 20
assert h.pread(M, 0) == bytes([$2]) * M, 'first MiB'
assert h.pread(M, 2 * M) == b'\\x22' * M, 'top layer data'
" || fail "$1: wrong data"
}
start_fg ours a --persistent -r --socket="$T/a.sock" "$(alone top.qcow2)"
check a 0
stop_fg a
# ... with -A and the chain followed (the base's data is read) ...
start_fg ours c --persistent -r -A --socket="$T/c.sock" "$(chain top.qcow2)"
check c 0x11
stop_fg c
grep -q "allocation-depth" "$T/c.log" || fail "-A: no warning"
grep -q "data is unaffected" "$T/c.log" && fail "-A: the warning still says data is unaffected"
# ... and with -A and "backing": null on an image without a backing file.
start_fg ours b --persistent -r -A --socket="$T/b.sock" "$(alone base.qcow2)"
nbdsh -u "nbd+unix:///?socket=$T/b.sock" -c 'assert h.pread(1 << 20, 0) == b"\x11" * (1 << 20)' ||
  fail "base alone with -A: wrong data"
stop_fg b
