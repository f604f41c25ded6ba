#!/usr/bin/env bash
# Random 4 KiB writes into a qcow2 image through our image plugin, fio
# over NBD (its nbd engine, libnbd), to compare builds side by side:
#
#   bench/randwrite.sh BUILD-DIR [BUILD-DIR...]
#
# env: ROUNDS=3 (interleaved rounds: every round runs every build and
#      workload once, in an order shuffled afresh), SIZE=1G (virtual size),
#      IOS=65536 (writes per run), DEPTH=16 (fio iodepth), CACHE=writeback
#      (or none), WORKLOADS="overwrite allocate", TMPDIR=/var/tmp.
# Workloads: "overwrite", an image whose every cluster qemu-io wrote
# first (the in-place path: no metadata changes); "allocate", a fresh
# image from qemu-img create (each first write of a cluster allocates
# it).  fio ends with an fsync.  Reported per build and workload: the
# median client wall time, writes/s, and the server's CPU time
# (user+system from /proc/PID/stat just before the stop) in seconds and
# in microseconds per write.  Every image must pass qemu-img check
# (leaks allowed) afterwards.  The machine is shared: prefer the CPU
# column, and compare builds within one run only.
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 BUILD-DIR [BUILD-DIR...]" >&2; exit 1; }
builds=()
for b in "$@"; do
  b=$(cd "$b" && pwd)
  [ -f "$b/plugins/image/.libs/nbdkit-image-plugin.so" ] ||
    { echo "$b: no image plugin: build first" >&2; exit 1; }
  builds+=("$b")
done
rounds=${ROUNDS:-3}
size=${SIZE:-1G}
ios=${IOS:-65536}
depth=${DEPTH:-16}
cache=${CACHE:-writeback}
workloads=${WORKLOADS:-overwrite allocate}
command -v fio >/dev/null || { echo "fio is not installed" >&2; exit 1; }
fio --enghelp 2>/dev/null | grep -qw nbd ||
  { echo "this fio has no nbd engine" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/nbdstack-randwrite.XXXXXX")
. "$here/server-lib.sh"
say () { echo "randwrite: $*" >&2; }

qemu-img create -q -f qcow2 "$tmp/full.qcow2" "$size"
qemu-io -f qcow2 -c "write -P 0x5a 0 $size" "$tmp/full.qcow2" >/dev/null
results=$tmp/results
: >"$results"

server_cpu ()
{
  local pid
  pid=$(cat "$pidfile")
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' \
    "/proc/$pid/stat"
}

run_once ()                   # ROUND BUILD-INDEX WORKLOAD
{
  local b=${builds[$2]} w=$3 img=$tmp/img.qcow2 t0 t1 cpu i
  rm -f "$img" "$sock" "$pidfile"
  case $w in
    overwrite) cp --sparse=always "$tmp/full.qcow2" "$img" ;;
    allocate) qemu-img create -q -f qcow2 "$img" "$size" ;;
    *) echo "unknown workload $w" >&2; exit 1 ;;
  esac
  sync "$img"
  : >"$log"
  nbdkit --log=stderr -U "$sock" -P "$pidfile" \
    "$b/plugins/image/.libs/nbdkit-image-plugin.so" file="$img" \
    format=qcow2 cache="$cache" 2>>"$log"
  for ((i = 0; i < 200; i++)); do
    [ -s "$pidfile" ] && [ -S "$sock" ] && break
    sleep 0.05
  done
  t0=$EPOCHREALTIME
  fio --name=randwrite --ioengine=nbd --uri="nbd+unix:///?socket=$sock" \
    --rw=randwrite --bs=4k --iodepth="$depth" --size="$size" \
    --number_ios="$ios" --norandommap --randseed="$1" --end_fsync=1 \
    --output=/dev/null
  t1=$EPOCHREALTIME
  cpu=$(server_cpu)
  stop_server
  local rc=0
  qemu-img check -q "$img" >/dev/null 2>&1 || rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 3 ] ||
    { echo "qemu-img check failed ($rc) after $b $w" >&2; exit 1; }
  printf '%s\t%s\t%s\t%s\n' "$2" "$w" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" "$cpu" \
    >>"$results"
  say "round $1: ${builds[$2]} $w: $(tail -n 1 "$results" | cut -f 3) s, server CPU $cpu s"
}

configs=()
for ((bi = 0; bi < ${#builds[@]}; bi++)); do
  for w in $workloads; do configs+=("$bi $w"); done
done
say "load before: $(uptime)"
for ((r = 1; r <= rounds; r++)); do
  for i in $(round_order "${#configs[@]}" "$r"); do
    read -r bi w <<<"${configs[$i]}"
    run_once "$r" "$bi" "$w"
  done
done
say "load after: $(uptime)"

echo "random 4 KiB writes: $ios per run, iodepth $depth, $size image, cache=$cache, $rounds rounds"
printf '%-40s %-10s %9s %9s %10s %12s\n' build workload "wall s" "writes/s" "server CPU" "CPU us/write"
for ((bi = 0; bi < ${#builds[@]}; bi++)); do
  for w in $workloads; do
    awk -F'\t' -v bi="$bi" -v w="$w" -v ios="$ios" -v name="${builds[$bi]}" \
      "$MEDIAN_AWK"'
      $1 == bi && $2 == w { s = s " " $3; c = c " " $4 }
      END { ms = median(s); mc = median(c)
            printf "%-40s %-10s %9.2f %9.0f %10.2f %12.1f\n", name, w, ms, ios / ms, mc, mc * 1e6 / ios
            printf "%-40s %-10s   runs:%s  cpu:%s\n", "", "", s, c }' "$results"
  done
done
