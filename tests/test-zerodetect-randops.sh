#!/usr/bin/env bash
# zerodetect: differential random-operation tests.  Whatever the filter
# splits, the export must hold exactly what was written, byte for byte.
#  1. $RANDOPS (the shared client: writes, zeroes, trims, flushes, FUA,
#     several connections) through zerodetect over memory, file and image.
#     With --zero-runs its writes hold aligned zero blocks, partial
#     edges and stray bytes, which drives the splitting code.
#  2. A second seeded client here writes buffers made of zero and data
#     runs at unaligned offsets, single-connection and slower but with
#     more edge cases per request.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
ZD=$(filter_so zerodetect)
[ -x "$RANDOPS" ] || fail "$RANDOPS is not built"

SIZE=8M
ZERO_RUNS=$(cat "$srcdir/test-zerodetect-zero-runs.py")

n=0
# serve NAME PLUGIN [ARGS...]: start a server through zerodetect.
serve ()
{
  local name=$1 plugin=$2
  shift 2
  case $plugin in
    memory) start_nbdkit "$name" --filter="$ZD" memory $SIZE "$@" ;;
    file) truncate -s $SIZE "$T/$name.img"
          start_nbdkit "$name" --filter="$ZD" file file="$T/$name.img" "$@" ;;
    image) truncate -s $SIZE "$T/$name.img"
           start_nbdkit "$name" --filter="$ZD" "$IMAGE_PLUGIN" format=raw \
             file="$T/$name.img" "$@" ;;
  esac
}

# check PLUGIN RANDOPS(yes/no) PARAMS...
check ()
{
  local plugin=$1 randops=$2
  shift 2
  n=$((n + 1))
  serve "z$n" "$plugin" "$@"
  nbdsh -u "$(uri "z$n")" -c "seed = $n" -c "$ZERO_RUNS" ||
    fail "$plugin $*: zero-run differential failed (seed $n)"
  if [ "$randops" = yes ]; then
    "$RANDOPS" -c 2 -n 400 -s "$n" --zero-runs --check-extents \
      "$(uri "z$n")" >"$T/z$n.randops" ||
      fail "$plugin $*: randops failed (seed $n)"
  fi
  echo "$plugin $*: ok"
}

# Every mode and granularity edge over memory (fast); the modes that
# reach a file system over file and image.
check memory yes zerodetect=on
check memory no zerodetect=unmap zerodetect-granularity=4K
check memory no zerodetect=unmap zerodetect-granularity=512
check memory no zerodetect=on zerodetect-granularity=0
check memory no zerodetect=on zerodetect-granularity=64M
check memory no zerodetect=off
for plugin in file image; do
  check $plugin yes zerodetect=unmap zerodetect-granularity=4K
  check $plugin no zerodetect=on
done
echo "PASS: zerodetect keeps the data exact"
