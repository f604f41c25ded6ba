#!/usr/bin/env bash
# coalesce copies only what will merge:
#  1. writes with nothing to merge with (scattered, at queue depth 1,
#     4K to 512K) reach the plugin at once, uncopied, as they were sent
#     and in the order they were sent: with coalesce-delay at ten minutes
#     they are in the file before any flush, nbdkit's log filter below
#     shows them unchanged, and the counters say "nothing to merge with"
#     for all of them and "buffered 0";
#  2. a direct write over part of a buffered run is not overtaken by the
#     older buffered bytes: after the flush the file holds the newest
#     data everywhere;
#  3. small writes that do merge are still buffered: 64 x 512 B in
#     sequence reach the plugin as the first one alone and one write of
#     the other 63, and only at the flush.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
CO=$(filter_so coalesce)

counters ()
{
  grep -o 'coalesce: writes in .*' "$1" | tail -n 1
}

writes_below ()
{
  sed -n -E 's/^.* connection=[0-9]+ (Write|Flush) id=[0-9]+ ?(offset=0x[0-9a-f]+ count=0x[0-9a-f]+)?.*\.\.\.$/\1 \2/p' "$1" |
    sed 's/ *$//'
}

truncate -s 64M "$T/disk.img"
start_nbdkit d -v --filter="$CO" --filter=log file "$T/disk.img" \
  logfile="$T/below.log" coalesce-delay=600000
export DISK="$T/disk.img" URI="$(uri d)" REF="$T/ref.img"
nbdsh -c - <<'PY' || fail "nbdsh failed"
import os
h = nbd.NBD(); h.connect_uri(os.environ["URI"])
ref = bytearray(64 << 20)
K = 1024
def w(off, n, byte=None):
    d = os.urandom(n)
    h.pwrite(d, off)
    ref[off:off + n] = d
def on_disk(off, n):
    with open(os.environ["DISK"], "rb") as f:
        f.seek(off)
        return f.read(n)

# 1. Scattered writes, no neighbour: in the file before any flush.
lone = [(10 << 20, 256 * K), (40 << 20, 4 * K), (5 << 20, 128 * K),
        (50 << 20, 512 * K), (20 << 20, 64 * K), (2 << 20, 16 * K)]
for off, n in lone:
    w(off, n)
for off, n in lone:
    assert on_disk(off, n) == ref[off:off + n], \
        "write of %d at %d not in the file before the flush" % (n, off)
h.flush()

# 2. A buffered run of 4K writes at 30M (the first goes down alone),
# then a 256K write over its second half: the newest data wins.
for i in range(8):
    w((30 << 20) + i * 4 * K, 4 * K)
assert on_disk((30 << 20) + 4 * K, 28 * K) != ref[(30 << 20) + 4 * K:(30 << 20) + 32 * K], \
    "the run of small writes was not buffered"
w((30 << 20) + 16 * K, 256 * K)
h.flush()

# 3. 64 x 512 B in sequence: buffered (but the first) until the flush.
for i in range(64):
    w((60 << 20) + i * 512, 512)
assert on_disk((60 << 20) + 512, 63 * 512) != ref[(60 << 20) + 512:(60 << 20) + 32 * K], \
    "sequential small writes were not buffered"
h.flush()
open(os.environ["REF"], "wb").write(ref)
h.shutdown()
PY
stop_nbdkit d
cmp "$T/ref.img" "$T/disk.img" || fail "the file differs from what was written"

writes_below "$T/below.log" >"$T/below.got"
cat >"$T/below.want" <<'EOF'
Write offset=0xa00000 count=0x40000
Write offset=0x2800000 count=0x1000
Write offset=0x500000 count=0x20000
Write offset=0x3200000 count=0x80000
Write offset=0x1400000 count=0x10000
Write offset=0x200000 count=0x4000
Flush
Write offset=0x1e00000 count=0x1000
Write offset=0x1e04000 count=0x40000
Write offset=0x1e01000 count=0x3000
Flush
Write offset=0x3c00000 count=0x200
Write offset=0x3c00200 count=0x7e00
Flush
EOF
diff -u "$T/below.want" <(head -n 14 "$T/below.got") ||
  fail "unexpected requests below the filter"

c=$(counters "$(logfile d)")
echo "counters: $c"
# 6 lone writes, the first of the 4K run, the 256K write, the first
# 512 B write; buffered: 7 + 63.
[[ $c =~ "writes in 79 ".*" buffered 70 ".*"nothing to merge with 9 " ]] ||
  fail "counters do not show the split: $c"
echo "test-coalesce-direct: ok"
