#!/usr/bin/env bash
# coalesce: once a flush (on any connection) or a FUA write has been
# answered, SIGKILL of the server loses nothing written before it.  The
# writes are small, scattered and out of order across two connections,
# with a long coalesce-delay so that only the flush/FUA can have written
# them.  Data written after the last flush may be lost (volatile cache):
# the test also checks that it was in fact still only in the buffer,
# which proves the file's contents came from the flush.  Each scattered
# write is followed by a small one right after it, which the filter
# buffers (a lone write goes down directly); the test checks that some
# of the data was still only in the buffer before the flush.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
CO=$(filter_so coalesce)

for plugin in file image; do
  truncate -s 16M "$T/$plugin.img"
  if [ $plugin = file ]; then
    args=(file "$T/$plugin.img")
  else
    args=("$IMAGE_PLUGIN" file="$T/$plugin.img")
  fi
  start_nbdkit $plugin --filter="$CO" "${args[@]}" coalesce-delay=600000
  export DISK="$T/$plugin.img" URI="$(uri $plugin)" REF="$T/$plugin.ref"

  nbdsh -c - <<'PY' || fail "$plugin: nbdsh failed"
import os, random
rng = random.Random(7)
a = nbd.NBD(); a.connect_uri(os.environ["URI"])
b = nbd.NBD(); b.connect_uri(os.environ["URI"])
ref = bytearray(16 << 20)
def w(h, off, n, flags=0):
    d = rng.randbytes(n)
    h.pwrite(d, off, flags)
    ref[off:off + n] = d
def on_disk():
    with open(os.environ["DISK"], "rb") as f:
        return f.read()
# 400 small writes, out of order, both connections, overlapping, each
# followed by a small write that touches it.
for i in range(400):
    h = a if i % 2 else b
    off, n = rng.randrange(0, (16 << 20) - 80000), rng.randrange(1, 70000)
    w(h, off, n)
    w(h, off + n, rng.randrange(1, 5000))
assert on_disk() != bytes(ref), \
    "every write already in the file before the flush: the test proves nothing"
a.flush()                     # covers b's writes too (multi-conn)
# A FUA write with older unflushed writes before it: the FUA reply
# covers those too in this filter (flush semantics).
for i in range(50):
    w(b, rng.randrange(0, (16 << 20) - 5000), rng.randrange(1, 5000))
w(a, 12345, 4096, nbd.CMD_FLAG_FUA)
# Now nothing is buffered or unflushed: these FUA writes take the
# filter's shortcut (the plugin's own FUA).
for i in range(20):
    w(b, rng.randrange(0, (16 << 20) - 5000), rng.randrange(1, 5000),
      nbd.CMD_FLAG_FUA)
open(os.environ["REF"], "wb").write(ref)
# Unflushed tail: a run of small writes (all but the first buffered)
# must still be only in the buffer when we kill.
for i in range(16):
    w(a, (8 << 20) + i * 4096, 4096)
with open(os.environ["DISK"], "rb") as f:
    f.seek((8 << 20) + 4096)
    assert f.read(61440) != ref[(8 << 20) + 4096:(8 << 20) + 65536], \
        "unflushed data already in the file: the test proves nothing"
PY
  kill -9 "$(pidof_srv $plugin)"
  rm -f "$T/$plugin.pid"
  # Compare everything except the unflushed 64K at 8M.
  cmp -n $((8 << 20)) "$T/$plugin.ref" "$T/$plugin.img" ||
    fail "$plugin: data flushed before SIGKILL is missing"
  cmp -i $(((8 << 20) + 65536)) "$T/$plugin.ref" "$T/$plugin.img" ||
    fail "$plugin: data flushed before SIGKILL is missing (after 8M)"
done
echo "coalesce durability: OK"
