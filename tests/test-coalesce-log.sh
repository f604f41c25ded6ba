#!/usr/bin/env bash
# coalesce: what reaches the plugin (nbdkit's log filter right below
# coalesce) is few, merged writes, and only writes that merge were
# buffered (a write with nothing to merge with goes down at once):
#  - 64 x 4K written in descending order: the first goes down alone,
#    the other 63 become one write;
#  - two connections writing alternate 64K blocks of 2M, descending:
#    the first goes down alone, the rest become 1M writes
#    (coalesce-max-write=1M), ascending;
#  - writes with gaps between them go down as they came;
#  - a write later covered by a zero goes down before the zero;
#  - a small write next to one that went down alone is buffered, and
#    FUA writes the buffer and flushes before answering; a FUA write
#    with nothing older to flush goes down as one FUA write;
#  - writethrough (second server) still merges concurrent writes;
#  - with the default eight writers, 2000 scattered 64K writes (all
#    buffered: -D coalesce.buffer_all=1) and a flush reach the plugin as whole pieces of coalesce-max-write, each
#    byte written once; the order is ascending up to swapped neighbours
#    (counted and printed, not asserted: the writers run in parallel).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
CO=$(filter_so coalesce)

requests ()
{
  if grep -q ' return=-1' "$1"; then
    fail "$1: a request failed below the filter"
  fi
  sed -n -E 's/^.* connection=[0-9]+ (Write|Zero|Trim|Flush) id=[0-9]+ ?(.*) \.\.\.$/\1 \2/p' \
    "$1" | sed 's/ *$//'
}

start_nbdkit wb --filter="$CO" --filter=log memory 8M \
  logfile="$T/wb-requests.log" coalesce-delay=600000 coalesce-max-write=1M \
  coalesce-threads=1
URI="$(uri wb)" nbdsh -c - <<'PY' || fail "nbdsh failed"
import os
a = nbd.NBD(); a.connect_uri(os.environ["URI"])
b = nbd.NBD(); b.connect_uri(os.environ["URI"])
for i in reversed(range(64)):
    a.pwrite(os.urandom(4096), i * 4096)
a.flush()
for i in reversed(range(32)):
    (a if i % 2 else b).pwrite(os.urandom(65536), (1 << 20) + i * 65536)
b.flush()
for off in (0x402000, 0x400000, 0x404000):
    a.pwrite(os.urandom(4096), off)
a.flush()
a.pwrite(os.urandom(8192), 0x500000)
a.zero(8192, 0x500000)
a.pwrite(os.urandom(512), 0x600200)
a.pwrite(os.urandom(512), 0x600000, nbd.CMD_FLAG_FUA)
# Nothing buffered and nothing unflushed: FUA goes down as FUA alone.
a.pwrite(os.urandom(512), 0x700000, nbd.CMD_FLAG_FUA)
a.pwrite(os.urandom(512), 0x700200, nbd.CMD_FLAG_FUA)
a.shutdown(); b.shutdown()
PY
stop_nbdkit wb
requests "$T/wb-requests.log" >"$T/wb.got"
cat >"$T/wb.want" <<'EOF'
Write offset=0x3f000 count=0x1000 fua=0
Write offset=0x0 count=0x3f000 fua=0
Flush
Write offset=0x2f0000 count=0x10000 fua=0
Write offset=0x100000 count=0x100000 fua=0
Write offset=0x200000 count=0xf0000 fua=0
Flush
Write offset=0x402000 count=0x1000 fua=0
Write offset=0x400000 count=0x1000 fua=0
Write offset=0x404000 count=0x1000 fua=0
Flush
Write offset=0x500000 count=0x2000 fua=0
Zero offset=0x500000 count=0x2000 trim=1 fua=0 fast=0
Write offset=0x600200 count=0x200 fua=0
Write offset=0x600000 count=0x200 fua=0
Flush
Write offset=0x700000 count=0x200 fua=1
Write offset=0x700200 count=0x200 fua=1
EOF
diff -u "$T/wb.want" <(head -n 18 "$T/wb.got") ||
  fail "writeback: unexpected requests below the filter"

# Writethrough: 8 threads x 256 x 4K sequential-ish writes at QD 8 on
# one connection; concurrent writes merge, so fewer writes reach the
# plugin than were sent, and every one is answered only when written.
start_nbdkit wt --filter="$CO" --filter=log --filter=delay memory 8M \
  logfile="$T/wt-requests.log" delay-write=2ms coalesce-mode=writethrough
URI="$(uri wt)" nbdsh -c - <<'PY' || fail "nbdsh failed"
import os
h = nbd.NBD(); h.connect_uri(os.environ["URI"])
data = os.urandom(4096 * 256)
cookies = []
for i in range(256):
    cookies.append(h.aio_pwrite(data[i * 4096:(i + 1) * 4096], i * 4096))
    while h.aio_in_flight() >= 8:
        h.poll(-1)
while h.aio_in_flight() > 0:
    h.poll(-1)
for c in cookies:
    assert h.aio_command_completed(c)
assert h.pread(len(data), 0) == data
PY
stop_nbdkit wt
n=$(requests "$T/wt-requests.log" | grep -c '^Write')
echo "writethrough: 256 client writes became $n plugin writes"
[ "$n" -lt 128 ] || fail "writethrough did not merge concurrent writes ($n)"
start_nbdkit par --filter="$CO" --filter=log memory 128M \
  logfile="$T/par-requests.log" coalesce-delay=600000 coalesce-size=512M \
  coalesce-hugepages=false -D coalesce.buffer_all=1
URI="$(uri par)" nbdsh -c - <<'PY' || fail "nbdsh failed"
import os, random
h = nbd.NBD(); h.connect_uri(os.environ["URI"])
blocks = list(range(2000))
random.Random(1).shuffle(blocks)
data = os.urandom(65536)
for b in blocks:
    h.aio_pwrite(data, b * 65536)
    while h.aio_in_flight() >= 16:
        h.poll(-1)
while h.aio_in_flight() > 0:
    h.poll(-1)
h.flush()
PY
stop_nbdkit par
log_requests "$T/par-requests.log" >"$T/par.got"
python3 - "$T/par.got" <<'PY' || fail "default writers: wrong pieces at the plugin"
import sys
writes = []
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "Write":
        kv = dict(x.split("=") for x in f[1:])
        writes.append((int(kv["offset"], 16), int(kv["count"], 16)))
    elif f[0] == "Flush":
        break
end = 2000 * 65536
pieces = sorted(writes)
# Whole 4M pieces, ascending from 0, each byte once, nothing else.
want = [(o, min(4 << 20, end - o)) for o in range(0, end, 4 << 20)]
assert pieces == want, "pieces %r... want %r..." % (pieces[:4], want[:4])
swapped = sum(1 for a, b in zip(writes, writes[1:]) if b[0] < a[0])
print("default writers: %d pieces of 4M, %d arrived before their "
      "predecessor" % (len(writes), swapped))
PY
echo "coalesce log: OK"
