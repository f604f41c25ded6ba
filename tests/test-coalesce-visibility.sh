#!/usr/bin/env bash
# coalesce: data acknowledged on one connection is read back by another
# connection before any flush, block status reports it as data, and
# the file below does not have it yet (so the reads really came from
# the buffer); a flush on the *other* connection then puts it in the
# file (multi-conn).  Zeroing buffered data drops it: the zeroed bytes
# never reach the file as a write.  Every write is buffered here
# (-D coalesce.buffer_all=1: a lone write would go straight down, see
# test-coalesce-direct.sh).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
CO=$(filter_so coalesce)

truncate -s 4M "$T/disk.img"
start_nbdkit srv --filter="$CO" --filter=log file "$T/disk.img" \
  logfile="$T/requests.log" coalesce-delay=600000 coalesce-threads=1 \
  -D coalesce.buffer_all=1
export DISK="$T/disk.img" URI="$(uri srv)"

nbdsh -c - <<'PY' || fail "nbdsh checks failed"
import os
def conn():
    h = nbd.NBD()
    h.add_meta_context("base:allocation")
    h.connect_uri(os.environ["URI"])
    return h
a = conn()
b = conn()
assert a.can_multi_conn() and a.can_flush() and a.can_fua()

def disk(off, n):
    with open(os.environ["DISK"], "rb") as f:
        f.seek(off)
        return f.read(n)

data = os.urandom(3000)
a.pwrite(data, 100001)
assert b.pread(3000, 100001) == data, "other connection does not see the write"
# A read straddling buffered and unbuffered bytes.
got = b.pread(8192, 98304)
assert got[100001 - 98304:100001 - 98304 + 3000] == data
assert got[:100001 - 98304] == bytes(100001 - 98304)
assert disk(100001, 3000) == bytes(3000), "data reached the file before a flush"

# Block status over a hole that only the buffer fills reports data,
# and stays inside the request.
ext = []
def cb(meta, off, entries, err):
    if meta == "base:allocation":
        ext.extend(entries)
b.block_status(65536, 65536 + 32768, cb)
assert sum(ext[0::2]) <= 65536, "extents past the request: %r" % ext
pos = 65536 + 32768
for i in range(0, len(ext), 2):
    if pos < 100001 + 3000 and pos + ext[i] > 100001:
        assert ext[i + 1] & 1 == 0, "buffered range reported as a hole: %r" % ext
    pos += ext[i]
assert pos > 100001, "extents do not reach the buffered range: %r" % ext

# Zero the middle of the buffered write.
a.zero(1000, 101001)
expect = bytearray(data)
expect[1000:2000] = bytes(1000)
assert b.pread(3000, 100001) == bytes(expect)

b.flush()
assert disk(100001, 3000) == bytes(expect), "flush on another connection did not write the data"
a.shutdown()
b.shutdown()
PY
stop_nbdkit srv
# Below the filter: the zero, then the two pieces of the buffered write
# that the zero left, then the flush.  The zeroed bytes were never
# written.
sed -n -E 's/^.*(Write|Zero|Flush) id=[0-9]+ ?(.*) \.\.\.$/\1 \2/p' \
  "$T/requests.log" | sed 's/ *$//' >"$T/got"
cat >"$T/want" <<'EOF'
Zero offset=0x18a89 count=0x3e8 trim=1 fua=0 fast=0
Write offset=0x186a1 count=0x3e8 fua=0
Write offset=0x18e71 count=0x3e8 fua=0
Flush
EOF
diff -u "$T/want" <(head -4 "$T/got") ||
  fail "unexpected requests below the filter"
echo "coalesce visibility: OK"
