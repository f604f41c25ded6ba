#!/usr/bin/env bash
# coalesce: differential random-operation streams (write, zero with and
# without MAY_TRIM, trim, flush, FUA, verifying reads; unaligned) from
# several concurrent connections, over nbdkit's memory and file plugins
# and our image plugin, in both modes, with parameters that force
# back-pressure, chunking and immediate background write-back.  Then a
# clean shutdown without a final flush must leave the file holding
# exactly what randops verified.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require_filter_version
CO=$(filter_so coalesce)
SIZE=$((8 * 1024 * 1024))

# run NAME RANDOPS-ARGS -- NBDKIT-ARGS...
run ()
{
  local name=$1; shift
  local rargs=()
  while [ "$1" != "--" ]; do rargs+=("$1"); shift; done
  shift
  start_nbdkit "$name" --filter="$CO" "$@"
  /usr/bin/time -f "$name %e s" "$RANDOPS" "${rargs[@]}" "$(uri "$name")" ||
    fail "$name: randops found a difference"
}

# Over the memory plugin: interleaved stripes so that the connections'
# writes land next to each other and merge.
run mem-wb -c 4 -n 3000 -s 1 --interleave --stripe=65536 -- \
  memory $SIZE
run mem-wt -c 4 -n 1500 -s 2 --interleave --stripe=4096 -- \
  memory $SIZE coalesce-mode=writethrough
# Tiny buffer and merge limit: back-pressure, chunked write-back, and
# large writes that bypass the buffer.
run mem-small -c 3 -n 3000 -s 3 --max-len=1048576 -- \
  memory $SIZE coalesce-size=1M coalesce-max-write=16K
# coalesce-delay=0: the background writer races every request.
run mem-nodelay -c 4 -n 3000 -s 4 --interleave --stripe=8192 -- \
  memory $SIZE coalesce-delay=0 coalesce-threads=16

# Over files: compare what a clean shutdown leaves on disk with what
# randops verified, without any final flush from the client.
for plugin in file image; do
  for mode in writeback writethrough; do
    name=$plugin-$mode
    truncate -s $SIZE "$T/$name.img"
    if [ $plugin = file ]; then
      args=(file "$T/$name.img")
    else
      args=("$IMAGE_PLUGIN" file="$T/$name.img")
    fi
    run $name -c 4 -n 1200 -s 5 --interleave --stripe=131072 \
      --no-final-flush --dump="$T/$name.want" -- \
      "${args[@]}" coalesce-mode=$mode coalesce-delay=100000
    stop_nbdkit $name
    cmp "$T/$name.want" "$T/$name.img" ||
      fail "$name: file after a clean shutdown differs from the reference"
    grep -q "could not be written" "$(logfile $name)" &&
      fail "$name: shutdown reported unwritten data"
  done
done
echo "coalesce randops: OK"
