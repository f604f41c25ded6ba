#!/usr/bin/env bash
# image plugin, raw, cache=none, with clients in libnbd's default strict
# mode (nbdsh, nbdcopy, python3-libnbd all are): libnbd refuses requests
# that break the advertised minimum block size before they leave the
# client.  The plugin handles unaligned requests (bounce buffers,
# read-modify-write), so it must advertise minimum 1, and so must every
# filter stacked over it, or a strict client cannot write, zero or trim
# less than a sector and cannot reach an odd-sized file's tail at all.
# On a file of odd size and on loop devices (512 and 4096-byte sectors),
# directly and through zerodetect, discard and coalesce.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require nbdinfo
require losetup
require_filter_version
[ -x "$RANDOPS" ] || fail "$RANDOPS not built"
require_loop_devices
ZD=$(filter_so zerodetect)
DF=$(filter_so discard)
CO=$(filter_so coalesce)

# expect_block_size NAME MIN PREF MAX: what nbdinfo reports for server NAME.
expect_block_size ()
{
  local name=$1
  nbdinfo "$(uri "$name")" >"$T/$name.info"
  # Newer nbdinfo (libnbd 1.22, Debian 13) adds a human form: "4096 (4K)".
  grep -E 'block_size' "$T/$name.info" | tr -d '\t' |
    sed 's/ ([^)]*)$//' >"$T/$name.bs"
  printf 'block_size_minimum: %s\nblock_size_preferred: %s\nblock_size_maximum: %s\n' \
    "$2" "$3" "$4" >"$T/$name.bs.want"
  diff -u "$T/$name.bs.want" "$T/$name.bs" ||
    fail "$name: unexpected block sizes advertised"
}

# strict_ops NAME SIZE: unaligned write, zero and trim through a strict
# nbdsh handle, including the last, partial sector.
strict_ops ()
{
  nbdsh -u "$(uri "$1")" -c '
import os
size = '"$2"'
# The point of this test: libnbd must be checking alignment.
assert h.get_strict_mode() & nbd.STRICT_ALIGN
assert h.get_size() == size
data = os.urandom(5000)
h.pwrite(data, 1001)
assert h.pread(5000, 1001) == data
h.zero(777, 1500)
assert h.pread(5000, 1001) == data[:499] + bytes(777) + data[1276:]
h.trim(333, 4000)
tail = os.urandom(3)
h.pwrite(tail, size - 3, nbd.CMD_FLAG_FUA)
assert h.pread(3, size - 3) == tail
h.zero(2, size - 2, nbd.CMD_FLAG_NO_HOLE)
assert h.pread(3, size - 3) == tail[:1] + bytes(2)
h.flush()
'
}

# check NAME BACKING SEED [RANDOPS-ARGS...]: strict differential random
# operations on server NAME at any offset and length (randops only
# relaxes libnbd's strict mode with --unaligned, never given here); then
# the backing file must hold exactly what randops verified.
check ()
{
  local name=$1 backing=$2 seed=$3
  shift 3
  "$RANDOPS" -c 2 --interleave --stripe=65536 -n 800 --seed="$seed" "$@" \
    --dump="$T/$name.dump" "$(uri "$name")" ||
    fail "$name: randops failed with a strict client"
  cmp -n "$(stat -c %s "$T/$name.dump")" "$T/$name.dump" "$backing" ||
    fail "$name: the backing file differs from the export"
}

mkimg ()
{
  truncate -s "$2" "$1"
  dd if=/dev/urandom of="$1" bs=1M count=3 seek=2 conv=notrunc status=none
}

# Control: randops really is strict.  A server advertising a 512-byte
# minimum must see it fail on its first unaligned request, client-side.
truncate -s 8M "$T/ctl.img"
start_nbdkit ctl --filter=blocksize-policy "$IMAGE_PLUGIN" file="$T/ctl.img" \
  blocksize-minimum=512
if "$RANDOPS" -n 50 "$(uri ctl)" >"$T/ctl.out" 2>&1; then
  fail "randops sent only aligned requests or is not in strict mode"
fi
grep -q 'unaligned' "$T/ctl.out" || fail "control: $(cat "$T/ctl.out")"

# A file whose size is not a multiple of 512, cache=none.
osize=$((16 * 1024 * 1024 + 777))
mkimg "$T/odd.img" $osize
start_nbdkit odd "$IMAGE_PLUGIN" file="$T/odd.img" cache=none
expect_block_size odd 1 4096 67108864
strict_ops odd $osize
check odd "$T/odd.img" 1
[ "$(stat -c %s "$T/odd.img")" -eq $osize ] || fail "odd: the file size changed"

# The same through zerodetect and discard (each alone too: a filter that
# raised the minimum would hide behind one that does not).
for stack in zd df zddf; do
  case $stack in
    zd) filters=(--filter="$ZD") ;;
    df) filters=(--filter="$DF") ;;
    zddf) filters=(--filter="$ZD" --filter="$DF") ;;
  esac
  start_nbdkit "$stack" "${filters[@]}" "$IMAGE_PLUGIN" file="$T/odd.img" \
    cache=none
  expect_block_size "$stack" 1 4096 67108864
done
strict_ops zddf $osize
check zddf "$T/odd.img" 2
stop_nbdkit zd
stop_nbdkit df
stop_nbdkit zddf

# coalesce buffers writes, so it gets its own file.  Random trims go
# through it too: the plugin with O_DIRECT trims only whole sectors, so
# the partial sectors at a trim's edges must still read back the last
# data written there (randops accepts "old or zero"), which coalesce
# guarantees by writing buffered data down before a trim.
mkimg "$T/co.img" $osize
start_nbdkit co --filter="$CO" --filter="$ZD" --filter="$DF" \
  "$IMAGE_PLUGIN" file="$T/co.img" cache=none
expect_block_size co 1 4096 67108864
strict_ops co $osize
check co "$T/co.img" 3
stop_nbdkit co

# Loop devices: 512-byte sectors (O_DIRECT alignment 512, preferred
# still 4096) and 4096-byte sectors (alignment and preferred 4096).  The
# backing file is a whole number of 4K pages, not of 64K: the loop driver
# sizes a device in 512-byte units even with 4K sectors, leaving a last
# partial sector that even the kernel cannot read or write.
for sector in 512 4096; do
  img=$T/loop$sector.img
  mkimg "$img" $((16 * 1024 * 1024 + 12288))
  dev=$(losetup -f --show --sector-size $sector "$img") ||
    fail "losetup --sector-size $sector failed"
  # Hooks run last-registered first: servers are stopped before this.
  on_exit "losetup -d '$dev'"
  [ "$(blockdev --getss "$dev")" -eq $sector ] || fail "$dev: sector size"
  dsize=$(blockdev --getsize64 "$dev")

  name=blk$sector
  start_nbdkit $name "$IMAGE_PLUGIN" file="$dev" cache=none
  expect_block_size $name 1 4096 67108864
  strict_ops $name "$dsize"
  check $name "$img" $((10 + sector))
  stop_nbdkit $name

  name=wb$sector
  start_nbdkit $name "$IMAGE_PLUGIN" file="$dev"
  expect_block_size $name 1 4096 67108864
  stop_nbdkit $name

  name=stack$sector
  start_nbdkit $name --filter="$CO" --filter="$ZD" --filter="$DF" \
    "$IMAGE_PLUGIN" file="$dev" cache=none
  expect_block_size $name 1 4096 67108864
  strict_ops $name "$dsize"
  check $name "$img" $((20 + sector))
  stop_nbdkit $name
done
