#!/usr/bin/env bash
# coalesce: buffer memory stays bounded under a flood.  nbdcopy pushes
# 192 MiB over 4 connections (coalesce-interleaved=buffer: all of it
# through the buffer) into a 32M buffer whose write-back is
# slowed down (delay filter below), so the client is far faster than
# the plugin: peak RSS of the server (VmHWM) must stay within
# coalesce-size plus a margin for nbdkit's own request buffers, the
# filter must have applied back-pressure, and the data must be right.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require nbdcopy
require_filter_version
CO=$(filter_so coalesce)
MiB=$((1024 * 1024))

head -c $((192 * MiB)) /dev/urandom >"$T/src.img"
# Under the sanitizer build, ASan's quarantine would keep nbdkit's freed
# request buffers resident (256M by default) and hide what we measure.
export ASAN_OPTIONS="quarantine_size_mb=0:thread_local_quarantine_size_kb=0:${ASAN_OPTIONS:-}"
# flood NAME yes|no: peak RSS growth (MiB) of a server, with or
# without coalesce, during the flood.
flood ()
{
  local name=$1 pid base peak
  local co=() params=()
  if [ $2 = yes ]; then
    co=(--filter="$CO")
    params=(coalesce-size=32M coalesce-max-write=1M coalesce-threads=2
            coalesce-interleaved=buffer)
  fi
  truncate -s $((192 * MiB)) "$T/$name.img"
  start_nbdkit $name -v "${co[@]}" --filter=delay file "$T/$name.img" \
    delay-write=40ms "${params[@]}"
  pid=$(pidof_srv $name)
  base=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
  nbdcopy --flush --connections=4 --requests=32 --request-size=262144 \
    "$T/src.img" "$(uri $name)"
  peak=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
  stop_nbdkit $name
  cmp "$T/src.img" "$T/$name.img" || fail "$name: data differs after the flood"
  echo $(((peak - base) / 1024))
}

# The same flood without the filter measures nbdkit's own request
# buffers (and, in the sanitizer build, ASan's allocator caches).
plain=$(flood plain no)
grown=$(flood srv yes)
echo "VmHWM growth during the flood: ${plain} MiB without coalesce, ${grown} MiB with coalesce-size=32M"
# Margin: 8M for allocator noise; 48M under ASan, whose allocator
# caches and shadow pages grow with the number of busy threads.  An
# unbounded buffer would grow by ~192M here.
margin=8
[ -n "$SANITIZER_PRELOAD" ] && margin=48
[ $grown -le $((plain + 32 + margin)) ] ||
  fail "peak RSS grew by ${grown} MiB with coalesce-size=32M (${plain} MiB without the filter)"
grep -E 'coalesce: writes in' "$(logfile srv)"
wait_s=$(sed -n -E 's/.*back-pressure wait ([0-9.]+) s.*/\1/p' "$(logfile srv)")
awk -v w="$wait_s" 'BEGIN { exit !(w > 0) }' ||
  fail "no back-pressure recorded: the flood did not test the bound"
echo "coalesce memory: OK"
