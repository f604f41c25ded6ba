#!/usr/bin/env bash
# coalesce: random small writes over a large export.
#  1. 4000 random 512 B writes at queue depth 1 over 16 GiB have nothing
#     to merge with: all go straight down ("nothing to merge with
#     4000", "buffered 0"), so no buffer page is touched;
#  2. the same from two connections, 8 in flight each, all buffered
#     (-D coalesce.buffer_all=1, as writes from connections that
#     interleave are): the pieces written back are tiny, so the buffer
#     leaves huge pages for small ones (the counters say which page
#     size it ended with and that it switched);
#  3. in both, the server's peak RSS grows by less than coalesce-size
#     (64M) plus a margin, and the data reads back right.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
CO=$(filter_so coalesce)
export ASAN_OPTIONS="quarantine_size_mb=0:thread_local_quarantine_size_kb=0:${ASAN_OPTIONS:-}"

counters ()
{
  grep -o 'coalesce: writes in .*' "$1" | tail -n 1
}

# run NAME CONNECTIONS DEPTH [NBDKIT-ARGS...]: print the peak RSS
# growth in MiB.
run ()
{
  local name=$1 conns=$2 depth=$3 pid base peak
  shift 3
  # The file plugin: its data is in the page cache, not in the
  # server's RSS (the memory plugin's would be).
  truncate -s 16G "$T/$name.img"
  start_nbdkit "$name" -v --filter="$CO" file "$T/$name.img" "$@"
  pid=$(pidof_srv "$name")
  base=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
  URI="$(uri "$name")" CONNS=$conns DEPTH=$depth nbdsh -c - <<'PY' || fail "$name: nbdsh failed"
import os, random
rng = random.Random(5)
conns = int(os.environ["CONNS"]); depth = int(os.environ["DEPTH"])
hs = [nbd.NBD() for _ in range(conns)]
for h in hs:
    h.connect_uri(os.environ["URI"])
size = hs[0].get_size()
written = {}
for i in range(4000):
    h = hs[i % conns]
    off = rng.randrange(0, size // 512) * 512
    d = rng.randbytes(512)
    written[off] = d
    if depth == 1:
        h.pwrite(d, off)
    else:
        h.aio_pwrite(d, off)
        while h.aio_in_flight() >= depth:
            h.poll(-1)
for h in hs:
    while h.aio_in_flight() > 0:
        h.poll(-1)
hs[0].flush()
for off, d in written.items():
    assert hs[1 % conns].pread(512, off) == d, "wrong data at %d" % off
PY
  peak=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
  stop_nbdkit "$name"
  rm -f "$T/$name.img"
  echo $(((peak - base) / 1024))
}

margin=16
[ -n "$SANITIZER_PRELOAD" ] && margin=48

grown=$(run qd1 1 1)
c=$(counters "$(logfile qd1)")
echo "queue depth 1: RSS +${grown} MiB; $c"
[[ $c =~ "buffered 0 ".*"nothing to merge with 4000 " ]] ||
  fail "queue depth 1: random writes were buffered: $c"
[ "$grown" -le $((64 + margin)) ] || fail "queue depth 1: RSS grew by $grown MiB"

grown=$(run multi 2 8 -D coalesce.buffer_all=1)
c=$(counters "$(logfile multi)")
echo "two connections: RSS +${grown} MiB; $c"
[[ $c =~ "buffered 4000 " ]] ||
  fail "two connections: writes were not buffered: $c"
[ "$grown" -le $((64 + margin)) ] || fail "two connections: RSS grew by $grown MiB"
if thp_available; then
  [[ $c =~ "page size "([0-9]+)" (switched "([0-9]+)" times)" ]] &&
    [ "${BASH_REMATCH[1]}" -lt 2097152 ] && [ "${BASH_REMATCH[2]}" -ge 1 ] ||
    fail "two connections: the buffer kept huge pages for 512 B pieces: $c"
else
  echo "no transparent huge pages here: page policy not tested"
fi
echo "test-coalesce-random: ok"
