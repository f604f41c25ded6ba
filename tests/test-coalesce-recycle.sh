#!/usr/bin/env bash
# coalesce: huge pages emptied by write-back are moved under the next
# writes instead of fresh ones being faulted in (and zeroed by the
# kernel), without losing a byte and without the process's mappings
# growing with the amount of data.  nbdcopy pushes 256 MiB of random
# data over 4 connections through a 32M buffer with huge pages, every
# write buffered (-D coalesce.buffer_all=1: left to the policy, how much
# is buffered depends on how the connections overlap in time, and under
# a loaded CI machine it was once only 3M): the copy must be identical, the
# filter must report recycled pages, and the buffer's mapping must
# stay in a few pieces (each move splits it; the moved pages are
# mapped afresh when given back, which merges them again).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdcopy
require_filter_version
CO=$(filter_so coalesce)
MiB=$((1024 * 1024))

thp_available || skip "transparent huge pages are off here"

head -c $((256 * MiB)) /dev/urandom >"$T/src.img"
truncate -s $((256 * MiB)) "$T/dst.img"
start_nbdkit srv -v -D coalesce.buffer_all=1 --filter="$CO" file "$T/dst.img" \
  coalesce-size=32M coalesce-hugepages=true coalesce-interleaved=buffer
pid=$(pidof_srv srv)
copy ()
{
  nbdcopy --flush --connections=4 --requests=16 --request-size=262144 \
    "$T/src.img" "$(uri srv)"
}
# The buffer is the only mapping with MADV_HUGEPAGE (VmFlags "hg"):
# count the pieces it is in.
pieces () { grep -c '^VmFlags:.* hg' "/proc/$pid/smaps" || :; }
# nbdkit writes its pidfile before .after_fork, where the filter maps
# the buffer: wait for the mapping (the sanitizer build under load was
# seen reading smaps first).
for ((i = 0; i < 100; i++)); do
  pieces_before=$(pieces)
  [ "$pieces_before" -ge 1 ] && break
  sleep 0.1
done
copy
copy
pieces_after=$(pieces)
stop_nbdkit srv
cmp "$T/src.img" "$T/dst.img" || fail "the copy differs"

line=$(grep -E 'coalesce: writes in' "$(logfile srv)") || fail "no counters logged"
echo "$line"
echo "buffer mappings: $pieces_before before, $pieces_after after two 256M copies"
buffered=$(sed -n -E 's/.*buffered ([0-9]+) \(([0-9]+) bytes\).*/\2/p' <<<"$line")
recycled=$(sed -n -E 's/.*huge pages recycled ([0-9]+).*/\1/p' <<<"$line")
[ -n "$recycled" ] || fail "no recycle counter in the log"
# The copy was buffered (all 512M of it, with buffer_all) ...
[ "$buffered" -ge $((32 * MiB)) ] ||
  fail "only $buffered bytes were buffered: the test did not exercise the buffer"
# ... and its 2M pages came from recycling (356 with every write
# buffered; 251 idle and 68 loaded when the policy chose).
[ "$recycled" -ge 16 ] || fail "only $recycled huge pages recycled"
# Without the fresh mappings every page that was moved would stay a
# mapping of its own (129 pieces here); with them, only the few pages
# listed or kept when the copy ended are apart.
[ "$pieces_before" -ge 1 ] || fail "no mapping with VmFlags hg: the buffer was not found"
[ "$pieces_after" -le 24 ] ||
  fail "the buffer's mapping is in $pieces_after pieces after the copies"
echo "coalesce recycle: OK"
