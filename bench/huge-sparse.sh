#!/usr/bin/env bash
# nbdstack: huge sparse disks (issue 22 item 2).  A raw sample of
# virtual size S holding only DATA bytes of data (1 MiB runs spread
# evenly over the whole disk, holes between them) is uploaded into a
# fresh target of the same size: raw (truncate) or qcow2 (qemu-img
# create, as oVirt makes upload targets).  What an upload pipeline pays
# for such a disk should grow with its data, not with its virtual size.
#
# Servers (each started fresh per upload, on a unix socket):
#   qemu-nbd-imageio  qemu-nbd with imageio/vdsm's options: --cache=none
#                     --aio=native --discard=unmap --detect-zeroes=unmap
#   qemu-nbd          qemu-nbd, defaults (--cache=writeback)
#   file              nbdkit's file plugin (raw only)
#   image             our image plugin alone
#   stack             coalesce + zerodetect + discard over the image plugin
#   nbdstack-nbd      our qemu-nbd drop-in with vdsm's options
#   null              nbdkit's null plugin: stores nothing, zero is a no-op;
#                     the floor of nbdkit's protocol cost for the same
#                     request stream (not verified: it keeps no data)
# Clients:
#   convert-W   qemu-img convert -n -W -f raw -O FMT SAMPLE URI
#   nbdcopy     nbdcopy --flush SAMPLE URI
#   imageio     bench/imageio-client (4 connections; holes go as
#               NBD_CMD_WRITE_ZEROES of up to 128 MiB, as imageio sends them)
#
# Per upload: client wall time, server CPU (user + system of the server's
# process tree, read when the client is done), the target's allocated
# bytes after the server has stopped; every target is verified with
# qemu-img compare against the sample (and qemu-img check for qcow2); a
# difference or error aborts the run.  An upload still running after
# TIMEOUT seconds is stopped and recorded as ">TIMEOUT" (not verified);
# a cell that timed out is not run again in later rounds.
#
#   BUILD=./build bench/huge-sparse.sh
#
# Environment (optional):
#   SIZES="64G 1T 8T"  virtual sizes (the plot wants at least 3)
#   DATA=80M           data in each sample (1 MiB runs)
#   FORMATS="raw qcow2"
#   SERVERS="qemu-nbd-imageio qemu-nbd file image stack nbdstack-nbd null"
#   CLIENTS="convert-W nbdcopy imageio"
#   RUNS=1             rounds; each runs every cell once, shuffled
#   TIMEOUT=300        seconds per upload
#   OUT=DIR            also write results.tsv, huge-sparse.md and
#                      huge-sparse.png there
#   TMPDIR=/var/tmp    disk-backed scratch (O_DIRECT)
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export PATH LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
build=$(cd "${BUILD:-$top/build}" && pwd)
sizes=${SIZES:-64G 1T 8T}
data=$(numfmt --from=iec "${DATA:-80M}")
formats=${FORMATS:-raw qcow2}
servers=${SERVERS:-qemu-nbd-imageio qemu-nbd file image stack nbdstack-nbd null}
clients=${CLIENTS:-convert-W nbdcopy imageio}
runs=${RUNS:-1}
timeout=${TIMEOUT:-300}
out=${OUT:-}

say () { echo "huge-sparse: $*" >&2; }
die () { echo "huge-sparse: ERROR: $*" >&2; exit 1; }

plugin=$build/plugins/image/.libs/nbdkit-image-plugin.so
[ -f "$plugin" ] || die "$plugin: build first"
[ -x "$build/bench/imageio-client" ] || die "$build/bench/imageio-client: build first"
[ -x "$build/nbd/nbdstack-nbd" ] || die "$build/nbd/nbdstack-nbd: build first"
filters=()
for f in coalesce zerodetect discard; do
  filters+=("--filter=$build/filters/$f/.libs/nbdkit-$f-filter.so")
done
export NBDSTACK_CONFIG=/dev/null
unset NBDSTACK_NBDKIT

tmp=$(realpath "$(mktemp -d "${TMPDIR:-/var/tmp}/nbdstack-huge.XXXXXX")")
. "$here/server-lib.sh"
[ "$(stat -f -c %T "$tmp")" != tmpfs ] || die "$tmp is on tmpfs (no O_DIRECT)"

# make_sample SIZE FILE: DATA bytes in 1 MiB runs of random bytes, evenly
# spread (the first at 0, so the disk has a "boot sector"), holes between.
make_sample ()
{
  local size=$1 file=$2 n stride i
  n=$((data >> 20))
  stride=$((size / n / 1048576 * 1048576))
  [ "$stride" -ge 1048576 ] || die "SIZE $size too small for DATA"
  rm -f "$file"
  truncate -s "$size" "$file"
  for ((i = 0; i < n; i++)); do
    echo "$((i * stride / 1048576))"
  done | while read -r mib; do
    dd if=/dev/urandom of="$file" bs=1M count=1 seek="$mib" conv=notrunc status=none
  done
}

# start KIND FMT TARGET: start a server; sets $spid (the process whose
# tree is measured).
start ()
{
  local kind=$1 fmt=$2 target=$3
  rm -f "$sock" "$pidfile"
  case $kind in
    qemu-nbd-imageio | qemu-nbd)
      local -a o=(--cache=writeback)
      [ "$kind" = qemu-nbd ] ||
        o=(--cache=none --aio=native --discard=unmap --detect-zeroes=unmap)
      qemu-nbd --fork --pid-file="$pidfile" --socket="$sock" -f "$fmt" \
        --persistent --shared=8 "${o[@]}" "$target" 2>>"$log" ;;
    file)
      nbdkit --log=stderr -U "$sock" -P "$pidfile" file file="$target" 2>>"$log" ;;
    image)
      nbdkit --log=stderr -U "$sock" -P "$pidfile" "$plugin" file="$target" 2>>"$log" ;;
    stack)
      nbdkit --log=stderr -U "$sock" -P "$pidfile" "${filters[@]}" "$plugin" \
        file="$target" 2>>"$log" ;;
    null)
      nbdkit --log=stderr -U "$sock" -P "$pidfile" null "$(stat -c %s "$sample")" 2>>"$log" ;;
    nbdstack-nbd)
      NBDSTACK_BUILDDIR=$build "$build/nbd/nbdstack-nbd" --fork \
        --pid-file="$pidfile" --socket="$sock" --export-name= --persistent \
        --shared=8 --cache=none --aio=native --discard=unmap \
        --detect-zeroes=unmap -f "$fmt" "$target" 2>>"$log" ;;
    *) die "unknown server $kind" ;;
  esac || die "$kind did not start: $(tail -n 3 "$log")"
  for _ in $(seq 100); do [ -S "$sock" ] && [ -s "$pidfile" ] && break; sleep 0.05; done
  [ -S "$sock" ] || die "$kind: no socket"
}

# tree_cpu PID: CPU ticks of PID and its descendants so far.
tree_cpu ()
{
  local pid=$1 t=0 c
  t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat" 2>/dev/null || echo 0)
  for c in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
    t=$((t + $(tree_cpu "$c")))
  done
  echo "$t"
}

hz=$(getconf CLK_TCK)
declare -A timed_out=()
results=$tmp/results.tsv
: >"$results"

# one SIZE FMT SERVER CLIENT ROUND
one ()
{
  local size=$1 fmt=$2 server=$3 client=$4 run=$5 target=$tmp/target.$2
  local uri="nbd+unix:///?socket=$sock" t0 t1 rc=0 cpu secs alloc
  rm -f "$target"
  if [ "$fmt" = raw ]; then truncate -s "$size" "$target"
  else qemu-img create -q -f qcow2 "$target" "$size"; fi
  start "$server" "$fmt" "$target"
  sync -f "$tmp"
  t0=$EPOCHREALTIME
  case $client in
    convert-W) timeout "$timeout" qemu-img convert -n -W -f raw -O raw "$sample" "$uri" || rc=$? ;;
    nbdcopy) timeout "$timeout" nbdcopy --flush "$sample" "$uri" || rc=$? ;;
    imageio) timeout "$timeout" "$build/bench/imageio-client" "$sample" "$uri" || rc=$? ;;
  esac
  t1=$EPOCHREALTIME
  cpu=$(awk -v t="$(tree_cpu "$(cat "$pidfile")")" -v hz="$hz" 'BEGIN { printf "%.2f", t / hz }')
  stop_server
  if [ $rc -eq 124 ]; then
    secs=">$timeout" alloc=-
    timed_out["$size $fmt $server $client"]=1
    say "round $run: $size $fmt $server $client: stopped after $timeout s"
  else
    [ $rc -eq 0 ] || die "$server $fmt $client $size: client failed ($rc)"
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  fi
  if [ $rc -eq 124 ]; then :
  elif [ "$server" = null ]; then
    alloc=0
    say "round $run: $size $fmt $server $client: $secs s, CPU $cpu s (floor, nothing stored)"
  else
    qemu-img compare -q -f raw -F "$fmt" "$sample" "$target" ||
      die "VERIFY FAILED: $size $fmt $server $client"
    if [ "$fmt" = qcow2 ]; then
      qemu-img check -q "$target" >/dev/null || die "CHECK FAILED: $size $fmt $server $client"
    fi
    alloc=$(( $(stat -c '%b * %B' "$target") ))
    say "round $run: $size $fmt $server $client: $secs s, CPU $cpu s, $((alloc >> 20)) MiB allocated, verified"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$fmt" "$server" "$client" \
    "$run" "$secs" "$cpu" "$alloc" >>"$results"
  rm -f "$target"
}

say "load before: $(uptime)"
for size in $sizes; do
  sample=$tmp/sample.raw
  make_sample "$(numfmt --from=iec "$size")" "$sample"
  nbdcopy "$sample" null:
  cells=()
  for fmt in $formats; do
    for s in $servers; do
      case $s/$fmt in file/qcow2 | null/qcow2) continue ;; esac
      for c in $clients; do cells+=("$fmt $s $c"); done
    done
  done
  for ((r = 1; r <= runs; r++)); do
    while read -r k; do
      read -r fmt s c <<<"${cells[$k]}"
      [ -z "${timed_out["$size $fmt $s $c"]:-}" ] || continue
      one "$size" "$fmt" "$s" "$c" "$r"
    done < <(round_order "${#cells[@]}" "$r")
  done
done
say "load after: $(uptime)"

# The tables: one per format and client, a row per server, a column
# per virtual size holding the medians "time s / server CPU s /
# allocated MiB"; a cell with a timed-out run shows ">TIMEOUT".
table ()
{
  local fmt c
  for fmt in $formats; do for c in $clients; do
    echo
    echo "$fmt target, $c:"
    echo
    awk -F'\t' -v fmt="$fmt" -v c="$c" -v sizes="$sizes" -v servers="$servers" "$MEDIAN_AWK"'
      $2 == fmt && $4 == c { k = $1 SUBSEP $3
        if ($6 ~ /^>/) to[k] = $6; else { t[k] = t[k] " " $6; a[k] = a[k] " " $8 }
        cpu[k] = cpu[k] " " $7 }
      END {
        ns = split(sizes, sz, " "); nv = split(servers, sv, " ")
        printf "| server |"; for (i = 1; i <= ns; i++) printf " %s: s / CPU s / MiB |", sz[i]; print ""
        printf "|---|"; for (i = 1; i <= ns; i++) printf "---:|"; print ""
        for (j = 1; j <= nv; j++) {
          row = "| " sv[j] " |"; any = 0
          for (i = 1; i <= ns; i++) { k = sz[i] SUBSEP sv[j]
            if (k in to) { row = row " " to[k] " |"; any = 1 }
            else if (k in t) { any = 1
              row = row sprintf(" %.2f / %.2f / %.0f |", median(t[k]), median(cpu[k]), median(a[k]) / 1048576) }
            else row = row " - |" }
          if (any) print row } }' "$results"
  done; done
}

echo
echo "Huge sparse disks: $(numfmt --to=iec "$data") of data in 1 MiB runs; $runs round(s); load after: $(uptime)"
table
if [ -n "$out" ]; then
  mkdir -p "$out"
  cp "$results" "$out/huge-sparse.tsv"
  table >"$out/huge-sparse.md"
  if command -v gnuplot >/dev/null; then
    # One panel per format and client: time against virtual size, a line
    # per server (timed-out runs are left out of the line).
    for fmt in $formats; do for c in $clients; do
      for s in $servers; do
        awk -F'\t' -v f="$fmt" -v c="$c" -v s="$s" '$2 == f && $4 == c && $3 == s && $6 !~ /^>/' "$results" |
          while IFS=$'\t' read -r sz _ _ _ _ secs _ _; do
            echo "$(numfmt --from=iec "$sz") $secs"
          done | sort -n >"$tmp/plot.$fmt.$c.$s"
      done
    done; done
    {
      echo "set terminal pngcairo size 1400,800; set output '$out/huge-sparse.png'"
      echo "set multiplot layout $(echo $formats | wc -w),$(echo $clients | wc -w)"
      echo "set logscale xy; set xlabel 'virtual size (bytes)'; set ylabel 'upload time (s)'; set key top left font ',8'"
      for fmt in $formats; do for c in $clients; do
        echo "set title '$fmt target, $c'"
        plot="plot"
        for s in $servers; do
          [ -s "$tmp/plot.$fmt.$c.$s" ] && plot="$plot '$tmp/plot.$fmt.$c.$s' using 1:2 with linespoints title '$s',"
        done
        echo "${plot%,}"
      done; done
      echo "unset multiplot"
    } | gnuplot
  fi
fi
