#!/usr/bin/env bash
# discard: the effect on a real, fully allocated file through nbdkit's
# file plugin and our image plugin (raw): which bytes are freed (stat,
# qemu-img map) and what the file contains afterwards, for every mode,
# granularity and discard-zero-trim.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
DF=$(filter_so discard)

M=$((1024 * 1024))
data_extents ()
{
  "$QEMU_IMG" map -f raw --output=json "$1" |
    python3 -c '
import json, sys
for e in json.load(sys.stdin):
    if e["data"]:
        print("%d+%d" % (e["start"], e["length"]))' | tr '\n' ' '
}
allocated () { echo $(($(stat -c '%b' "$1") * 512)); }

head -c $((8 * M)) /dev/urandom >"$T/orig"
# What the file must contain when [1M, 2M) reads as zero.
{ head -c $M "$T/orig"; head -c $M /dev/zero; tail -c +$((2 * M + 1)) "$T/orig"; } \
  >"$T/zeroed"
# [1M+64K, 2M-64K) zero: what an unaligned trim of [1M+1000, 2M-1000)
# with 64K granularity leaves; in zero mode [1M+1000, 2M-1000) is zero.
{ head -c $((M + 65536)) "$T/orig"; head -c $((M - 131072)) /dev/zero
  tail -c +$((2 * M - 65536 + 1)) "$T/orig"; } >"$T/gran"
{ head -c $((M + 1000)) "$T/orig"; head -c $((M - 2000)) /dev/zero
  tail -c +$((2 * M - 1000 + 1)) "$T/orig"; } >"$T/gran-zero"

n=0
# check PLUGIN NAME SCRIPT EXPECT-CONTENTS EXPECT-FREED [FILTER ARGS...]:
# serve a fresh copy of $T/orig, run the nbdsh SCRIPT, then the file
# must equal EXPECT-CONTENTS (a file) and EXPECT-FREED bytes must have
# been freed.
check ()
{
  local plugin=$1 name=$2 script=$3 want=$4 freed=$5 img before after
  shift 5
  n=$((n + 1))
  img="$T/$plugin-$name.img"
  cp "$T/orig" "$img"
  sync "$img"
  before=$(allocated "$img")
  case $plugin in
    file) start_nbdkit "d$n" --filter="$DF" file file="$img" "$@" ;;
    image) start_nbdkit "d$n" --filter="$DF" "$IMAGE_PLUGIN" format=raw file="$img" "$@" ;;
  esac
  nbdsh -u "$(uri "d$n")" -c "$script"
  after=$(allocated "$img")
  cmp "$img" "$want" || fail "$plugin $name: contents differ from $want"
  # Within 8K: ext4 may count an extent-tree block more or less.
  local d=$((before - after - freed))
  [ "$d" -ge -8192 ] && [ "$d" -le 8192 ] ||
    fail "$plugin $name: freed $((before - after)) bytes, expected $freed"
  echo "$plugin $name: ok (freed $((before - after)))"
}

for p in file image; do
  # pass: the range is punched (a trimmed file range reads as zero)
  check $p pass "h.trim($M, $M)" "$T/zeroed" $M
  # ignore: advertised, nothing changes
  check $p ignore "assert h.can_trim(); h.trim($M, $M)" "$T/orig" 0 discard=ignore
  # zero: reads zero, and MAY_TRIM lets the plugin free the space
  check $p zero "h.trim($M, $M)" "$T/zeroed" $M discard=zero
  # zero + never: reads zero, space stays allocated
  check $p zero-never "h.trim($M, $M)" "$T/zeroed" 0 \
    discard=zero discard-zero-trim=never
  # refuse: not advertised
  check $p refuse "assert not h.can_trim()" "$T/orig" 0 discard=refuse
  # discard-zero-trim on client zero requests
  check $p never "h.zero($M, $M)" "$T/zeroed" 0 discard-zero-trim=never
  check $p always "h.zero($M, $M, nbd.CMD_FLAG_NO_HOLE)" "$T/zeroed" $M \
    discard-zero-trim=always
  check $p keep "h.zero($M, $M, nbd.CMD_FLAG_NO_HOLE)" "$T/zeroed" 0

  # granularity: an unaligned trim frees only the aligned middle, in
  # discard-max pieces, and leaves the unaligned edges (data) alone
  check $p gran "h.trim($M - 2000, $M + 1000)" "$T/gran" $((M - 128 * 1024)) \
    discard-granularity=64K discard-max=256K
  ext=$(data_extents "$T/$p-gran.img")
  [ "$ext" = "0+1114112 2031616+6356992 " ] ||
    fail "$p gran: data extents '$ext', expected a hole of exactly [1M+64K, 2M-64K)"
  # ... and in zero mode the edges are zeroed but stay allocated
  check $p gran-zero "h.trim($M - 2000, $M + 1000)" "$T/gran-zero" $((M - 128 * 1024)) \
    discard=zero discard-granularity=64K
  ext=$(data_extents "$T/$p-gran-zero.img")
  [ "$ext" = "0+1114112 2031616+6356992 " ] ||
    fail "$p gran-zero: data extents '$ext', expected a hole of exactly [1M+64K, 2M-64K)"
done
echo "PASS: discard allocation is as expected"
