#!/usr/bin/env bash
# coalesce: buffer memory stays bounded under a flood.  nbdcopy pushes
# 192 MiB over 4 connections into a 32M buffer whose write-back is
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
truncate -s $((192 * MiB)) "$T/dst.img"
start_nbdkit srv -v --filter="$CO" --filter=delay file "$T/dst.img" \
  delay-write=10ms coalesce-size=32M coalesce-max-write=1M
pid=$(pidof_srv srv)
base=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)

nbdcopy --flush --connections=4 --requests=32 --request-size=262144 \
  "$T/src.img" "$(uri srv)"

peak=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
stop_nbdkit srv
grown=$(((peak - base) / 1024))
echo "VmHWM: at start ${base} kB, after the flood ${peak} kB (+${grown} MiB)"
# 32M of buffer + up to 4 connections x 16 threads x 256K request
# buffers (16M) + slack for allocator and thread stacks.
[ $grown -le $((32 + 16 + 16)) ] ||
  fail "peak RSS grew by ${grown} MiB with coalesce-size=32M"
grep -E 'coalesce: writes in' "$(logfile srv)"
wait_s=$(sed -n -E 's/.*back-pressure wait ([0-9.]+) s.*/\1/p' "$(logfile srv)")
awk -v w="$wait_s" 'BEGIN { exit !(w > 0) }' ||
  fail "no back-pressure recorded: the flood did not test the bound"
cmp "$T/src.img" "$T/dst.img" || fail "data differs after the flood"
echo "coalesce memory: OK"
