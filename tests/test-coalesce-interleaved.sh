#!/usr/bin/env bash
# coalesce-interleaved: writes of 64K and more from several connections
# writing at once.
#  - direct: they reach the plugin uncopied, as sent;
#  - buffer: those of a connection with other requests in flight (a
#    pipelining client, nbdcopy) are copied into the buffer and written
#    back merged in ascending order, one request for the whole region;
#    those of a connection at queue depth 1 (imageio) go down uncopied;
#  - auto (the default): buffer when the plugin was given cache=none,
#    else direct;
#  - either way a small write among them is still buffered, and the file
#    holds what was written.
# Connection A keeps one 32K write in flight for seconds (nbdkit's delay
# filter below the filter), so connection B's writes all arrive while
# two connections write.  B keeps one zero in flight the same way (so
# it pipelines from its first write on) and sends 8 x 256K in
# descending order, which only the buffer turns into one ascending
# write; with QD1=1 B sends them one at a time and no zero, and A's
# slow request is a zero (DW=0: writes are not delayed).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
CO=$(filter_so coalesce)

counters ()
{
  grep -o 'coalesce: writes in .*' "$1" | tail -n 1
}

# writes_below LOG: the writes the plugin got, offset and count, in order.
writes_below ()
{
  sed -n -E 's/^.* connection=[0-9]+ Write id=[0-9]+ (offset=0x[0-9a-f]+ count=0x[0-9a-f]+).*\.\.\.$/\1/p' "$1"
}

# run NAME [PARAM...]: A's slow write at 0, B's eight 256K writes at
# 16M-18M (descending) and one 4K write at 32M, then a flush.
run ()
{
  local name=$1
  shift
  truncate -s 64M "$T/$name.img"
  start_nbdkit "$name" -v --filter="$CO" --filter=log --filter=delay \
    file "$T/$name.img" logfile="$T/$name-below.log" delay-write="${DW:-3}" \
    delay-zero=3 coalesce-delay=600000 "$@"
  URI="$(uri "$name")" QD1="${QD1:-0}" REF="$T/$name.ref" nbdsh -c - <<'PY' || fail "$name: nbdsh failed"
import os, time
uri = os.environ["URI"]
a = nbd.NBD(); a.connect_uri(uri)
b = nbd.NBD(); b.connect_uri(uri)
ref = bytearray(64 << 20)
K = 1024
def data(off, n):
    d = os.urandom(n)
    ref[off:off + n] = d
    return d
# A: one write that stays in flight below the filter for 3 s, small
# enough for libnbd to send it whole without polling A (alone at queue
# depth 1 it goes down directly).
if os.environ["QD1"] == "1":
    ca = a.aio_zero(64 * K, 48 << 20)  # writes below are not delayed
else:
    ca = a.aio_pwrite(data(0, 32 * K), 0)
time.sleep(0.5)
assert not a.aio_command_completed(ca), "A's write did not stay in flight"
cmds = []
if os.environ["QD1"] == "1":
    for i in reversed(range(8)):
        b.pwrite(data((16 << 20) + i * 256 * K, 256 * K),
                 (16 << 20) + i * 256 * K)
else:
    # B's zero stays in flight below the filter for 3 s.
    cmds.append(b.aio_zero(64 * K, 40 << 20))
    time.sleep(0.3)
    assert not b.aio_command_completed(cmds[0]), "B's zero did not stay in flight"
    cmds += [b.aio_pwrite(data((16 << 20) + i * 256 * K, 256 * K),
                          (16 << 20) + i * 256 * K)
             for i in reversed(range(8))]
cmds.append(b.aio_pwrite(data(32 << 20, 4 * K), 32 << 20))
for h in (b, a):
    while h.aio_in_flight() > 0:
        h.poll(-1)
assert all(b.aio_command_completed(c) for c in cmds)
assert a.aio_command_completed(ca)
b.flush()
open(os.environ["REF"], "wb").write(ref)
a.shutdown(); b.shutdown()
PY
  stop_nbdkit "$name"
  cmp "$T/$name.ref" "$T/$name.img" || fail "$name: the file differs from what was written"
  writes_below "$T/$name-below.log" >"$T/$name.below"
  echo "$name: $(counters "$(logfile "$name")")"
  echo "$name: writes below:"; sed 's/^/  /' "$T/$name.below"
}

# check_direct NAME [WRITES] / check_buffer NAME: what the run did.
check_direct ()
{
  local c
  c=$(counters "$(logfile "$1")")
  [[ $c =~ "writes in ${2:-10} ".*" buffered 1 (4096 bytes)" ]] ||
    fail "$1: expected only the 4K write buffered: $c"
  n=$(grep -c 'count=0x40000$' "$T/$1.below")
  [ "$n" = 8 ] || fail "$1: expected B's 8 writes of 256K below, got $n"
}
check_buffer ()
{
  local c
  c=$(counters "$(logfile "$1")")
  [[ $c =~ "writes in 10 ".*" buffered 9 (2101248 bytes)" ]] ||
    fail "$1: expected B's nine writes buffered: $c"
  grep -qx 'offset=0x1000000 count=0x200000' "$T/$1.below" ||
    fail "$1: B's region did not reach the plugin as one 2M write"
}

run default
check_direct default
run buffer coalesce-interleaved=buffer
check_buffer buffer
# auto follows the plugin's cache parameter.
run auto-none cache=none
check_buffer auto-none
grep -q 'interleaved=buffer (auto: cache=none below)' "$(logfile auto-none)" ||
  fail "auto-none: the debug line does not say why it buffers"
run auto-default cache=default
check_direct auto-default
run direct-none coalesce-interleaved=direct cache=none
check_direct direct-none
# buffer copies nothing for a connection at queue depth 1: its writes
# have no neighbour on the way.
QD1=1 DW=0 run buffer-qd1 coalesce-interleaved=buffer
check_direct buffer-qd1 9

echo "test-coalesce-interleaved: ok"
