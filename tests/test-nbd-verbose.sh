#!/usr/bin/env bash
# nbdstack-nbd: -v shows what qemu-nbd -v shows.
#  - serving a socket, qemu-nbd -v writes nothing on stderr for a
#    connection that reads and writes: nbdstack-nbd -v neither (nbdkit's
#    debug output was hundreds of lines per connection);
#  - with --fork, -v keeps the caller's stderr open in the daemon: what
#    qemu-nbd's documentation says and qemu-nbd 8.2 and later do (7.2
#    points it at /dev/null with or without -v: checked here too, so
#    that a change in the installed qemu-nbd shows);
#  - nbdkit's debug output is our setting nbdkit-debug=on.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require nbdinfo
require_filter_version
python3 -c 'import nbd' 2>/dev/null || skip "python3-libnbd is not installed"

img=$T/disk.img
truncate -s 4M "$img"
one_connection () {
  nbdsh -u "nbd+unix:///?socket=$1" \
    -c 'h.pwrite(b"x" * 4096, 0)' -c 'assert h.pread(4096, 0) == b"x" * 4096' -c 'h.flush()'
}

for k in qemu ours; do
  : >"$T/v-$k.log"
  start_fg $k v-$k -v -t -k "$T/v-$k.sock" -f raw "$img"
  one_connection "$T/v-$k.sock"
  stop_fg v-$k
  [ "$exit_status" = 0 ] || fail "$k -v: exit status $exit_status"
  n=$(wc -l <"$T/v-$k.log")
  echo "$k -v: $n lines on stderr for one connection"
  [ "$n" = 0 ] || fail "$k -v: $n lines on stderr: $(head -5 "$T/v-$k.log")"
done

: >"$T/d.log"
NBDSTACK_OPTIONS=nbdkit-debug=on start_fg ours d -t -k "$T/d.sock" -f raw "$img"
one_connection "$T/d.sock"
stop_fg d
n=$(grep -c 'debug:' "$T/d.log" || :)
echo "ours nbdkit-debug=on: $n debug lines"
[ "$n" -gt 20 ] || fail "nbdkit-debug=on: only $n debug lines"

for k in qemu ours; do
  prog=$(server_prog $k)
  "$prog" --fork -v --pid-file="$T/fv-$k.pid" -t -k "$T/fv-$k.sock" -f raw "$img" \
    2>>"$T/fv-$k.err" || fail "$k --fork -v: exit status $?"
  pid=$(cat "$T/fv-$k.pid")
  fd2=$(readlink "/proc/$pid/fd/2")
  stop_pids "$pid"
  rm -f "$T/fv-$k.pid"
  case $k,$("$QEMU_NBD" --version | head -1 | grep -o ' 7[.]2[.]' || :) in
    qemu,' 7.2.') want=/dev/null ;;
    *) want=$T/fv-$k.err ;;
  esac
  [ "$fd2" = "$want" ] || fail "$k --fork -v: the daemon's stderr is $fd2, expected $want"
  echo "$k --fork -v: the daemon's stderr is $fd2"
done
