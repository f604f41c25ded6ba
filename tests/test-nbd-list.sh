#!/usr/bin/env bash
# nbdstack-nbd -L lists a server's exports as qemu-nbd -L does, and a
# client that hangs up during the handshake is not an error.
#  - on the same server (qemu-nbd's and ours; read-write with a name and
#    a description, and read-only; over a Unix socket and over TCP),
#    nbdstack-nbd -L prints exactly what qemu-nbd -L prints;
#  - what qemu-nbd refuses with -L (a file name, -x, --fork, a missing
#    socket), we refuse with the same message and exit status 1;
#  - clients that connect and hang up during the handshake (at once,
#    after part of the greeting, after the client flags: imageio's probe
#    does the first on every start) leave no line on our stderr.
#    qemu-nbd 7.2 does log them ("write failed: ... Broken pipe", "option
#    negotiation failed: ..."): its count is printed, not asserted.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require nbdinfo
require_filter_version

img=$T/disk.img
truncate -s 3M "$img"
port=$(free_port)

# qemu-nbd 8.2 and later (Debian 13's 10.0) negotiate extended headers
# and so print a "transaction size" line and the block-status-payload
# flag (0x1000) of the servers that offer it; nbdstack-nbd prints qemu-nbd
# 7.2's format (its --version), without both.  Anything else must match.
as_qemu_72 ()
{
  /usr/bin/python3 -c '
import re, sys
for line in sys.stdin.read().splitlines():
    if line.startswith("  transaction size: "):
        continue
    m = re.match(r"(  flags: )0x([0-9a-f]+)( \(.*) block-status-payload( \))$", line)
    if m:
        line = "%s0x%x%s%s" % (m.group(1), int(m.group(2), 16) & ~0x1000,
                                m.group(3), m.group(4))
    print(line)'
}

list_both () # WHAT ARGS...: both -L on the same server must agree
{
  local what=$1 q o
  shift
  q=$("$QEMU_NBD" -L "$@" 2>&1) || fail "$what: qemu-nbd -L failed: $q"
  q=$(as_qemu_72 <<<"$q")
  o=$("$NBDSTACK_NBD" -L "$@" 2>&1) || fail "$what: nbdstack-nbd -L failed: $o"
  [ "$q" = "$o" ] || fail "$what: -L differs:
--- qemu-nbd -L
$q
--- nbdstack-nbd -L
$o"
  grep -q '^exports available: 1$' <<<"$o" || fail "$what: no export listed: $o"
  echo "$what: identical, $(wc -l <<<"$o") lines"
}

for k in qemu ours; do
  start_fg $k rw-$k -t -x exp1 -D "a description" -k "$T/rw-$k.sock" -f raw "$img"
  list_both "$k server, read-write" -k "$T/rw-$k.sock"
  stop_fg rw-$k
  start_fg $k ro-$k -t -r -k "$T/ro-$k.sock" -f raw "$img"
  list_both "$k server, read-only" -k "$T/ro-$k.sock"
  stop_fg ro-$k
done
start_fg ours tcp -t -b 127.0.0.1 -p "$port" -x tcp -f raw "$img"
list_both "ours over TCP" -b 127.0.0.1 -p "$port"
stop_fg tcp

for args in "-x foo" "$img" "--fork" "-k $T/missing.sock" "-o 512"; do
  # shellcheck disable=SC2086 # word splitting is the point
  q=$("$QEMU_NBD" -L $args 2>&1) && fail "qemu-nbd -L $args succeeded"
  # shellcheck disable=SC2086
  o=$("$NBDSTACK_NBD" -L $args 2>&1) && fail "nbdstack-nbd -L $args succeeded"
  [ "${q#qemu-nbd: }" = "${o#nbdstack-nbd: }" ] ||
    fail "-L $args: qemu-nbd says '$q', nbdstack-nbd says '$o'"
done
echo "-L refusals: the same words as qemu-nbd"

# Hang-ups during the handshake.
for k in qemu ours; do
  : >"$T/h-$k.log"
  start_fg $k h-$k -t -k "$T/h-$k.sock" -f raw "$img"
  python3 - "$T/h-$k.sock" <<'PY'
import socket, struct, sys, time
def conn():
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    return s
for _ in range(3):
    conn().close()                      # at once
    s = conn(); s.recv(8); s.close()    # part of the greeting
    s = conn()
    got = b""
    while len(got) < 18:
        got += s.recv(18 - len(got))
    s.sendall(struct.pack(">I", 3))     # client flags, then gone
    s.close()
    time.sleep(0.1)
PY
  sleep 0.5
  # The server still serves.
  [ "$(nbdinfo --size "nbd+unix:///?socket=$T/h-$k.sock")" = 3145728 ] ||
    fail "$k: not serving after the hang-ups"
  stop_fg h-$k
  if [ $k = ours ]; then
    [ ! -s "$T/h-$k.log" ] || fail "ours: hang-ups in the handshake were logged: $(head -5 "$T/h-$k.log")"
  fi
  echo "$k: 9 hang-ups in the handshake, $(wc -l <"$T/h-$k.log") lines on stderr"
done
