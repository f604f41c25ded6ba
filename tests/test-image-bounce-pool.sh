#!/usr/bin/env bash
# image plugin, cache=none: the shared pool of O_DIRECT bounce buffers
# (lib/hostfile/bounce.c) under concurrency.  8 connections (nbdkit's
# 16 threads each: 128 worker threads) send unaligned reads and writes
# of up to 5 MiB, larger than a pool buffer, so requests are copied
# through their buffer in chunks and their partial sectors are patched;
# raw (a file whose size is not a multiple of 512) and qcow2 (64K and
# 512-byte clusters).  The export must match randops' reference byte for
# byte, the file must hold it afterwards, and the pool must have made no
# more buffers than there were requests in flight (one per connection:
# randops waits for each reply), not one per worker thread.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
[ -x "$RANDOPS" ] || fail "$RANDOPS not built"
cd "$T"

# pool_made NAME: how many buffers the pool made (after the stop).
pool_made ()
{
  local n
  n=$(sed -n 's/.*bounce pool: \([0-9]*\) buffer(s) of .*/\1/p' \
    "$(logfile "$1")")
  [ -n "$n" ] || fail "$1: no bounce pool summary in the log"
  echo "$n"
}

# run NAME FORMAT FILE PLUGIN-PARAMS...
run ()
{
  local name=$1 fmt=$2 file=$3 out made
  shift 3
  # nbdkit in the foreground, -v, so that the pool's summary at unload
  # reaches $(logfile NAME).
  start_fg "$name" -v "$IMAGE_PLUGIN" file="$T/$file" cache=none "$@"
  out=$("$RANDOPS" -c 8 -n 1200 --max-len=$((5 * 1024 * 1024)) --seed=21 \
    --dump="$T/$name.ref" "$(uri "$name")") ||
    fail "$name: randops found a difference: $out"
  echo "$name: $out"
  stop_nbdkit "$name"
  ! grep -v ': debug: ' "$(logfile "$name")" | grep -q "error" ||
    fail "$name: the server logged an error: $(grep -v ': debug: ' "$(logfile "$name")" | grep error)"
  "$QEMU_IMG" compare -q -f raw -F "$fmt" "$name.ref" "$file" ||
    fail "$name: the image differs from randops' verified contents"
  [ "$fmt" = raw ] || "$QEMU_IMG" check -q "$file" ||
    fail "$name: qemu-img check failed"
  made=$(pool_made "$name")
  echo "$name: the pool made $made buffer(s)"
  [ "$made" -ge 1 ] && [ "$made" -le 8 ] ||
    fail "$name: $made bounce buffers for 8 requests in flight"
}

size=$((64 * 1024 * 1024 + 777))
truncate -s $size raw.img
dd if=/dev/urandom of=raw.img bs=1M count=8 seek=20 conv=notrunc status=none
run raw raw raw.img format=raw
[ "$(stat -c %s raw.img)" -eq $size ] || fail "raw: the file size changed"

run q64k qcow2 q64k.qcow2 format=qcow2 create=true size=64M
run q512 qcow2 q512.qcow2 format=qcow2 create=true size=64M cluster-size=512
