#!/usr/bin/env bash
# coalesce: kill -9 never loses a byte that a flush (on any connection)
# or a FUA request promised.  Four connections write, zero and trim
# interleaved 700-byte stripes (every page shared by neighbours) and
# 20000-byte ones (writes that bypass the buffer), 16 requests in flight
# each, with flushes and FUA requests among them, over nbdkit's delay
# filter so that flushes are busy while newer requests arrive.  The
# server is killed at a random moment; then every byte acknowledged
# before the last answered flush was sent (or by a FUA request) must
# hold its value or that of a later request on it (see stress.c).
#
# KILLS=N sets the number of kills per configuration (default 50, four
# configurations: 200 in all).  The last case is a control: with no
# flushes at all, requiring every acknowledged write must find losses,
# which shows the check can fail.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require_filter_version
CO=$(filter_so coalesce)
KILLS=${KILLS:-50}
total=0

kill_case ()
{
  local name=$1; shift
  local out="$T/$name.out"
  echo "== $name: $*"
  ./stress --end=kill --kills="$KILLS" --image="$T/$name.img" \
    --socket="$T/$name.sock" --log="$T/$name.log" "$@" >"$out" 2>&1
  local r=$?
  cat "$out"
  [ $r -eq 0 ] || fail "$name: acknowledged and flushed data lost (seed in $out)"
  grep -q "^stress: $KILLS kill(s): [1-9][0-9]* required requests" "$out" ||
    fail "$name: the run checked nothing"
  total=$((total + KILLS))
}

below=(--filter=delay)
delays=(delay-write=3ms delay-zero=3ms delay-trim=3ms)

# Flushes do the write-back (the writers wait 10 s): a flush is busy
# writing older data while the next overwrites, zeroes and trims come.
kill_case flushes --secs=0.7 -- --filter="$CO" "${below[@]}" \
  "$IMAGE_PLUGIN" file="$T/flushes.img" "${delays[@]}" \
  coalesce-size=4M coalesce-delay=10000 coalesce-threads=2 \
  coalesce-max-write=4096

# The writers race the flushes: short delay, eight writers, a small
# buffer under back-pressure.
kill_case writers --secs=0.7 -- --filter="$CO" "${below[@]}" \
  "$IMAGE_PLUGIN" file="$T/writers.img" "${delays[@]}" \
  coalesce-size=1M coalesce-delay=5 coalesce-threads=8 \
  coalesce-max-write=4096

# Defaults, over nbdkit's own file plugin.
kill_case defaults --secs=0.7 -- --filter="$CO" "${below[@]}" \
  file "$T/defaults.img" delay-write=1ms delay-zero=2ms delay-trim=2ms

# Writethrough: every acknowledged request is durable below.
kill_case writethrough --secs=0.7 --all-acked -- --filter="$CO" \
  "${below[@]}" "$IMAGE_PLUGIN" file="$T/writethrough.img" "${delays[@]}" \
  coalesce-mode=writethrough coalesce-max-write=4096

# Control: no flush, no FUA, no zero or trim (they go straight down);
# every write buffered (-D coalesce.buffer_all=1: left to the policy, a
# write that merges with nothing goes down at once, and on a loaded
# machine, where the four connections seldom overlap, that was every
# write of one sanitizer run); the writers asleep and the buffer far
# from its high-water mark (4K pages: the whole 4M export charges at
# most 4M), so every write is still buffered at the kill.  Requiring
# every acknowledged write must then report losses.
./stress --end=kill --kills=1 --control --ops=40,0,0,0,0,10 --secs=0.5 \
  --image="$T/control.img" --socket="$T/control.sock" \
  --log="$T/control.log" -- -D coalesce.buffer_all=1 --filter="$CO" \
  "$IMAGE_PLUGIN" file="$T/control.img" coalesce-delay=600000 \
  coalesce-hugepages=false ||
  fail "control: the durability check cannot see lost writes"

echo "coalesce kill: $total kills, nothing flushed was lost"
