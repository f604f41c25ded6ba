#!/usr/bin/env bash
# nbdstack-nbd: -e/--shared counts only the connections that are open.
#  - with the default (--shared=1), qemu-img convert -O qcow2 -c SRC
#    nbd+unix://... (it connects, sends NBD_CMD_DISC and connects again
#    at once) succeeds, 3 times of 3, as with qemu-nbd, and the result
#    reads back equal to the source;
#  - -e 1 still refuses a second client while the first is connected,
#    and serves a new one once the first has gone; -e 2 refuses a third.
#    (qemu-nbd instead leaves the extra client waiting for a greeting
#    until a place is free: nbdstack-nbd refuses it, see the man page.)
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require nbdinfo
require_filter_version
python3 -c 'import nbd' 2>/dev/null || skip "python3-libnbd is not installed"

src=$T/src.raw
"$QEMU_IMG" create -q -f raw "$src" 16M
"$QEMU_IO" -f raw -c 'write -P 0x33 0 4M' -c 'write -P 0x44 9M 1M' "$src" >/dev/null

for k in qemu ours; do
  for round in 1 2 3; do
    tgt=$T/t-$k.raw
    rm -f "$tgt"; truncate -s 64M "$tgt"
    start_fg $k c-$k -t -k "$T/c-$k.sock" -f raw "$tgt"
    timeout 60 "$QEMU_IMG" convert -O qcow2 -c "$src" "nbd+unix:///?socket=$T/c-$k.sock" \
      2>"$T/convert-$k.err" ||
      fail "$k: compressed convert round $round failed: $(tail -1 "$T/convert-$k.err")"
    stop_fg c-$k
    [ "$exit_status" = 0 ] || fail "$k: exit status $exit_status"
    "$QEMU_IMG" compare -q -f raw -F qcow2 "$src" "$tgt" ||
      fail "$k: round $round: the converted image differs from the source"
  done
  echo "$k: 3 of 3 compressed conversions (disconnect, reconnect) succeeded"
done

# A client that stays connected for a while.
hold () { exec python3 -c 'import nbd, sys, time
h = nbd.NBD(); h.connect_uri(sys.argv[1]); open(sys.argv[2], "w").close(); time.sleep(float(sys.argv[3]))' "$@"; }
wait_for () { local i; for ((i = 0; i < 200; i++)); do [ -e "$1" ] && return 0; sleep 0.05; done; fail "$1 did not appear"; }

img=$T/disk.img
truncate -s 1M "$img"
uri="nbd+unix:///?socket=$T/e1.sock"
start_fg ours e1 -t -e 1 -k "$T/e1.sock" -f raw "$img"
hold "$uri" "$T/h1" 30 & h1=$!
wait_for "$T/h1"
rc=0; timeout 20 nbdinfo --size "$uri" >/dev/null 2>"$T/second.err" || rc=$?
[ $rc = 1 ] || fail "-e 1: a second client while the first is connected: exit $rc, expected 1 (refused)"
# nbdkit's line reaches the log through nbdstack-nbd's stderr relay,
# which may come a moment after the client saw the refusal.
for ((i = 0; i < 100; i++)); do
  grep -q 'too many clients' "$T/e1.log" && break
  sleep 0.1
done
grep -q 'too many clients' "$T/e1.log" || fail "-e 1: the refusal is not logged: $(tail -3 "$T/e1.log")"
kill $h1; wait $h1 2>/dev/null || :
[ "$(timeout 20 nbdinfo --size "$uri")" = 1048576 ] || fail "-e 1: not served after the first client left"
stop_fg e1

uri="nbd+unix:///?socket=$T/e2.sock"
start_fg ours e2 -t -e 2 -k "$T/e2.sock" -f raw "$img"
hold "$uri" "$T/h2a" 30 & h2a=$!
hold "$uri" "$T/h2b" 30 & h2b=$!
wait_for "$T/h2a"; wait_for "$T/h2b"
rc=0; timeout 20 nbdinfo --size "$uri" >/dev/null 2>&1 || rc=$?
[ $rc = 1 ] || fail "-e 2: a third client: exit $rc, expected 1 (refused)"
kill $h2a $h2b; wait $h2a $h2b 2>/dev/null || :
stop_fg e2
echo "-e 1 refuses a second concurrent client, -e 2 a third"
