#!/usr/bin/env bash
# coalesce: the page policy (coalesce-hugepages unset) keeps huge pages
# for a copy whose pieces are of mixed, middling size, as a used disk's
# are.  The source holds data runs of 64K-448K between holes; nbdcopy
# sends them in 256K requests over 4 connections, so they are buffered
# and merge into pieces of about the runs' size, many below 256K.  With
# the policy's old 1M/256K band the buffer flipped to 4K pages (a fault
# per 4K copied) and back several times in such a copy; now a piece
# average of at least 256K asks for huge pages and only one below 32K
# (random 512-byte writes: test-coalesce-random.sh) for small ones.
# The copy must be identical, the counters must say huge pages and no
# switch, and enough pieces must have been written back for the policy
# to decide.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdcopy
require python3
require_filter_version
CO=$(filter_so coalesce)
MiB=$((1024 * 1024))

thp_available || skip "transparent huge pages are off here"

# 192M of runs of 64K-448K (4K steps) with holes of 64K-1M between.
python3 - "$T/src.img" <<'PY' || fail "could not make the source"
import random, sys
rng = random.Random(21)
size = 192 << 20
with open(sys.argv[1], "wb") as f:
    f.truncate(size)
    off = 0
    while True:
        off += rng.randrange(16, 257) * 4096
        n = rng.randrange(16, 113) * 4096
        if off + n > size:
            break
        f.seek(off)
        f.write(rng.randbytes(n))
        off += n
PY
truncate -s $((192 * MiB)) "$T/dst.img"
# Every write is buffered (-D coalesce.buffer_all=1): without it, which
# writes go down directly depends on how the four connections interleave,
# and on a loaded machine the buffered rest can be only the small tails
# of runs, so the pieces the policy sees vary from run to run.
start_nbdkit srv -v -D coalesce.buffer_all=1 --filter="$CO" file "$T/dst.img"
nbdcopy --flush --connections=4 --requests=16 --request-size=262144 \
  "$T/src.img" "$(uri srv)" || fail "nbdcopy failed"
stop_nbdkit srv
cmp "$T/src.img" "$T/dst.img" || fail "the copy differs"

line=$(grep -E 'coalesce: writes in' "$(logfile srv)") || fail "no counters logged"
echo "$line"
out=$(sed -n -E 's/.*writes out ([0-9]+) .*/\1/p' <<<"$line")
[ -n "$out" ] || fail "no writes-out counter in the log"
# The policy decides every 16 pieces written back: at least two
# decisions (about 265 pieces here: one per run).
[ "$out" -ge 32 ] ||
  fail "only $out pieces were written back: the test did not exercise the policy"
[[ $line =~ "page size "([0-9]+)" (switched "([0-9]+)" times)" ]] ||
  fail "no page size counter in the log"
[ "${BASH_REMATCH[1]}" -eq 2097152 ] && [ "${BASH_REMATCH[2]}" -eq 0 ] ||
  fail "the buffer left huge pages for middling pieces: page size ${BASH_REMATCH[1]}, switched ${BASH_REMATCH[2]} times"
echo "coalesce page policy: OK"
