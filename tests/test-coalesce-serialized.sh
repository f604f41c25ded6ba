#!/usr/bin/env bash
# coalesce over a stack that is not parallel: nbdkit's noparallel filter
# below it serializes requests, which nbdkit's own locks do not enforce
# for coalesce's background writers, so the filter must serialize its
# calls down itself.  Differential random ops from 3 connections, then
# the file after a clean shutdown must equal what randops verified.
# (serialize=connections admits one connection at a time, which randops,
# holding several, cannot use.)
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require_filter_version
CO=$(filter_so coalesce)

n=0
for mode in all-requests requests; do
  for plugin in image file; do
    n=$((n + 1))
    truncate -s 32M "$T/$n.img"
    case $plugin in
      image) start_nbdkit "s$n" --filter="$CO" --filter=noparallel \
               "$IMAGE_PLUGIN" file="$T/$n.img" serialize=$mode ;;
      file) start_nbdkit "s$n" --filter="$CO" --filter=noparallel \
              file "$T/$n.img" serialize=$mode ;;
    esac
    "$RANDOPS" -c 3 -n 1000 -s $n --check-extents --dump="$T/$n.dump" \
      "$(uri "s$n")" || fail "$plugin serialize=$mode: randops"
    stop_nbdkit "s$n"
    cmp "$T/$n.dump" "$T/$n.img" ||
      fail "$plugin serialize=$mode: file differs after shutdown"
    echo "$plugin serialize=$mode: ok"
  done
done
