#!/usr/bin/env bash
# image plugin, raw, cache=none: concurrent requests writing different
# bytes of the same sectors (read-modify-write under sector locks), on a
# file whose size is not a multiple of 512 (its last page is served
# through a buffered fd).  Also cache=writeback as the control.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
RMW="$abs_builddir/test-image-rmw"
[ -x "$RMW" ] || fail "$RMW not built"
# nbdkit takes over a second to stop: signal every server at once.

img=$T/odd.img
size=$((2 * 1024 * 1024 + 12345))
head -c "$size" /dev/urandom >"$img"

for cache in none writeback; do
  start_nbdkit "$cache" "$IMAGE_PLUGIN" file="$img" cache="$cache"
  "$RMW" "$(uri "$cache")" 4 2 "$T/$cache.out"
  # What the client saw must be what is in the file (page cache and
  # O_DIRECT are coherent, so the server can keep running).
  cmp "$img" "$T/$cache.out" || fail "cache=$cache: file differs from export"
  [ "$(stat -c %s "$img")" -eq "$size" ] || fail "cache=$cache: file size changed"
done
