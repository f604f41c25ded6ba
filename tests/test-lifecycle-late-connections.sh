#!/usr/bin/env bash
# lifecycle: the exit after the last client waits for connections nbdkit
# accepted but has not counted.  nbdkit 1.32 counts a connection thread
# only once it runs, and unloads the layers once the counted ones are
# gone; a connection accepted just before (a client probing the socket as
# the last one leaves) whose thread runs late then walks unloaded layers:
# the server died of SIGSEGV at exit about once in 300 such exits on a
# loaded machine (test-nbd-lastclient.sh in CI).  thread-delay-shim.so
# starts every connection thread 0-40 ms late, so that every such exit
# has late threads.  Per round (raw and qcow2, coalesce in the stack, so
# that its writer threads are there too): one client reads and leaves,
# while connections are made back to back from just before it leaves
# until the socket has gone; the
# server must exit 0 by itself and say it waited for the late threads
# until none was left, in at least one round.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
require_filter_version
python3 -c 'import nbd' 2>/dev/null || skip "python3-libnbd is not installed"
SHIM=$abs_builddir/thread-delay-shim.so
[ -f "$SHIM" ] || fail "$SHIM was not built"

truncate -s 4M "$T/disk.raw"
qemu-img create -q -f qcow2 "$T/disk.qcow2" 4M || fail "qemu-img create failed"

waited=0
for round in 1 2 3 4 5 6 7 8; do
  case $((round % 2)) in
    1) img=$T/disk.raw ;;
    0) img=$T/disk.qcow2 ;;
  esac
  name=late$round s=$(sock late$round) l=$(logfile late$round)
  LD_PRELOAD="$SHIM${LD_PRELOAD:+:$LD_PRELOAD}" THREAD_DELAY_MS=40 \
    THREAD_DELAY_SEED=$round start_fg $name -v \
    --filter="$(filter_so lifecycle)" --filter="$(filter_so coalesce)" \
    "$IMAGE_PLUGIN" file="$img" lifecycle-exit-last=true lifecycle-unlink="$s"
  pid=$(pidof_srv $name)

  python3 "$srcdir/probe-until-gone.py" "$s" --during >"$T/late.out" ||
    fail "round $round: client: $(cat "$T/late.out")"

  for ((i = 0; i < 200; i++)); do
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
  done
  kill -0 $pid 2>/dev/null && fail "round $round: the server did not exit after its last client"
  status=0
  wait $pid || status=$?
  [ $status = 0 ] || fail "round $round: the server exited with status $status: $(tail -5 "$l")"
  line=$(grep -E 'lifecycle: waited [0-9]+ ms for [0-9]+ connection threads' "$l" || :)
  echo "round $round ($(basename "$img")): $(cat "$T/late.out"); ${line:-no late threads}"
  if [ -n "$line" ]; then
    [[ $line =~ \(0\ left\) ]] ||
      fail "round $round: the server unloaded with connection threads still running: $line"
    waited=$((waited + 1))
  fi
done
[ $waited -ge 1 ] ||
  fail "no round said it waited for connection threads nbdkit had not counted"
echo "late connections: waited for in $waited of 8 rounds: OK"
