#!/usr/bin/env bash
# image plugin, raw: the size is taken at each connection's open (issue
# 19 item 11), as nbdkit's file plugin does (its test-truncate4): a file
# that grows or shrinks between connections is served to each new
# connection at its new size, with the bytes it then has, while a
# connection already open keeps the size it saw and is still served.
# For files (cache=writeback and cache=none, where a new size that is
# not sector-aligned has its tail served through the page cache) and for
# a block device (a loop device, resized with losetup -c).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require losetup
[ "$(id -u)" -eq 0 ] || fail "needs root for losetup (CI runs as root)"
cd "$T"

# check URI: the export has the file's current size and its bytes.
check () # NAME FILE
{
  nbdsh -u "$(uri $1)" -c "
import os
want = open('$2', 'rb').read()
n = h.get_size()
assert n == len(want), ('size', n, len(want))
assert h.pread(n, 0) == want, 'contents'
# Write the last byte and read it back: the new end is writable.
h.pwrite(b'Z', n - 1)
assert h.pread(1, n - 1) == b'Z'
h.flush()
" || fail "$1: a new connection does not see $2 as it is now"
}

for cache in writeback none; do
  head -c 512 /dev/urandom >f.raw
  start_nbdkit f-$cache "$IMAGE_PLUGIN" file=f.raw format=raw cache=$cache
  check f-$cache f.raw
  # A connection that stays open across the changes, in the background.
  nbdsh -u "$(uri f-$cache)" -c '
import time
n = h.get_size()
assert n == 512
open("held.ready", "w").close()
while not __import__("os").path.exists("held.go"):
    time.sleep(0.05)
assert h.get_size() == 512
h.pread(512, 0)
h.pwrite(b"q" * 512, 0)
h.flush()
' &
  held=$!
  for ((i = 0; i < 200; i++)); do [ -e held.ready ] && break; sleep 0.05; done
  [ -e held.ready ] || fail "the held connection did not start"
  # Grow by an unaligned amount, grow to 1 MiB, shrink to 1000 bytes.
  head -c 2000 /dev/urandom >>f.raw
  check f-$cache f.raw
  head -c $((1048576 - 2512)) /dev/urandom >>f.raw
  check f-$cache f.raw
  truncate -s 1000 f.raw
  check f-$cache f.raw
  touch held.go
  wait $held || fail "cache=$cache: the connection open before the changes failed"
  rm -f held.ready held.go
  stop_nbdkit f-$cache
done

# A block device: grow the loop device's file and tell the kernel.
truncate -s 1M b.img
dev=$(losetup -f --show b.img) || fail "losetup failed"
on_exit "losetup -d '$dev'"
on_exit stop_all_servers
start_nbdkit blk "$IMAGE_PLUGIN" file="$dev" format=raw
[ "$(nbdinfo --size "$(uri blk)")" = 1048576 ] || fail "loop device: first size"
truncate -s 3M b.img
losetup -c "$dev"
[ "$(nbdinfo --size "$(uri blk)")" = 3145728 ] ||
  fail "loop device: a new connection does not see the grown device"
