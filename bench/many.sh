#!/usr/bin/env bash
# nbdstack: many transfers on one host (issue 22 item 3).  imageio and
# vdsm run one NBD server per transfer: start N servers at once, each
# with vdsm's options on its own fresh target, and upload the sample into
# every one at the same time with its own client (`qemu-img convert -n
# -W` unless CLIENT says otherwise).
#
# Per server: peak RSS (VmHWM, summed over the server's process tree:
# qemu-nbd, or nbdkit plus its nbdstack-nbd supervisor) and CPU seconds
# (user + system), read from /proc when its client is done; aggregate
# MB/s = N x virtual size / wall time of the slowest client.  Every target
# is compared with the sample (qemu-img compare; a difference aborts).
#
#   BUILD=./build N="1 4 8" bench/many.sh
#
# Environment:
#   N="1 4 8"        server counts
#   SERVERS="qemu-nbd nbdstack-nbd"   and nbdstack-nbd-base with BASE_BUILD;
#                    also image and stack (nbdkit with our plugin alone, or
#                    with coalesce + zerodetect + discard, cache=none)
#   BASE_BUILD=DIR   an older build: adds server nbdstack-nbd-base
#                    (or name a server LABEL=DIR[,OPTIONS]: nbdstack-nbd of
#                    build DIR, with NBDSTACK_OPTIONS=OPTIONS)
#   NBDSTACK_OPTIONS is passed on to every nbdstack-nbd (e.g. threads=8)
#   FORMAT=raw       raw or qcow2 (targets made with qemu-img create)
#   CLIENT=convert-W the client of each server: convert-W (qemu-img
#                    convert -n -W), convert (in order, without -W) or
#                    nbdcopy (nbdcopy --flush: several connections when
#                    the server offers multi-conn, 64 requests in flight
#                    on each)
#   RUNS=1           rounds (each round runs every cell once, shuffled)
#   SIZE=1G, SAMPLE=FILE, TMPDIR=/var/tmp (disk-backed, for O_DIRECT)
#   OUT=DIR          also write many.tsv, many.md and many.png (aggregate
#                    MB/s and peak RSS per server against N) there
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export PATH LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
counts=${N:-1 4 8}
runs=${RUNS:-1}
format=${FORMAT:-raw}
client=${CLIENT:-convert-W}
build=$(cd "${BUILD:-$top/build}" && pwd)
servers=${SERVERS:-qemu-nbd nbdstack-nbd${BASE_BUILD:+ nbdstack-nbd-base}}

say () { echo "many: $*" >&2; }
die () { echo "many: ERROR: $*" >&2; exit 1; }

[ -x "$build/nbd/nbdstack-nbd" ] || die "$build/nbd/nbdstack-nbd: build first"
[ -z "${BASE_BUILD:-}" ] || [ -x "$BASE_BUILD/nbd/nbdstack-nbd" ] ||
  die "BASE_BUILD=$BASE_BUILD has no nbd/nbdstack-nbd"
case $format in raw | qcow2) ;; *) die "FORMAT=$format: raw or qcow2" ;; esac
case $client in
  convert-W | convert | nbdcopy) ;;
  *) die "CLIENT=$client: convert-W, convert or nbdcopy" ;;
esac
export NBDSTACK_CONFIG=/dev/null
unset NBDSTACK_NBDKIT

tmp=$(realpath "$(mktemp -d "${TMPDIR:-/var/tmp}/nbdstack-many.XXXXXX")")
. "$top/common/stop-server.sh"
. "$here/median.sh"
. "$here/rounds.sh"
. "$here/vdsm-server.sh"
pids=()
cleanup ()
{
  local rc=$? p
  set +e
  for p in "${pids[@]}"; do stop_pids --timeout=20 "$p" || :; done
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[ "$(stat -f -c %T "$tmp")" != tmpfs ] || die "$tmp is on tmpfs (no O_DIRECT)"

if [ -n "${SAMPLE:-}" ]; then
  sample=$(realpath "$SAMPLE")
else
  sample=$tmp/sample.img
  SIZE=${SIZE:-1G} BUILD=$build bash "$here/make-sample.sh" "$sample" >&2
fi
vsize=$(stat -c %s "$sample")

# start SERVER I: server I on its own target and socket, vdsm's options.
start ()
{
  local server=$1 i=$2 t=$tmp/t$2.$format
  rm -f "$t"
  if [ "$format" = raw ]; then
    truncate -s "$vsize" "$t"
  else
    qemu-img create -q -f qcow2 "$t" "$vsize"
  fi
  vdsm_start "$server" "$format" "$t" "$tmp/s$i" "$tmp/p$i" "$tmp/log$i" ||
    die "$server $i did not start: $(tail -n 3 "$tmp/log$i")"
  pids+=("$(cat "$tmp/p$i")")
}

# upload URI: the client's upload of the sample to URI.
upload ()
{
  case $client in
    convert-W) qemu-img convert -n -W -f raw -O raw "$sample" "$1" ;;
    convert) qemu-img convert -n -f raw -O raw "$sample" "$1" ;;
    nbdcopy) nbdcopy --flush "$sample" "$1" ;;
  esac
}

results=$tmp/results
: >"$results"
hz=$(getconf CLK_TCK)
one ()                          # ROUND SERVER N
{
  local run=$1 server=$2 n=$3 i t0 t1 rc=0
  local -a cpids=() stats=()
  pids=()
  for ((i = 0; i < n; i++)); do start "$server" "$i"; done
  sync -f "$tmp"
  t0=$EPOCHREALTIME
  for ((i = 0; i < n; i++)); do
    upload "nbd+unix:///?socket=$tmp/s$i" &
    cpids+=($!)
  done
  for ((i = 0; i < n; i++)); do
    wait "${cpids[$i]}" || rc=1
    # Read at once: the server's CPU is its upload's, not what follows.
    stats[$i]=$(server_tree_stats "${pids[$i]}")
  done
  t1=$EPOCHREALTIME
  [ $rc -eq 0 ] || die "an upload failed: $server N=$n round $run"
  for ((i = 0; i < n; i++)); do stop_pids --timeout=20 "${pids[$i]}" || :; done
  pids=()
  for ((i = 0; i < n; i++)); do
    qemu-img compare -q -f raw -F "$format" "$sample" "$tmp/t$i.$format" ||
      die "VERIFY FAILED: $server N=$n server $i round $run"
    rm -f "$tmp/t$i.$format"
    read -r rss cpu <<<"${stats[$i]}"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$server" "$n" "$run" "$i" \
      "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" \
      "$rss" "$(awk -v t="$cpu" -v hz="$hz" 'BEGIN { printf "%.2f", t / hz }')" \
      >>"$results"
  done
  say "round $run: $server N=$n: $(awk -F'\t' -v s="$server" -v n="$n" -v r="$run" \
    '$1 == s && $2 == n && $3 == r { w = $5; if ($6 > m) m = $6; c += $7 }
     END { printf "%.2f s wall, max peak RSS %.1f MiB, CPU %.2f s total", w, m / 1024, c }' "$results"), verified"
}

cells=()
for n in $counts; do for s in $servers; do cells+=("$s $n"); done; done
say "load before: $(uptime)"
nbdcopy "$sample" null: # the sample in the page cache
run_rounds "$runs" one "${cells[@]}"
say "load after: $(uptime)"
[ -z "${RESULTS:-}" ] || cp "$results" "$RESULTS"

table ()
{
echo "$format targets, sample $(numfmt --to=iec "$vsize") virtual; $runs round(s); vdsm's options; client $client"
echo
echo "| server | N | wall s | aggregate MB/s | peak RSS MiB per server (median / max) | CPU s per server (median) |"
echo "|---|---:|---:|---:|---:|---:|"
for n in $counts; do
  for s in $servers; do
    awk -F'\t' -v s="$s" -v n="$n" -v vsize="$vsize" "$MEDIAN_AWK"'
      $1 == s && $2 == n {
        if (!($3 in seen)) { seen[$3] = 1; walls = walls " " $5 }
        rss = rss " " $6 / 1024; if ($6 / 1024 > mx) mx = $6 / 1024; cpu = cpu " " $7 }
      END { if (walls == "") exit
        w = median(walls)
        printf "| %s | %d | %.2f | %.0f | %.1f / %.1f | %.2f |\n", s, n, w,
          n * vsize / w / 1e6, median(rss), mx, median(cpu) }' "$results"
  done
done
}
echo
table
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp "$results" "$OUT/many.tsv"
  table >"$OUT/many.md"
  if command -v gnuplot >/dev/null; then
    # Per server, a line of "N aggregate-MB/s median-RSS-MiB".
    for s in $servers; do
      table | awk -F' *[|] *' -v s="$s" '$2 == s { split($6, r, " "); print $3, $5, r[1] }' \
        >"$tmp/plot.${s//[^A-Za-z0-9]/_}"
    done
    {
      echo "set terminal pngcairo size 1200,500; set output '$OUT/many.png'"
      echo "set multiplot layout 1,2; set xlabel 'servers at once (N)'; set key top left"
      for col in 2:"aggregate MB/s" 3:"peak RSS per server (MiB)"; do
        echo "set title '${col#*:} ($format, one $client each)'; set ylabel '${col#*:}'"
        plot="plot"
        for s in $servers; do
          plot="$plot '$tmp/plot.${s//[^A-Za-z0-9]/_}' using 1:${col%%:*} with linespoints title '$s',"
        done
        echo "${plot%,}"
      done
      echo "unset multiplot"
    } | gnuplot
  fi
fi
