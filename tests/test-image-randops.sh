#!/usr/bin/env bash
# image plugin, raw: differential random operations (randops) in
# cache=writeback and cache=none, with 4 connections writing disjoint
# interleaved regions in parallel, then the image file itself compared
# with randops' verified contents.  (Loop devices: test-image-loop.sh;
# concurrent sub-sector writes to shared sectors: test-image-rmw.sh.)
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
[ -x "$RANDOPS" ] || fail "$RANDOPS not built"
# nbdkit takes over a second to stop: signal every server at once.

# The file starts with data in the middle, so that zeroes, trims and
# unaligned writes meet old contents and holes alike.
mkimg ()
{
  truncate -s "$2" "$1"
  dd if=/dev/urandom of="$1" bs=1M count=3 seek=5 conv=notrunc status=none
}

# check NAME FILE RANDOPS-ARGS...: run randops on server NAME, then the
# file must hold exactly what randops verified over NBD.
check ()
{
  local name=$1 file=$2
  shift 2
  "$RANDOPS" "$@" --dump="$T/$name.dump" "$(uri "$name")" ||
    fail "$name: randops found a difference"
  cmp "$T/$name.dump" "$file" || fail "$name: the file differs from the export"
}

# cache=writeback: 4 connections striped 64K apart, unaligned requests,
# extents checked as it goes (ranges reported zero must read as zero).
mkimg "$T/wb.img" 24M
start_nbdkit wb "$IMAGE_PLUGIN" file="$T/wb.img" format=raw
check wb "$T/wb.img" -c 4 --interleave --stripe=65536 -n 2000 --seed=11 \
  --check-extents

# cache=none: sector-aligned requests only, which take the direct path
# (minimum 1 and preferred 4096 advertised: test-image-strict.sh).
mkimg "$T/dio.img" 24M
start_nbdkit dio "$IMAGE_PLUGIN" file="$T/dio.img" cache=none
check dio "$T/dio.img" -c 4 --interleave --stripe=65536 -n 1500 --seed=12 \
  --align=512 --check-extents

# cache=none: any offset and length, so every unaligned edge goes
# through the bounce buffers and the partial-sector read-modify-write,
# on a file whose size is not a multiple of 512 either.
mkimg "$T/diou.img" $((16 * 1024 * 1024 + 777))
start_nbdkit diou "$IMAGE_PLUGIN" file="$T/diou.img" cache=none
check diou "$T/diou.img" -c 4 --interleave --stripe=65536 -n 1500 --seed=14 \
  --check-extents

# A file whose size is not a multiple of 512, writeback.
mkimg "$T/odd.img" $((16 * 1024 * 1024 + 777))
start_nbdkit odd "$IMAGE_PLUGIN" file="$T/odd.img"
check odd "$T/odd.img" -c 2 -n 1500 --seed=13
[ "$(stat -c %s "$T/odd.img")" -eq $((16 * 1024 * 1024 + 777)) ] ||
  fail "odd: the file size changed"
