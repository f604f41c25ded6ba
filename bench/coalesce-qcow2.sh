#!/usr/bin/env bash
# Upload into a qcow2 target with and without the coalesce filter:
# time and fragmentation.  qemu-nbd serves the qcow2 (imageio's options);
# the filter runs in nbdkit's nbd plugin in front of it, so this also
# exercises coalesce over a plugin we did not write.
#
#   bench/coalesce-qcow2.sh [BUILD-DIR]           (default ./build)
#
# Environment: RUNS=3, SIZE=4G DATA_PCT=25 ZERO_PCT=4 SEED=1 (the sample,
# see bench/make-sample.sh), SAMPLE=FILE (use this raw image instead),
# TMPDIR=/var/tmp (disk-backed scratch), COALESCE_ARGS="" (extra filter
# parameters, e.g. coalesce-size=256M), CONFIGS="TARGET:CLIENT ..." (a
# subset), BASE_CO=FILE (an older build's coalesce filter: adds target
# coalesce-base, for before/after).
#
# Targets, all over unix sockets:
#   qemu-nbd   qemu-nbd -f qcow2 directly (the baseline)
#   nbd        nbdkit nbd plugin -> qemu-nbd (the extra hop, no filter)
#   coalesce   nbdkit --filter=coalesce nbd -> qemu-nbd, with
#              coalesce-interleaved=buffer (qemu-nbd allocates clusters
#              in the order writes arrive)
#   coalesce-direct  the same with the filter's default
#              (coalesce-interleaved=direct), for comparison
# Clients: `qemu-img convert -n -W` (out-of-order 2 MiB writes) and
# `nbdcopy --flush` (4 connections, 256K requests); plus an in-order
# `qemu-img convert -n` into qemu-nbd as the layout reference.
# For every run: wall time of the client (including its flush), then
# with the servers stopped `qemu-img compare` against the sample (any
# difference aborts), `qemu-img check` "% fragmented" and host-offset
# discontinuities between consecutive data extents of
# `qemu-img map --output=json`.  Medians over RUNS, round-robin.
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export LC_ALL=C
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
build=$(cd "${1:-$top/build}" && pwd)
RUNS=${RUNS:-3}
CO="$build/filters/coalesce/.libs/nbdkit-coalesce-filter.so"
[ -f "$CO" ] || { echo "coalesce-qcow2: build $CO first" >&2; exit 1; }

. "$here/../common/stop-server.sh"
. "$here/median.sh"

W=$(mktemp -d "${TMPDIR:-/var/tmp}/coalesce-qcow2.XXXXXX")
cleanup ()
{
  local p pids=()
  for p in "$W"/*.pid; do
    [ -f "$p" ] && pids+=("$(cat "$p")")
  done
  stop_pids "${pids[@]}" || true
  rm -rf "$W"
}
trap cleanup EXIT

if [ -n "${SAMPLE:-}" ]; then
  sample=$SAMPLE
else
  sample=$W/sample.raw
  BUILD=$build "$here/make-sample.sh" "$sample" >"$W/sample.txt"
fi
vsize=$(stat -c %s "$sample")
echo "# sample: $(du -h --apparent-size "$sample" | cut -f1) virtual, $(du -h "$sample" | cut -f1) allocated"

wait_sock () { local i; for ((i = 0; i < 100; i++)); do [ -S "$1" ] && return 0; sleep 0.05; done; return 1; }

# serve TARGET: start the servers for one run on $W/t.sock.
serve ()
{
  rm -f "$W"/t.qcow2 "$W"/*.sock "$W"/*.pid
  qemu-img create -q -f qcow2 -o compat=1.1,cluster_size=65536 "$W/t.qcow2" "$vsize"
  local qsock=$W/t.sock
  [ "$1" != qemu-nbd ] && qsock=$W/q.sock
  qemu-nbd --fork --pid-file="$W/q.pid" --socket="$qsock" -f qcow2 \
    --persistent --shared=16 --cache=none --aio=native --discard=unmap \
    --detect-zeroes=unmap "$W/t.qcow2"
  wait_sock "$qsock"
  case $1 in
  nbd) nbdkit -U "$W/t.sock" -P "$W/n.pid" nbd socket="$qsock" ;;
  coalesce) nbdkit -U "$W/t.sock" -P "$W/n.pid" --filter="$CO" nbd \
              socket="$qsock" coalesce-interleaved=buffer ${COALESCE_ARGS:-} ;;
  coalesce-direct) nbdkit -U "$W/t.sock" -P "$W/n.pid" --filter="$CO" nbd \
              socket="$qsock" ${COALESCE_ARGS:-} ;;
  coalesce-base) nbdkit -U "$W/t.sock" -P "$W/n.pid" --filter="$BASE_CO" nbd \
              socket="$qsock" ${COALESCE_ARGS:-} ;;
  esac
  wait_sock "$W/t.sock"
}

stop ()
{
  local p pid
  # In this order: nbdkit flushes into the qemu-nbd below it.
  for p in "$W"/n.pid "$W"/q.pid; do
    [ -f "$p" ] || continue
    pid=$(cat "$p")
    rm -f "$p"
    stop_pids --timeout=30 "$pid" || true
  done
}

# Host-offset discontinuities between consecutive data extents.
discont ()
{
  qemu-img map --output=json "$1" | /usr/bin/python3 -c '
import json, sys
prev = None; n = 0; d = 0
for e in json.load(sys.stdin):
    if not e.get("data") or "offset" not in e:
        continue
    d += 1
    if prev is not None and e["offset"] != prev:
        n += 1
    prev = e["offset"] + e["length"]
print(n, d)'
}

uri="nbd+unix:///?socket=$W/t.sock"
configs="qemu-nbd:convert qemu-nbd:convert-W nbd:convert-W coalesce:convert-W
         qemu-nbd:nbdcopy nbd:nbdcopy coalesce:nbdcopy coalesce-direct:nbdcopy"
[ -n "${BASE_CO:-}" ] && configs="$configs coalesce-base:convert-W coalesce-base:nbdcopy"
configs=${CONFIGS:-$configs}
runs=()
for ((r = 0; r < RUNS; r++)); do
  for cfg in $configs; do
    t=${cfg%%:*} c=${cfg#*:}
    serve "$t"
    t0=$(date +%s.%N)
    case $c in
    convert) qemu-img convert -n -f raw -O raw "$sample" "$uri" ;;
    convert-W) qemu-img convert -n -W -f raw -O raw "$sample" "$uri" ;;
    nbdcopy) nbdcopy --flush "$sample" "$uri" ;;
    esac
    t1=$(date +%s.%N)
    stop
    qemu-img compare -q -f raw -F qcow2 "$sample" "$W/t.qcow2" ||
      { echo "coalesce-qcow2: $t/$c: target differs from the sample" >&2; exit 1; }
    frag=$(qemu-img check "$W/t.qcow2" 2>&1 | sed -n -E 's/.* ([0-9.]+)% fragmented.*/\1/p')
    read -r disc ndata < <(discont "$W/t.qcow2")
    line="$t $c $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') $frag $disc $ndata"
    echo "# raw: $r $line"
    runs+=("$line")
  done
done

get () { printf '%s\n' "${runs[@]}" | awk -v t="$1" -v c="$2" -v f="$3" '$1 == t && $2 == c { print $f }' | median; }
printf "\n%-9s %-10s %8s %12s %16s %12s\n" target client "wall s" "% fragm." "host discont." "data ext."
for cfg in $configs; do
  t=${cfg%%:*} c=${cfg#*:}
  printf "%-9s %-10s %8s %12s %16s %12s\n" "$t" "$c" "$(get $t $c 3)" \
    "$(get $t $c 4)" "$(get $t $c 5)" "$(get $t $c 6)"
done
