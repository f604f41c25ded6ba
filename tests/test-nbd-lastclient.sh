#!/usr/bin/env bash
# nbdstack-nbd without -t: when the last client leaves, the socket is
# removed before the server stops accepting, so a client connecting then
# finds no socket (ENOENT) rather than a socket that refuses it
# (ECONNREFUSED), as with qemu-nbd.  A client connects, reads, sends
# NBD_CMD_DISC and closes; then connections are tried back to back (each
# closed at once) until the socket has gone: none may be refused.
# Repeated 5 times per server; the exit status must be 0.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require nbdinfo
require_filter_version
python3 -c 'import nbd' 2>/dev/null || skip "python3-libnbd is not installed"

img=$T/disk.img
truncate -s 4M "$img"

for k in qemu ours; do
  for round in 1 2 3 4 5; do
    sock=$T/l-$k.sock
    start_fg $k l-$k -k "$sock" -f raw "$img"
    python3 "$srcdir/probe-until-gone.py" "$sock" --refused-fails >"$T/l-$k.out" ||
      fail "$k round $round: $(cat "$T/l-$k.out")"
    wait_exit l-$k 10
    [ "$exit_status" = 0 ] || fail "$k round $round: exit status $exit_status"
    echo "$k round $round: $(cat "$T/l-$k.out")"
  done
done
