#!/usr/bin/env bash
# nbdstack-nbd: --fork, --pid-file and socket activation, each run the
# same way with the real qemu-nbd.
#  - --fork --pid-file returns 0 once the server is ready: at that
#    moment the pid file names a live server (nbdstack-nbd, the
#    supervisor of nbdkit, for us) and the
#    socket accepts; SIGTERM to that pid ends it and its socket goes.
#  - --fork with an image that cannot be served exits 1, leaving no
#    server and no pid file; --fork without --pid-file leaves nothing
#    behind in TMPDIR.
#  - a server started in the background by a shell that then exits
#    keeps running (nbdkit alone would get SIGTERM: it sets a
#    parent-death signal).
#  - systemd socket activation (LISTEN_FDS=1 on fd 3) is served.
#  - a socket left behind by a dead server is replaced.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require nbdinfo
require_filter_version

img=$T/disk.img
truncate -s 16M "$img"
printf 'nbdstack' | dd of="$img" conv=notrunc status=none

for k in qemu ours; do
  prog=$(server_prog $k)
  s=$T/f-$k.sock
  p=$T/f-$k.pid
  "$prog" --fork --pid-file="$p" -t -k "$s" -f raw "$img" 2>>"$T/f-$k.log" ||
    fail "$k --fork: exit status $?"
  # No waiting: ready means ready.
  [ -s "$p" ] || fail "$k --fork: no pid file when the command returned"
  pid=$(cat "$p")
  kill -0 "$pid" || fail "$k --fork: pid $pid from the pid file is not running"
  comm=$(cat "/proc/$pid/comm")
  case $k in
    qemu) [ "$comm" = qemu-nbd ] || fail "qemu --fork: pid file names $comm" ;;
    # The supervisor, which handles SIGTERM as qemu-nbd does and takes
    # nbdkit with it when killed.
    ours) [ "$comm" = nbdstack-nbd ] || fail "ours --fork: pid file names $comm, not nbdstack-nbd" ;;
  esac
  [ "$(nbdinfo --size "nbd+unix:///?socket=$s")" = $((16 * 1024 * 1024)) ] ||
    fail "$k --fork: the socket did not serve the image"
  kill "$pid"
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  ! kill -0 "$pid" 2>/dev/null || fail "$k --fork: still running after SIGTERM"
  for ((i = 0; i < 40; i++)); do [ -e "$s" ] || break; sleep 0.05; done
  [ ! -e "$s" ] || fail "$k --fork: socket left behind"
  rm -f "$p"

  # A failure to start is reported by the command itself.
  rc=0
  "$prog" --fork --pid-file="$p" -t -k "$s" -f raw "$T/missing.img" 2>>"$T/f-$k.log" || rc=$?
  [ $rc = 1 ] || fail "$k --fork with a missing image: exit status $rc, expected 1"
  [ ! -e "$p" ] || fail "$k --fork with a missing image: a pid file was written"

  # Started by a shell that exits at once; found again by its pid file.
  s=$T/bg-$k.sock
  p=$T/bg-$k.pid
  sh -c '"$@" >/dev/null 2>&1 &' sh "$prog" --pid-file="$p" -t -k "$s" -f raw "$img"
  for ((i = 0; i < 100; i++)); do [ -s "$p" ] && break; sleep 0.05; done
  sleep 1
  [ -s "$p" ] && kill -0 "$(cat "$p")" 2>/dev/null ||
    fail "$k: started by a shell that exited: the server did not stay"
  nbdinfo --size "nbd+unix:///?socket=$s" >/dev/null || fail "$k: started by a shell: not serving"
  kill "$(cat "$p")"

  # Socket activation: a listening socket on fd 3.
  s=$T/act-$k.sock
  p=$T/act-$k.pid
  python3 - "$prog" "$s" "$p" "$img" <<'PY' &
import os, socket, sys
prog, sock, pidfile, img = sys.argv[1:]
s = socket.socket(socket.AF_UNIX)
s.bind(sock)
s.listen()
os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
os.execve(prog, [prog, "--pid-file=" + pidfile, "-t", "-f", "raw", img], env)
PY
  act=$!
  for ((i = 0; i < 100; i++)); do [ -s "$p" ] && break; sleep 0.05; done
  [ -s "$p" ] || fail "$k: socket activation: no pid file"
  [ "$(nbdinfo --size "nbd+unix:///?socket=$s")" = $((16 * 1024 * 1024)) ] ||
    fail "$k: socket activation: not served"
  kill "$act"
  rc=0
  wait "$act" || rc=$?
  [ $rc = 0 ] || fail "$k: socket activation: exit status $rc after SIGTERM"
  rm -f "$p"

  # A stale socket (its server gone) at the path.
  s=$T/stale-$k.sock
  python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$s"
  [ -S "$s" ] || fail "could not make a stale socket"
  "$prog" --fork --pid-file="$T/stale-$k.pid" -t -k "$s" -f raw "$img" 2>>"$T/f-$k.log" ||
    fail "$k: a stale socket at the path: exit status $?"
  nbdinfo --size "nbd+unix:///?socket=$s" >/dev/null || fail "$k: a stale socket: not serving"
  echo "$k: --fork, --pid-file, socket activation and stale sockets as expected"
done

# --fork without --pid-file: ours uses a private one and removes it.
# Not persistent, so that it ends after the one client.
mkdir "$T/tmp"
s=$T/np.sock
TMPDIR=$T/tmp "$NBDSTACK_NBD" --fork -k "$s" -f raw "$img" || fail "--fork without --pid-file failed"
[ -z "$(ls -A "$T/tmp")" ] || fail "--fork without --pid-file left $(ls "$T/tmp") behind"
nbdinfo --size "nbd+unix:///?socket=$s" >/dev/null || fail "--fork without --pid-file: not serving"
for ((i = 0; i < 100; i++)); do [ -e "$s" ] || break; sleep 0.05; done
[ ! -e "$s" ] || fail "--fork without --pid-file: still serving after its client"
