#!/usr/bin/env bash
# nbdstack: server CPU in the imageio pipeline (issue 21 item 4), upload
# and download, side by side with qemu-nbd, all started with vdsm's
# options.  Per round and cell: a fresh target (raw: sparse file; qcow2:
# qemu-img create), the sample uploaded by bench/imageio-client (4
# connections, 128M regions, 8M writes, zero requests for holes), the
# server stopped; a new server on that target, downloaded by
# bench/imageio-download (4 connections, own regions, block status, 8M
# reads of what is not zero) into a local file, the server stopped.
# Both the target and the download are compared with the sample.  CPU =
# user + system seconds and peak RSS (VmHWM) of the server tree
# (qemu-nbd, or nbdkit plus its nbdstack-nbd supervisor, summed), read
# when the client is done.
#
#   BUILD=./build BASE_BUILD=/old/build RUNS=3 bench/imageio-rw.sh
#
# Environment: SERVERS (qemu-nbd nbdstack-nbd, nbdstack-nbd-base with
# BASE_BUILD, or LABEL=DIR[,NBDSTACK_OPTIONS]), FORMATS="raw qcow2", RUNS=3, SIZE=1G or
# SAMPLE=FILE, TMPDIR=/var/tmp (disk-backed), PERF=DIR: record each
# nbdstack-nbd server with `perf record -g` into DIR.
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export PATH LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
runs=${RUNS:-3}
formats=${FORMATS:-raw qcow2}
build=$(cd "${BUILD:-$top/build}" && pwd)
servers=${SERVERS:-qemu-nbd nbdstack-nbd${BASE_BUILD:+ nbdstack-nbd-base}}
perfdir=${PERF:-}

say () { echo "imageio-rw: $*" >&2; }
die () { echo "imageio-rw: ERROR: $*" >&2; exit 1; }
for p in "$build/bench/imageio-client" "$build/bench/imageio-download"; do
  [ -x "$p" ] || die "$p: build first"
done
export NBDSTACK_CONFIG=/dev/null
unset NBDSTACK_NBDKIT

tmp=$(realpath "$(mktemp -d "${TMPDIR:-/var/tmp}/nbdstack-imageio-rw.XXXXXX")")
. "$top/common/stop-server.sh"
. "$here/median.sh"
. "$here/rounds.sh"
. "$here/vdsm-server.sh"
pid= perfpid=
cleanup ()
{
  local rc=$?
  set +e
  [ -z "$perfpid" ] || kill -INT "$perfpid" 2>/dev/null
  [ -z "$pid" ] || stop_pids --timeout=20 "$pid" || :
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${SAMPLE:-}" ]; then
  sample=$(realpath "$SAMPLE")
else
  sample=$tmp/sample.img
  SIZE=${SIZE:-1G} BUILD=$build bash "$here/make-sample.sh" "$sample" >&2
fi
vsize=$(stat -c %s "$sample")

start ()                        # SERVER FORMAT TARGET
{
  vdsm_start "$1" "$2" "$3" "$tmp/s" "$tmp/p" "$tmp/log" ||
    die "$1 did not start: $(tail -n 3 "$tmp/log")"
  pid=$(cat "$tmp/p")
}

# "CPU-SECONDS PEAK-RSS-MIB" of the server tree.
cpu ()
{
  local rss ticks
  read -r rss ticks <<<"$(server_tree_stats "$pid")"
  awk -v r="$rss" -v t="$ticks" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.2f\t%.1f", t / hz, r / 1024 }'
}

perf_on ()                      # NAME
{
  perfpid=
  [ -n "$perfdir" ] && [ "${server%%=*}" != qemu-nbd ] || return 0
  mkdir -p "$perfdir"
  # The pid file names nbdstack-nbd's supervisor; nbdkit is its child.
  perf record -q -g -p "$(server_tree_pids "$pid" | paste -sd,)" \
    -o "$perfdir/$1.data" 2>/dev/null &
  perfpid=$!
  sleep 0.5
}
perf_off ()
{
  [ -n "$perfpid" ] || return 0
  kill -INT "$perfpid"; wait "$perfpid" || :
  perfpid=
}

results=$tmp/results
: >"$results"
one ()                          # ROUND SERVER FORMAT
{
  local run=$1 server=$2 fmt=$3 t=$tmp/target t0 t1 c
  rm -f "$t" "$tmp/dl"
  if [ "$fmt" = raw ]; then truncate -s "$vsize" "$t"
  else qemu-img create -q -f qcow2 "$t" "$vsize"; fi
  sync -f "$tmp"
  start "$server" "$fmt" "$t"
  perf_on "${server%%=*}-$fmt-up-$run"
  t0=$EPOCHREALTIME
  "$build/bench/imageio-client" "$sample" "nbd+unix:///?socket=$tmp/s" ||
    die "upload failed: $server $fmt"
  t1=$EPOCHREALTIME
  c=$(cpu); perf_off
  stop_pids --timeout=20 "$pid" || :; pid=
  qemu-img compare -q -f raw -F "$fmt" "$sample" "$t" ||
    die "VERIFY FAILED: upload $server $fmt round $run"
  printf '%s\t%s\tupload\t%s\t%s\t%s\n' "$server" "$fmt" "$run" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" "$c" >>"$results"
  start "$server" "$fmt" "$t"
  perf_on "${server%%=*}-$fmt-down-$run"
  t0=$EPOCHREALTIME
  "$build/bench/imageio-download" "nbd+unix:///?socket=$tmp/s" "$tmp/dl" ||
    die "download failed: $server $fmt"
  t1=$EPOCHREALTIME
  c=$(cpu); perf_off
  stop_pids --timeout=20 "$pid" || :; pid=
  cmp "$sample" "$tmp/dl" || die "VERIFY FAILED: download $server $fmt round $run"
  printf '%s\t%s\tdownload\t%s\t%s\t%s\n' "$server" "$fmt" "$run" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" "$c" >>"$results"
  say "round $run: $server $fmt: $(tail -n 2 "$results" | awk -F'\t' '{ printf "%s %s s CPU %s s RSS %s MiB; ", $3, $5, $6, $7 }')verified"
  rm -f "$t" "$tmp/dl"
}

cells=()
for f in $formats; do for s in $servers; do cells+=("$s $f"); done; done
say "load before: $(uptime)"
nbdcopy "$sample" null:
run_rounds "$runs" one "${cells[@]}"
say "load after: $(uptime)"
[ -z "${RESULTS:-}" ] || cp "$results" "$RESULTS"

echo
echo "sample $(numfmt --to=iec "$vsize") virtual; medians of $runs round(s); vdsm's options"
echo "| server | format | direction | wall s | server CPU s | peak RSS MiB | CPU runs |"
echo "|---|---|---|---:|---:|---:|---|"
for f in $formats; do for d in upload download; do for s in $servers; do
  awk -F'\t' -v s="$s" -v f="$f" -v d="$d" "$MEDIAN_AWK"'
    $1 == s && $2 == f && $3 == d { w = w " " $5; c = c " " $6; m = m " " $7 }
    END { if (w != "") printf "| %s | %s | %s | %.2f | %.2f | %.1f |%s |\n", s, f, d, median(w), median(c), median(m), c }' "$results"
done; done; done
