#!/usr/bin/env bash
# image plugin, raw: injected faults (fault-shim.so preloaded into nbdkit,
# acting only on the image's file descriptors) under differential random
# operations, on a file and a loop device, cache=writeback and
# cache=none, directly and through zerodetect, discard and coalesce.
#
#  - Retryable faults (EINTR, short reads and writes) and refused calls
#    (RWF_DSYNC, fallocate modes, BLKZEROOUT, BLKDISCARD answering "not
#    supported", which the plugin must replace by its fallbacks): every
#    request must succeed and the data must match randops' reference
#    exactly, over NBD and in the backing file.
#  - EIO: every injected error must reach the client as a failed request
#    (randops --allow-eio counts them; the plugin alone must fail exactly
#    as many requests as errors were injected), and every request that
#    succeeded must be intact: no silent loss.
#
# Every run asserts from the shim's counters that the faults it is about
# were really injected.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require losetup
require_filter_version
[ -x "$RANDOPS" ] || fail "$RANDOPS not built"
SHIM=$abs_builddir/fault-shim.so
[ -f "$SHIM" ] || fail "$SHIM not built"
require_loop_devices
ZD=$(filter_so zerodetect)
DF=$(filter_so discard)
CO=$(filter_so coalesce)

# Retryable faults on every read and write of the image.
RETRY=(FAULT_EINTR=10 FAULT_SHORT=20)

# serve NAME PATH FAULT-VARS... -- NBDKIT-ARGS...: start nbdkit with the
# shim injecting faults into PATH's descriptors; counters go to
# $T/NAME.faults when it exits.
serve ()
{
  local name=$1 path=$2
  shift 2
  local vars=() seed=$RANDOM
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  # A new seed every time covers more over many runs; the faults hit by
  # concurrent requests vary anyway.  Logged, for reproducing a failure.
  echo "$name: FAULT_SEED=$seed ${vars[*]}"
  (
    export LD_PRELOAD="$SHIM${LD_PRELOAD:+:$LD_PRELOAD}"
    export FAULT_PATH="$path" FAULT_LOG="$T/$name.faults" FAULT_SEED=$seed
    for v in "${vars[@]}"; do export "$v"; done
    start_nbdkit "$name" "$@"
  ) || fail "$name: nbdkit did not start"
}

# count NAME KEY...: the sum of these shim counters over nbdkit's
# processes (valid once the server has stopped).
count ()
{
  local name=$1
  shift
  [ -s "$T/$name.faults" ] || fail "$name: the shim wrote no counters"
  awk -v keys="$*" '
    BEGIN { n = split(keys, k, " "); for (i = 1; i <= n; i++) want[k[i]] = 1 }
    {
      for (f = 1; f <= NF; f++) {
        split($f, kv, "=")
        if (kv[1] in want) s += kv[2]
      }
    }
    END { print s + 0 }' "$T/$name.faults"
}

# expect_faults NAME KEY...: each of these counters must be non-zero.
expect_faults ()
{
  local name=$1 key n
  shift
  for key in "$@"; do
    n=$(count "$name" "$key")
    [ "$n" -gt 0 ] ||
      fail "$name: no $key fault was injected: $(cat "$T/$name.faults")"
    echo "$name: $key=$n"
  done
}

# run NAME BACKING RANDOPS-ARGS...: randops on server NAME, then stop the
# server (its counters are written at exit) and compare the backing file
# with what randops verified (the prefix of the export's size).
run ()
{
  local name=$1 backing=$2
  shift 2
  "$RANDOPS" -c 2 --interleave --stripe=65536 --dump="$T/$name.dump" "$@" \
    "$(uri "$name")" >"$T/$name.out" ||
    { cat "$T/$name.out"; fail "$name: randops failed"; }
  cat "$T/$name.out"
  stop_nbdkit "$name"
  cmp -n "$(stat -c %s "$T/$name.dump")" "$T/$name.dump" "$backing" ||
    fail "$name: the backing file differs from what randops verified"
}

# expect_fast_refused NAME: some FAST_ZERO was refused (only the slow
# zero path was left).
expect_fast_refused ()
{
  grep -Eq '\(([1-9][0-9]*) fast refused\)' "$T/$1.out" ||
    fail "$1: no FAST_ZERO was refused"
}

# client_eio NAME: requests that failed with EIO, as randops counted them.
client_eio ()
{
  sed -n -E 's/^randops: ([0-9]+) requests failed with EIO.*/\1/p' "$T/$1.out"
}

# expect_eio_exact NAME: every EIO the shim injected failed one request,
# and there was at least one.  (The runs that use it give fallocate and
# the ioctls no fault but EIO, so their counters are all EIO.)
expect_eio_exact ()
{
  local injected got
  injected=$(count "$1" eio_read eio_write falloc_punch falloc_zero \
    ioctl_zeroout ioctl_discard)
  got=$(client_eio "$1")
  echo "$1: $injected EIO injected, $got requests failed"
  [ "$injected" -gt 0 ] || fail "$1: no EIO was injected"
  [ "$got" = "$injected" ] ||
    fail "$1: $injected EIO injected but $got requests failed with EIO"
}

mkimg ()
{
  truncate -s "$2" "$1"
  dd if=/dev/urandom of="$1" bs=1M count=4 seek=2 conv=notrunc status=none
}

osize=$((16 * 1024 * 1024 + 777))

# ---- A file, cache=writeback.

# ZERO_RANGE refused: zero without MAY_TRIM punches and re-allocates.
img=$T/wb1.img
mkimg "$img" $osize
serve wb1 "$img" "${RETRY[@]}" FAULT_DSYNC=EOPNOTSUPP \
  FAULT_FALLOCATE=zero=EOPNOTSUPP -- "$IMAGE_PLUGIN" file="$img" format=raw
run wb1 "$img" -n 1000 -s 1
expect_faults wb1 eintr short dsync falloc_zero pread pwrite pwritev2

# Punch and ZERO_RANGE refused: zeroes are written, FAST_ZERO refused,
# trim does nothing.
img=$T/wb2.img
mkimg "$img" $osize
serve wb2 "$img" "${RETRY[@]}" \
  FAULT_FALLOCATE=punch=EOPNOTSUPP,zero=EOPNOTSUPP -- \
  "$IMAGE_PLUGIN" file="$img" format=raw
run wb2 "$img" -n 1000 -s 2
expect_faults wb2 eintr short falloc_punch falloc_zero
expect_fast_refused wb2

# EIO from reads, writes and fallocate, on top of the retryable faults.
img=$T/wb3.img
mkimg "$img" $osize
serve wb3 "$img" "${RETRY[@]}" FAULT_EIO=2 \
  FAULT_FALLOCATE=punch=EIO@5,zero=EIO@5 -- \
  "$IMAGE_PLUGIN" file="$img" format=raw
run wb3 "$img" -n 1000 -s 3 --allow-eio
expect_eio_exact wb3

# ---- A file whose size is not a multiple of 512, cache=none (its tail
# goes through a buffered fd, which gets faults too).

# RWF_DSYNC and punch refused: FUA falls back to fdatasync, zero with
# MAY_TRIM to ZERO_RANGE, trim does nothing.
img=$T/dio1.img
mkimg "$img" $osize
serve dio1 "$img" "${RETRY[@]}" FAULT_DSYNC=EOPNOTSUPP \
  FAULT_FALLOCATE=punch=EOPNOTSUPP -- \
  "$IMAGE_PLUGIN" file="$img" format=raw cache=none
run dio1 "$img" -n 1000 -s 4
expect_faults dio1 eintr short dsync falloc_punch pread pwrite

img=$T/dio2.img
mkimg "$img" $osize
serve dio2 "$img" "${RETRY[@]}" FAULT_EIO=2 \
  FAULT_FALLOCATE=punch=EIO@5,zero=EIO@5 -- \
  "$IMAGE_PLUGIN" file="$img" format=raw cache=none
run dio2 "$img" -n 1000 -s 5 --allow-eio
expect_eio_exact dio2

# ---- Loop devices (the backing file keeps the device's contents).
# loopdev IMG: a loop device over a new IMG, in $dev.
loopdev ()
{
  mkimg "$1" $((16 * 1024 * 1024))
  dev=$(losetup -f --show "$1") || fail "losetup failed"
  # Hooks run last-registered first: the servers stop before this.
  on_exit "losetup -d '$dev'"
}

# Every fast way refused: BLKZEROOUT (ENOTTY), BLKDISCARD, punch.
img=$T/loop1.img
loopdev "$img"
serve blk1 "$dev" "${RETRY[@]}" FAULT_DSYNC=EOPNOTSUPP \
  FAULT_FALLOCATE=punch=EOPNOTSUPP \
  FAULT_IOCTL=zeroout=ENOTTY,discard=EOPNOTSUPP -- \
  "$IMAGE_PLUGIN" file="$dev" format=raw
run blk1 "$img" -n 1000 -s 6
expect_faults blk1 eintr short dsync falloc_punch ioctl_zeroout ioctl_discard
expect_fast_refused blk1

# cache=none: BLKZEROOUT refused, punch still works.
img=$T/loop2.img
loopdev "$img"
serve blk2 "$dev" "${RETRY[@]}" FAULT_DSYNC=EOPNOTSUPP \
  FAULT_IOCTL=zeroout=EOPNOTSUPP -- \
  "$IMAGE_PLUGIN" file="$dev" format=raw cache=none
run blk2 "$img" -n 1000 -s 7
expect_faults blk2 eintr short dsync ioctl_zeroout

for cache in writeback none; do
  name=blkeio-$cache
  img=$T/$name.img
  loopdev "$img"
  serve $name "$dev" "${RETRY[@]}" FAULT_EIO=2 \
    FAULT_FALLOCATE=punch=EIO@5 FAULT_IOCTL=zeroout=EIO@5,discard=EIO@5 -- \
    "$IMAGE_PLUGIN" file="$dev" format=raw cache=$cache
  run $name "$img" -n 1000 -s 8 --allow-eio
  expect_eio_exact $name
done

# ---- Through the filters (randops --zero-runs, so that zerodetect
# turns written zeroes into zero requests).

# zerodetect and discard over cache=none: refused calls and EIO.
img=$T/zd1.img
mkimg "$img" $osize
serve zd1 "$img" "${RETRY[@]}" FAULT_DSYNC=EOPNOTSUPP \
  FAULT_FALLOCATE=punch=EOPNOTSUPP -- \
  --filter="$ZD" --filter="$DF" "$IMAGE_PLUGIN" file="$img" format=raw \
  cache=none
run zd1 "$img" -n 1000 -s 9 --zero-runs
expect_faults zd1 eintr short dsync falloc_punch

img=$T/zd2.img
mkimg "$img" $osize
serve zd2 "$img" "${RETRY[@]}" FAULT_EIO=2 \
  FAULT_FALLOCATE=punch=EIO@5,zero=EIO@5 -- \
  --filter="$ZD" --filter="$DF" "$IMAGE_PLUGIN" file="$img" format=raw \
  cache=none
run zd2 "$img" -n 1000 -s 10 --zero-runs --allow-eio
expect_eio_exact zd2

# coalesce in front of both, over a writeback file.  coalesce writes in
# the background and retries what failed, so an injected EIO reaches the
# client later (as a failed flush) or not at all if its retry succeeded
# first; there must be at least one failed request, and the data of every
# request that succeeded must be there.
img=$T/co1.img
mkimg "$img" $osize
serve co1 "$img" "${RETRY[@]}" FAULT_DSYNC=EOPNOTSUPP \
  FAULT_FALLOCATE=zero=EOPNOTSUPP -- \
  --filter="$CO" --filter="$ZD" --filter="$DF" "$IMAGE_PLUGIN" \
  file="$img" format=raw
run co1 "$img" -n 1000 -s 11 --zero-runs
expect_faults co1 eintr short falloc_zero

img=$T/co2.img
mkimg "$img" $osize
serve co2 "$img" "${RETRY[@]}" FAULT_EIO=2 \
  FAULT_FALLOCATE=punch=EIO@5,zero=EIO@5 -- \
  --filter="$CO" --filter="$ZD" --filter="$DF" "$IMAGE_PLUGIN" \
  file="$img" format=raw
run co2 "$img" -n 1000 -s 12 --zero-runs --allow-eio
injected=$(count co2 eio_read eio_write falloc_punch falloc_zero)
got=$(client_eio co2)
echo "co2: $injected EIO injected, $got requests failed"
[ "$injected" -gt 0 ] || fail "co2: no EIO was injected"
[ "$got" -gt 0 ] || fail "co2: $injected EIO injected, none reached the client"

# The stack over a loop device with cache=none, random trims included
# (the plugin trims whole sectors only; coalesce writes buffered data
# down before a trim, so a trim's edges keep the last data written).
img=$T/loop3.img
loopdev "$img"
serve co3 "$dev" "${RETRY[@]}" FAULT_DSYNC=EOPNOTSUPP \
  FAULT_IOCTL=zeroout=EOPNOTSUPP -- \
  --filter="$CO" --filter="$ZD" --filter="$DF" "$IMAGE_PLUGIN" \
  file="$dev" format=raw cache=none
run co3 "$img" -n 1000 -s 13 --zero-runs
expect_faults co3 eintr short ioctl_zeroout
