#!/usr/bin/env bash
# nbdstack-nbd: SIGKILL of the server process (the one a script started,
# which is also the one --pid-file names) with a client connected and
# writes in flight leaves what SIGKILL of qemu-nbd leaves: no process
# serving, a socket that refuses connections, and no reply to the
# requests in flight (no ESHUTDOWN: qemu's client with reconnect-delay
# must see the connection drop, and reconnect).
# The writes are held in flight by nbdkit's delay filter (3 s per write),
# put in by an NBDSTACK_NBDKIT wrapper.  qemu-nbd cannot be slowed so:
# for it, the client is idle.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require nbdinfo
require_filter_version
python3 -c 'import nbd' 2>/dev/null || skip "python3-libnbd is not installed"
writer="$srcdir/nbd-writer.py"

cat >"$T/slow-nbdkit" <<WRAP
#!/bin/sh
case "\$1" in --version) exec "$NBDKIT" "\$@" ;; esac
exec "$NBDKIT" --filter=delay "\$@" delay-write=3
WRAP
chmod +x "$T/slow-nbdkit"

# Processes still naming the socket SOCK (the client CLIENT excepted):
# the server, or the nbdkit under ours (--unix=SOCK).
left_behind () # CLIENT SOCK
{
  local c p
  for c in /proc/[0-9]*/cmdline; do
    p=${c#/proc/}; p=${p%%/*}
    [ "$p" = "$1" ] && continue
    { tr '\0' ' ' <"$c"; } 2>/dev/null | grep -qF -- "$2" && echo "$p"
  done
  :
}

# How a new client fares: "refused", "absent", "hangs" or "served".
new_client ()
{
  python3 - "$1" <<'PY'
import errno, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
try:
    s.connect(sys.argv[1])
    s.recv(8)
    print("served")
except socket.timeout:
    print("hangs")
except OSError as e:
    print({errno.ECONNREFUSED: "refused", errno.ENOENT: "absent"}.get(e.errno, e.strerror))
PY
}

for k in qemu ours; do
  img=$T/$k.img
  truncate -s 16M "$img"
  sock=$T/$k.sock
  if [ $k = ours ]; then
    NBDSTACK_NBDKIT="$T/slow-nbdkit" start_fg $k $k -t -k "$sock" -f raw "$img"
    pidfile_pid=$(cat "$T/$k.pid")
    python3 "$writer" hold "nbd+unix:///?socket=$sock" "$T/ready-$k" "$T/result-$k" \
      2>>"$T/client-$k.log" &
  else
    start_fg $k $k -t -k "$sock" -f raw "$img"
    python3 "$writer" idle "nbd+unix:///?socket=$sock" "$T/ready-$k" 30 \
      2>>"$T/client-$k.log" &
  fi
  client=$!
  for ((i = 0; i < 200; i++)); do [ -e "$T/ready-$k" ] && break; sleep 0.05; done
  [ -e "$T/ready-$k" ] || fail "$k: the client did not start"
  sleep 0.5
  pid=$(fg_pid $k)
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || :
  rm -f "$T/$k.pid"
  for ((i = 0; i < 100; i++)); do [ -z "$(left_behind $client "$sock")" ] && break; sleep 0.05; done
  [ -z "$(left_behind $client "$sock")" ] ||
    fail "$k: after SIGKILL, still running: $(for p in $(left_behind $client "$sock"); do tr '\0' ' ' </proc/$p/cmdline; echo; done)"
  how=$(new_client "$sock")
  case $how in
    refused | absent) ;;
    *) fail "$k: after SIGKILL, a new client: $how" ;;
  esac
  if [ $k = ours ]; then
    for ((i = 0; i < 100; i++)); do kill -0 $client 2>/dev/null || break; sleep 0.05; done
    wait $client || fail "ours: the client failed: $(tail -3 "$T/client-$k.log")"
    ! grep -q '^acked' "$T/result-$k" || fail "ours: writes in flight were acknowledged after SIGKILL"
    [ "$(grep -c '^error' "$T/result-$k")" -ge 4 ] ||
      fail "ours: the writes in flight did not fail: $(cat "$T/result-$k")"
    ! grep -q '^error ESHUTDOWN' "$T/result-$k" ||
      fail "ours: writes in flight were answered ESHUTDOWN: $(sort "$T/result-$k" | uniq -c)"
    echo "ours: the writes in flight failed with: $(sort -u "$T/result-$k" | tr '\n' ' ')"
    # So SIGKILL of the --pid-file pid is the case above too.
    [ "$pidfile_pid" = "$pid" ] ||
      fail "ours: --pid-file names $pidfile_pid, not the process started ($pid)"
  else
    kill $client 2>/dev/null || :
    wait $client 2>/dev/null || :
  fi
  echo "$k: after SIGKILL nothing is left and a new client is $how"
done
