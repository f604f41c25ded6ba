#!/usr/bin/env bash
# discard: differential random-operation tests with $RANDOPS through every
# mode and option over memory, file and image.  In zero mode trimmed
# ranges must read back as zero (--trim-reads-zero); in the other modes
# randops accepts either the old data or zeroes there, as NBD allows.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require_filter_version
DF=$(filter_so discard)
[ -x "$RANDOPS" ] || fail "$RANDOPS is not built"

SIZE=8M
n=0
# check PLUGIN "RANDOPS OPTIONS" FILTER-PARAMS...
check ()
{
  local plugin=$1 ropts=$2
  shift 2
  n=$((n + 1))
  case $plugin in
    memory) start_nbdkit "d$n" --filter="$DF" memory $SIZE "$@" ;;
    file) truncate -s $SIZE "$T/d$n.img"
          start_nbdkit "d$n" --filter="$DF" file file="$T/d$n.img" "$@" ;;
    image) truncate -s $SIZE "$T/d$n.img"
           start_nbdkit "d$n" --filter="$DF" "$IMAGE_PLUGIN" format=raw \
             file="$T/d$n.img" "$@" ;;
  esac
  # shellcheck disable=SC2086
  "$RANDOPS" -c 2 -n 400 -s "$n" $ropts "$(uri "d$n")" >"$T/d$n.randops" ||
    fail "$plugin $*: randops $ropts failed (seed $n)"
  echo "$plugin $*: $(cat "$T/d$n.randops")"
}

check memory "" discard=pass
check memory "" discard=ignore
check memory "--trim-reads-zero" discard=zero
check memory "" discard=refuse
check memory "" discard-granularity=4K discard-max=64K
check memory "--trim-reads-zero" discard=zero discard-granularity=64K discard-max=128K
check memory "--trim-reads-zero" discard=zero discard-zero-trim=never
check memory "" discard-zero-trim=always
for plugin in file image; do
  check $plugin "--trim-reads-zero" discard=zero discard-granularity=4K
  check $plugin "" discard-granularity=64K discard-max=1M discard-zero-trim=never
done
echo "PASS: discard keeps the data exact"
