#!/usr/bin/env bash
# nbdstack-nbd against the real qemu-nbd: how many clients, and when the
# server ends.
#  - --shared=1 (the default): while one client is connected a second
#    one is not served (qemu-nbd leaves it waiting, nbdstack-nbd refuses
#    it); once the first has left, the next one is served.
#  - --shared=2: two clients are served at once, not three.
#  - without --persistent the server exits 0 once the last client has
#    left, not before the first one came; with it, it stays.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require nbdinfo
require nbdsh
require_filter_version

img=$T/disk.img
truncate -s 16M "$img"

declare -A hold_pid=()

# A client that holds a connection open until $T/NAME.release exists.
hold ()
{
  local uri=$1 name=$2
  rm -f "$T/$name.held" "$T/$name.release"
  nbdsh -u "$uri" -c "
import os, time
open('$T/$name.held', 'w').close()
while not os.path.exists('$T/$name.release'):
    time.sleep(0.05)
" &
  hold_pid[$name]=$!
  local i
  for ((i = 0; i < 100; i++)); do
    [ -e "$T/$name.held" ] && return 0
    sleep 0.05
  done
  fail "client $name did not connect"
}
release ()
{
  touch "$T/$1.release"
  wait "${hold_pid[$1]}" || fail "client $1 failed"
}

# Is a client served within 3 seconds?  (qemu-nbd queues an extra client
# rather than refusing it, so "not served" is a timeout there.)
served () { timeout 3 nbdinfo --size "$1" >/dev/null 2>&1; }

for k in qemu ours; do
  # --shared=1, persistent.
  s=$T/one-$k.sock
  start_fg $k one-$k -t -k "$s" -f raw "$img"
  uri="nbd+unix:///?socket=$s"
  hold "$uri" one-$k-a
  ! served "$uri" || fail "$k --shared=1: a second client was served"
  release one-$k-a
  served "$uri" || fail "$k --shared=1: the next client after the first was not served"
  stop_fg one-$k
  [ "$exit_status" = 0 ] || fail "$k --shared=1: exit status $exit_status"

  # --shared=2: two at once, not three.
  s=$T/two-$k.sock
  start_fg $k two-$k -t -e 2 -k "$s" -f raw "$img"
  uri="nbd+unix:///?socket=$s"
  hold "$uri" two-$k-a
  served "$uri" || fail "$k --shared=2: a second client was not served"
  hold "$uri" two-$k-b
  ! served "$uri" || fail "$k --shared=2: a third client was served"
  release two-$k-a
  release two-$k-b
  stop_fg two-$k
  [ "$exit_status" = 0 ] || fail "$k --shared=2: exit status $exit_status"

  # Not persistent: running until the first client, exit 0 after the
  # last one.
  s=$T/last-$k.sock
  start_fg $k last-$k -e 2 -k "$s" -f raw "$img"
  uri="nbd+unix:///?socket=$s"
  sleep 1
  wait_exit last-$k 0
  [ "$exit_status" = running ] || fail "$k: not persistent: exited ($exit_status) before any client"
  hold "$uri" last-$k-a
  hold "$uri" last-$k-b
  release last-$k-a
  sleep 1
  wait_exit last-$k 0
  [ "$exit_status" = running ] || fail "$k: not persistent: exited ($exit_status) with a client left"
  release last-$k-b
  wait_exit last-$k 10
  [ "$exit_status" = 0 ] || fail "$k: not persistent: after the last client: $exit_status, expected 0"
  [ ! -e "$s" ] || fail "$k: not persistent: the socket was left behind"

  # Persistent: still there after its last client.
  s=$T/stay-$k.sock
  start_fg $k stay-$k -t -k "$s" -f raw "$img"
  served "nbd+unix:///?socket=$s" || fail "$k: persistent: not served"
  sleep 1
  wait_exit stay-$k 0
  [ "$exit_status" = running ] || fail "$k: persistent: exited ($exit_status) after its client"
  stop_fg stay-$k
  [ "$exit_status" = 0 ] || fail "$k: persistent: exit status $exit_status after SIGTERM"
  echo "$k: client limits and lifetime as expected"
done
