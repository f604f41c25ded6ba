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
    python3 - "$sock" <<'PY' >"$T/l-$k.out" || fail "$k round $round: $(cat "$T/l-$k.out")"
import errno, socket, sys, time
import nbd
path = sys.argv[1]
h = nbd.NBD()
h.connect_unix(path)
h.pread(512, 0)
h.shutdown()
del h
seen = {}
deadline = time.time() + 10
while time.time() < deadline:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        seen["accepted"] = seen.get("accepted", 0) + 1
    except OSError as e:
        name = errno.errorcode.get(e.errno, str(e.errno))
        seen[name] = seen.get(name, 0) + 1
        if e.errno == errno.ENOENT:
            break
    finally:
        s.close()
print(" ".join("%s=%d" % kv for kv in sorted(seen.items())))
if "ECONNREFUSED" in seen:
    sys.exit(1)
if "ENOENT" not in seen:
    sys.exit(2)
PY
    wait_exit l-$k 10
    [ "$exit_status" = 0 ] || fail "$k round $round: exit status $exit_status"
    echo "$k round $round: $(cat "$T/l-$k.out")"
  done
done
