#!/usr/bin/env bash
# coalesce: large writes (1M up to coalesce-max-write) are put in order
# by a short wait, not by a copy into the buffer (order.c):
#  - 8 x 2M sent in descending order by qemu-io, all in flight on one
#    connection, reach the plugin ascending (up to 3 inversions: the
#    released writers race to the plugin; typically the first write is
#    overtaken by the ones it releases, and the sanitizer build, with a
#    second CI suite running beside it, once had 3; in arrival order they
#    would be 7), every one straight from the
#    client's buffer; with coalesce-order-wait=0 they go down as they
#    came (the control: mostly descending), and so they do by default
#    unless coalesce-interleaved=buffer is given (the startup debug line
#    says which wait each combination resolves to);
#  - a gap nobody fills holds writes up for coalesce-order-wait only,
#    and not at all when nothing else is in flight on the connection;
#  - two connections writing their own regions in order do not wait for
#    each other (one stream per connection);
#  - the data read back is what was written.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdsh
require_filter_version
CO=$(filter_so coalesce)

writes_below ()
{
  sed -n -E 's/^.* connection=[0-9]+ Write id=[0-9]+ offset=(0x[0-9a-f]+) count=(0x[0-9a-f]+) .*\.\.\.$/\1 \2/p' "$1"
}

inversions ()
{
  awk 'BEGIN { prev = -1; n = 0 }
       { o = strtonum ($1); if (o < prev) n++; prev = o }
       END { print n }' "$1"
}

counters ()
{
  grep -o 'coalesce: writes in .*' "$1" | tail -n 1
}

run_descending ()
{
  local name=$1 wait=$2
  # Not -v: its logging slows the server down enough to spread the
  # arrivals beyond what the gate waits for.  coalesce-delay keeps any
  # buffered write until the flush, which would merge them into 4M.
  # On a loaded machine requests sent together can arrive more than the
  # default 5 ms apart: give them the whole coalesce-order-wait.
  local -a gate=(coalesce-order-wait="$wait")
  [ "$wait" = default ] && gate=()
  start_nbdkit "$name" --filter="$CO" --filter=log memory 64M \
    logfile="$T/$name-requests.log" "${gate[@]}" \
    coalesce-delay=600000 -D coalesce.order_grace_ms=1000
  local args=() i
  for i in 7 6 5 4 3 2 1 0; do
    args+=(-c "aio_write -P $((i + 1)) $((i * 2))M 2M")
  done
  args+=(-c aio_flush)
  for i in 0 1 2 3 4 5 6 7; do
    args+=(-c "read -P $((i + 1)) $((i * 2))M 2M")
  done
  # Writeback: qemu-io's default writethrough would make every write FUA.
  "$QEMU_IO" -t writeback -f raw "${args[@]}" "$(uri "$name")" \
    >"$T/$name.qemu-io" || fail "$name: qemu-io failed"
  grep -q 'Pattern verification failed' "$T/$name.qemu-io" &&
    fail "$name: data read back differs"
  stop_nbdkit "$name"
  writes_below "$T/$name-requests.log" >"$T/$name.writes"
}

# 1. Descending 2M writes come out ascending, without a copy.
run_descending gate 1000
[ "$(wc -l <"$T/gate.writes")" -eq 8 ] ||
  fail "gate: expected the 8 writes as they were sent, got: $(cat "$T/gate.writes")"
grep -qv ' 0x200000$' "$T/gate.writes" &&
  fail "gate: large writes were buffered and merged: $(cat "$T/gate.writes")"
n=$(inversions "$T/gate.writes")
echo "gate: $n inversions: $(cut -d' ' -f1 "$T/gate.writes" | tr '\n' ' ')"
[ "$n" -le 3 ] || fail "gate: $n inversions below the filter"


# Control: without the wait they reach the plugin in arrival order.
run_descending nogate 0
n=$(inversions "$T/nogate.writes")
echo "control (coalesce-order-wait=0): $n inversions"
[ "$n" -ge 4 ] || fail "control: expected mostly descending writes, got $n inversions"

# The gate is off unless coalesce-interleaved=buffer declares a plugin
# that lays data out in arrival order (or coalesce-order-wait is given):
# by default the writes go down as they came, as in the control.
run_descending nodefault default
n=$(inversions "$T/nodefault.writes")
echo "default (no coalesce-order-wait): $n inversions"
[ "$n" -ge 4 ] || fail "default: expected no gate (mostly descending), got $n inversions"
# What each combination resolves to (the debug line at startup).
i=0
for args in "|0" "coalesce-interleaved=buffer|20" "coalesce-interleaved=direct|0" \
  "coalesce-interleaved=buffer coalesce-order-wait=7|7" "coalesce-order-wait=9|9"; do
  i=$((i + 1))
  # shellcheck disable=SC2086 # the parameters are words
  start_nbdkit resolve$i -v --filter="$CO" memory 8M ${args%|*}
  stop_nbdkit resolve$i
  grep -q "coalesce: mode=.* order-wait=${args#*|}ms" "$(logfile resolve$i)" ||
    fail "'${args%|*}': expected order-wait=${args#*|}ms: $(grep -o 'coalesce: mode=.*' "$(logfile resolve$i)")"
done
echo "order-wait resolves: default 0, buffer 20, direct 0, given values kept"

# 2. A gap that never fills: while the connection has a request in
#    flight that is not waiting (a zero, slowed down by nbdkit's delay
#    filter), the write waits coalesce-order-wait, then goes; when all
#    its requests wait for the gap (what a client that skips holes, or
#    one at queue depth 1, leaves), only a few milliseconds.
start_nbdkit gap -v --filter="$CO" --filter=delay memory 64M \
  coalesce-order-wait=400 delay-zero=1500ms
URI="$(uri gap)" nbdsh -c - <<'PY' || fail "gap: nbdsh failed"
import os, time
h = nbd.NBD(); h.connect_uri(os.environ["URI"])
M = 1 << 20

def wait_for(cookies):
    t = time.monotonic()
    pending = set(cookies)
    while pending:
        h.poll(-1)
        pending = {c for c in pending if not h.aio_command_completed(c)}
    return time.monotonic() - t

h.pwrite(os.urandom(2 * M), 0)
# All waiting: two writes after gaps (2M..8M, 10M..12M never written).
dt = wait_for([h.aio_pwrite(os.urandom(2 * M), 8 * M),
               h.aio_pwrite(os.urandom(2 * M), 12 * M)])
assert dt < 0.3, "writes that were all waiting took %.3f s" % dt
# At queue depth 1.
t = time.monotonic()
h.pwrite(os.urandom(2 * M), 20 * M)
dt = time.monotonic() - t
assert dt < 0.3, "a write at queue depth 1 took %.3f s" % dt
# A slow zero elsewhere in flight: the write waits its full time.
z = h.aio_zero(M, 60 * M)
dt = wait_for([h.aio_pwrite(os.urandom(2 * M), 30 * M)])
assert 0.3 <= dt < 1.4, "the write next to a slow zero took %.3f s" % dt
wait_for([z])
h.shutdown()
PY
stop_nbdkit gap
c=$(counters "$(logfile gap)")
echo "gap: $c"
[[ $c =~ "gave up "([0-9]+)")" ]] && [ "${BASH_REMATCH[1]}" -ge 3 ] ||
  fail "gap: expected at least 3 skipped gaps: $c"

# 3. Two connections, each in order in its own region: no waiting.
start_nbdkit conns -v --filter="$CO" memory 64M coalesce-order-wait=1000
URI="$(uri conns)" nbdsh -c - <<'PY' || fail "conns: nbdsh failed"
import os
M = 1 << 20
a = nbd.NBD(); a.connect_uri(os.environ["URI"])
b = nbd.NBD(); b.connect_uri(os.environ["URI"])
da, db = os.urandom(16 * M), os.urandom(16 * M)
for i in range(8):
    a.pwrite(da[i * 2 * M:(i + 1) * 2 * M], i * 2 * M)
    b.pwrite(db[i * 2 * M:(i + 1) * 2 * M], 40 * M + i * 2 * M)
assert a.pread(16 * M, 0) == da and a.pread(16 * M, 40 * M) == db
a.shutdown(); b.shutdown()
PY
stop_nbdkit conns
c=$(counters "$(logfile conns)")
echo "conns: $c"
# Only the second connection's first write waits (a few ms for company:
# its stream starts at 0); with one stream for both, every write of the
# second connection would wait for the first's.
[[ $c =~ "waited for order "([0-9]+)" " ]] && [ "${BASH_REMATCH[1]}" -le 1 ] ||
  fail "conns: connections waited for each other: $c"
echo "test-coalesce-order: ok"
