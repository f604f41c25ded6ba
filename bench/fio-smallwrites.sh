#!/usr/bin/env bash
# Small writes at queue depth 1 with fio's nbd engine: N random and N
# sequential 512 B writes (then fio's final fsync, an NBD flush) over a
# 256 MiB export, into
#   memory      nbdkit memory (the round-trip floor)
#   image       our image plugin alone, cache=none
#   stack       coalesce + zerodetect + discard over it (BUILD)
#   stack-base  the same filters from BASE_BUILD (if set: before/after)
# Rounds go round-robin; per target and pattern the median KB/s (fio's
# bw) and the server's CPU seconds (/proc/PID/stat) are printed.
#
#   BUILD=./build [BASE_BUILD=DIR] bench/fio-smallwrites.sh
#
# Environment: RUNS=3, N=1000, TMPDIR=/var/tmp (disk-backed, O_DIRECT),
# MODE=none (cache mode of the image plugin: none or writeback),
# FORMAT=raw (the image targets' file: raw, or qcow2 made by qemu-img
# create, as oVirt makes upload targets).
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export LC_ALL=C
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${BUILD:-$here/../build}" && pwd)
base=${BASE_BUILD:-}
runs=${RUNS:-3}
n=${N:-1000}
mode=${MODE:-none}
format=${FORMAT:-raw}
case $format in raw | qcow2) ;; *) echo "fio-smallwrites: FORMAT=$format: expected raw or qcow2" >&2; exit 1 ;; esac
command -v fio >/dev/null || { echo "fio-smallwrites: fio is not installed" >&2; exit 1; }
. "$here/../common/stop-server.sh"
. "$here/median.sh"
W=$(mktemp -d "${TMPDIR:-/var/tmp}/fio-smallwrites.XXXXXX")
cleanup () { [ -f "$W/pid" ] && stop_pids "$(cat "$W/pid")" || true; rm -rf "$W"; }
trap cleanup EXIT

targets="memory image stack"
[ -n "$base" ] && targets="$targets stack-base"

serve ()
{
  local t=$1 b=$build f=()
  rm -f "$W/sock" "$W/pid" "$W/t.img"
  if [ "$format" = qcow2 ]; then qemu-img create -q -f qcow2 "$W/t.img" 256M
  else truncate -s 256M "$W/t.img"; fi
  [ "$t" = stack-base ] && b=$(cd "$base" && pwd)
  case $t in
  memory) nbdkit -U "$W/sock" -P "$W/pid" memory 256M ;;
  image) nbdkit -U "$W/sock" -P "$W/pid" \
           "$build/plugins/image/.libs/nbdkit-image-plugin.so" \
           file="$W/t.img" format="$format" cache="$mode" ;;
  stack*)
    for x in coalesce zerodetect discard; do
      f+=("--filter=$b/filters/$x/.libs/nbdkit-$x-filter.so")
    done
    nbdkit -U "$W/sock" -P "$W/pid" "${f[@]}" \
      "$build/plugins/image/.libs/nbdkit-image-plugin.so" \
      file="$W/t.img" format="$format" cache="$mode" ;;
  esac
  for ((i = 0; i < 100; i++)); do
    [ -S "$W/sock" ] && [ -s "$W/pid" ] && break
    sleep 0.05
  done
}

cpu_of () { awk '{ printf "%.3f", ($14 + $15) / '"$(getconf CLK_TCK)"' }' "/proc/$1/stat"; }

: >"$W/results"
for ((r = 1; r <= runs; r++)); do
  for t in $targets; do
    for rw in randwrite write; do
      serve "$t"
      pid=$(cat "$W/pid")
      bw=$(fio --name=sw --ioengine=nbd --uri="nbd+unix:///?socket=$W/sock" \
             --rw=$rw --bs=512 --iodepth=1 --size=256M --number_ios="$n" \
             --randrepeat=1 --end_fsync=1 --output-format=json |
           python3 -c 'import json, sys; s = sys.stdin.read(); print(json.loads(s[s.index("{"):])["jobs"][0]["write"]["bw"])')
      cpu=$(cpu_of "$pid")
      stop_pids "$pid"
      rm -f "$W/pid"
      echo "$t $rw $r $bw $cpu" | tee -a "$W/results" >&2
    done
  done
done
echo "target rw median-KB/s KB/s-runs median-server-CPU-s"
awk "$MEDIAN_AWK"'{ k = $1 " " $2; bw[k] = bw[k] " " $4; cpu[k] = cpu[k] " " $5; if (!(k in seen)) { seen[k] = 1; keys[++nk] = k } }
  END { for (i = 1; i <= nk; i++) print keys[i], lower_median(bw[keys[i]]), "[" bw[keys[i]] " ]", lower_median(cpu[keys[i]]) }' "$W/results"
