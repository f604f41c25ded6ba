#!/usr/bin/env bash
# nbdstack-nbd: SIGTERM stops the server at once, clients connected or
# not, with everything acknowledged flushed, as qemu-nbd does (imageio
# stops its local qemu-nbd with SIGTERM and gives up after 10 s).
#  - idle client: the server exits with status 0 long before the client
#    leaves (asserted: under 5 s while the client stays 30 s; measured
#    time printed), and every write the client had acknowledged is in
#    the image.  For us this runs with the coalesce buffer on and its
#    write-back delay at 10 minutes, so the acknowledged writes are only
#    in the buffer when the signal comes: they reach the image only
#    through the drain's flush.
#  - active I/O to a qcow2 image (8 writes in flight): the server exits
#    with status 0 within 5 s, the image passes qemu-img check, every
#    write acknowledged reads back, and no request got ESHUTDOWN.
# Each case runs with the real qemu-nbd too.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require nbdinfo
require_filter_version
python3 -c 'import nbd' 2>/dev/null || skip "python3-libnbd is not installed"
writer="$srcdir/nbd-writer.py"

elapsed () { python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$@"; }

# ---- an idle client
for k in qemu ours; do
  img=$T/idle-$k.img
  truncate -s 16M "$img"
  opts=
  [ $k = ours ] && opts="coalesce=on coalesce-delay=600000"
  NBDSTACK_OPTIONS=$opts start_fg $k idle-$k -t -k "$T/idle-$k.sock" -f raw "$img"
  rm -f "$T/ready-$k"
  python3 "$writer" idle "nbd+unix:///?socket=$T/idle-$k.sock" "$T/ready-$k" 30 \
    2>>"$T/client-$k.log" &
  client=$!
  for ((i = 0; i < 200; i++)); do [ -e "$T/ready-$k" ] && break; sleep 0.05; done
  [ -e "$T/ready-$k" ] || fail "$k: the idle client did not write"
  t0=$(now)
  kill -TERM "$(fg_pid idle-$k)"
  wait_exit idle-$k 5
  t1=$(now)
  [ "$exit_status" != running ] ||
    fail "$k: still running 5 s after SIGTERM with an idle client connected"
  kill -0 $client 2>/dev/null ||
    fail "$k: the client left before the server exited: nothing was shown"
  [ "$exit_status" = 0 ] || fail "$k: exit status $exit_status after SIGTERM"
  echo "$k: exited $(elapsed "$t0" "$t1") s after SIGTERM with an idle client connected"
  kill $client 2>/dev/null || :
  wait $client 2>/dev/null || :
  # Every acknowledged write is in the image.
  python3 - "$img" <<'PY' || fail "$k: acknowledged writes are missing from the image after SIGTERM"
import sys
with open(sys.argv[1], "rb") as f:
    for n in range(16):
        if f.read(65536) != bytes([(n % 251) + 1]) * 65536:
            sys.exit(1)
PY
done

# ---- active I/O
for k in qemu ours; do
  img=$T/busy-$k.qcow2
  "$QEMU_IMG" create -q -f qcow2 "$img" 64M
  start_fg $k busy-$k -t -k "$T/busy-$k.sock" -f qcow2 "$img"
  rm -f "$T/ready-$k" "$T/acked-$k"
  python3 "$writer" busy "nbd+unix:///?socket=$T/busy-$k.sock" "$T/ready-$k" \
    "$T/acked-$k" 2>>"$T/client-$k.log" &
  client=$!
  for ((i = 0; i < 400; i++)); do [ -e "$T/ready-$k" ] && break; sleep 0.05; done
  [ -e "$T/ready-$k" ] || fail "$k: the busy client did not get going"
  sleep 0.5
  t0=$(now)
  kill -TERM "$(fg_pid busy-$k)"
  wait_exit busy-$k 5
  t1=$(now)
  [ "$exit_status" != running ] || fail "$k: still running 5 s after SIGTERM during I/O"
  [ "$exit_status" = 0 ] || fail "$k: exit status $exit_status after SIGTERM during I/O"
  echo "$k: exited $(elapsed "$t0" "$t1") s after SIGTERM during I/O"
  for ((i = 0; i < 200; i++)); do kill -0 $client 2>/dev/null || break; sleep 0.05; done
  kill $client 2>/dev/null && fail "$k: the client did not notice the server had gone"
  wait $client || :
  [ -s "$T/acked-$k" ] || fail "$k: the client recorded nothing"
  ! grep -q '^error ESHUTDOWN' "$T/acked-$k" ||
    fail "$k: requests were answered ESHUTDOWN: $(grep -c '^error' "$T/acked-$k") errors"
  "$QEMU_IMG" check -q "$img" || fail "$k: qemu-img check after SIGTERM during I/O"
  "$QEMU_IMG" convert -O raw "$img" "$T/busy-$k.raw"
  bad=$(python3 "$writer" check "$T/busy-$k.raw" "$T/acked-$k")
  [ "$bad" = 0 ] || fail "$k: $bad acknowledged writes do not read back"
  echo "$k: $(grep -c '^acked' "$T/acked-$k") writes acknowledged, all read back;" \
       "$(grep -c '^error' "$T/acked-$k" || :) requests failed (connection dropped)"
done
