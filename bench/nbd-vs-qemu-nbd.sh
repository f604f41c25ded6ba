#!/usr/bin/env bash
# nbdstack-nbd against qemu-nbd with identical command lines.  A sample
# image (bench/make-sample.sh) is uploaded with `qemu-img convert -n -W`
# and with `nbdcopy --flush` into a fresh sparse raw target served by
#   qemu-nbd              the real one
#   nbdstack-nbd          ours (nbdkit, image plugin, our filters), as is
#   nbdstack-nbd-coalesce ours with NBDSTACK_OPTIONS=coalesce=on
# each started with the same command line:
#   imageio     --export-name= --persistent --shared=8 --cache=none
#               --aio=native --discard=unmap --detect-zeroes=unmap
#               --allocation-depth 'json:{"driver": "raw", "file": {...}}'
#               (oVirt imageio's upload server)
#   writeback   --persistent --shared=8 --discard=unmap
#               --detect-zeroes=unmap -f raw TARGET
#               (a tool's line, host page cache)
# plus --fork --pid-file=... --socket=... for both.  Every upload is
# timed (client wall time, server already listening, final flush
# included) and the server's CPU time (user + system, nbdkit plus our
# supervisor process for nbdstack-nbd) is read from /proc when the
# client is done; then the server is stopped, the target compared with
# the sample (qemu-img compare: any difference aborts) and its ext4
# extents counted (filefrag), which out-of-order writes behind O_DIRECT
# raise and the coalesce filter is meant to keep down.  Runs go
# round-robin, RUNS times; the table has medians and ratios to qemu-nbd
# with the same command line and client.
#
#   BUILD=/tmp/build-bench bench/nbd-vs-qemu-nbd.sh
#
# Environment (all optional):
#   SIZE=2G DATA_PCT=25 ZERO_PCT=4 SEED=1   the sample (bench/make-sample.sh)
#   SAMPLE=FILE        upload this raw image instead
#   RUNS=3             runs per configuration (median reported)
#   SERVERS="qemu-nbd nbdstack-nbd nbdstack-nbd-coalesce"
#   CMDLINES="imageio writeback"
#   CLIENTS="convert-W nbdcopy"
#   BUILD=./build      build dir with nbd/nbdstack-nbd, the plugin and filters
#   TMPDIR=/var/tmp    scratch space: disk-backed (O_DIRECT), about twice
#                      the sample's allocated size free
#   RESULTS=FILE       also write the raw per-run TSV there
#
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export PATH LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
runs=${RUNS:-3}
servers=${SERVERS:-qemu-nbd nbdstack-nbd nbdstack-nbd-coalesce}
cmdlines=${CMDLINES:-imageio writeback}
clients=${CLIENTS:-convert-W nbdcopy}
build=${BUILD:-$top/build}

say () { echo "nbd-vs-qemu-nbd: $*" >&2; }
die () { echo "nbd-vs-qemu-nbd: ERROR: $*" >&2; exit 1; }

build=$(cd "$build" 2>/dev/null && pwd) || die "BUILD=$build: no such directory"
ours=$build/nbd/nbdstack-nbd
[ -x "$ours" ] || die "$ours not found: build first (scripts/setup.sh $build)"
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "RUNS=$runs: expected a positive integer"
[ "$runs" -ge 3 ] || say "warning: RUNS=$runs; medians need at least 3 runs"
for p in nbdkit qemu-img qemu-nbd nbdcopy numfmt awk; do
  command -v "$p" >/dev/null || die "$p is not installed (scripts/setup.sh installs it)"
done
# The plugin and filters of this build, and none of the user's settings.
export NBDSTACK_BUILDDIR=$build NBDSTACK_CONFIG=/dev/null
unset NBDSTACK_OPTIONS NBDSTACK_NBDKIT

tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/nbdstack-nbd-bench.XXXXXX")
tmp=$(realpath "$tmp")
. "$here/server-lib.sh"
[ "$(stat -f -c %T "$tmp")" != tmpfs ] ||
  die "$tmp is on tmpfs (no O_DIRECT): set TMPDIR to a disk-backed directory"

if [ -n "${SAMPLE:-}" ]; then
  sample=$(realpath "$SAMPLE")
  [ -f "$sample" ] || die "SAMPLE=$SAMPLE: no such file"
else
  sample=$tmp/sample.img
  SIZE=${SIZE:-2G} BUILD=$build bash "$here/make-sample.sh" "$sample" >&2 ||
    die "cannot create the sample"
fi
vsize=$(stat -c %s "$sample")
target=$tmp/target.img

# The command line, one argument a line, for CMDLINE.
cmdline_args ()
{
  case $1 in
    imageio)
      printf '%s\n' --export-name= --persistent --shared=8 --cache=none \
        --aio=native --discard=unmap --detect-zeroes=unmap --allocation-depth
      printf 'json:{"driver": "raw", "file": {"driver": "file", "filename": "%s"}}\n' "$target" ;;
    writeback)
      printf '%s\n' --persistent --shared=8 --discard=unmap \
        --detect-zeroes=unmap -f raw "$target" ;;
    *) die "unknown command line $1" ;;
  esac
}

start_server ()               # SERVER CMDLINE
{
  local server=$1 cmdline=$2 prog
  local -a args env=()
  mapfile -t args < <(cmdline_args "$cmdline")
  case $server in
    qemu-nbd) prog=qemu-nbd ;;
    nbdstack-nbd) prog=$ours ;;
    nbdstack-nbd-coalesce) prog=$ours; env=(NBDSTACK_OPTIONS=coalesce=on) ;;
    *) die "unknown server $server" ;;
  esac
  rm -f "$sock" "$pidfile"
  : >"$log"
  env "${env[@]}" "$prog" --fork --pid-file="$pidfile" --socket="$sock" \
    "${args[@]}" 2>>"$log" || return 1
  [ -s "$pidfile" ]
}

# CPU seconds (user + system) of the server so far: the pid file's
# process and, for nbdstack-nbd, its supervisor (the parent).
server_cpu ()
{
  local pid ppid hz
  pid=$(cat "$pidfile")
  ppid=$(awk '{ sub(/^.*\) /, ""); print $2 }' "/proc/$pid/stat")
  hz=$(getconf CLK_TCK)
  {
    cat "/proc/$pid/stat"
    if [ "$(cat "/proc/$ppid/comm" 2>/dev/null)" = nbdstack-nbd ]; then
      cat "/proc/$ppid/stat"
    fi
  } | awk -v hz="$hz" '{ sub(/^.*\) /, ""); t += $12 + $13 } END { printf "%.2f", t / hz }'
}

results=$tmp/results
: >"$results"
upload_once ()                # RUN SERVER CMDLINE CLIENT
{
  local run=$1 server=$2 cmdline=$3 client=$4 uri="nbd+unix:///?socket=$sock"
  local t0 t1 cpu secs frag
  rm -f "$target"
  truncate -s "$vsize" "$target"
  sync -f "$tmp"
  start_server "$server" "$cmdline" ||
    die "$server ($cmdline) did not start: $(tail -n 3 "$log")"
  t0=$EPOCHREALTIME
  case $client in
    convert-W) qemu-img convert -n -W -f raw -O raw "$sample" "$uri" ;;
    nbdcopy) nbdcopy --flush "$sample" "$uri" ;;
  esac || die "upload failed: $server $cmdline $client (run $run)"
  t1=$EPOCHREALTIME
  cpu=$(server_cpu)
  stop_server
  qemu-img compare -q -f raw -F raw "$sample" "$target" ||
    die "VERIFY FAILED: $server $cmdline $client (run $run): target differs from the sample"
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
  # Host file fragmentation (ext4 extents): what coalescing is for.
  frag=$(filefrag "$target" 2>/dev/null | awk '{ print $(NF - 2) }') || frag=-
  [[ $frag =~ ^[0-9]+$ ]] || frag=-
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$server" "$cmdline" "$client" "$run" "$secs" "$cpu" "$frag" >>"$results"
  say "run $run: $server $cmdline $client: $secs s, server CPU $cpu s, $frag extents, verified"
  rm -f "$target"
}

configs=()
for l in $cmdlines; do
  for c in $clients; do
    for s in $servers; do
      configs+=("$s $l $c")
    done
  done
done

say "warming the page cache with the sample"
nbdcopy "$sample" null:
load_before=$(uptime)
say "load before: $load_before"
n=${#configs[@]}
for ((r = 1; r <= runs; r++)); do
  for ((i = 0; i < n; i++)); do
    read -r s l c <<<"${configs[$(((i + r - 1) % n))]}"
    upload_once "$r" "$s" "$l" "$c"
  done
done
load_after=$(uptime)
say "load after: $load_after"
[ -z "${RESULTS:-}" ] || cp "$results" "$RESULTS"

echo
echo "Upload of $(numfmt --to=iec "$vsize") virtual, $(numfmt --to=iec "$(($(stat -c '%b * %B' "$sample")))") allocated;"
echo "median of $runs runs; time = client wall seconds; CPU = server user+system seconds."
echo "time ratio = qemu-nbd's median / this median (> 1: faster than qemu-nbd);"
echo "CPU ratio = this median / qemu-nbd's median (< 1: less CPU than qemu-nbd)."
echo "$(qemu-nbd --version | head -1); nbdkit $(nbdkit --version | awk '{print $2}'); $("$ours" --version | head -1)"
echo "load before: $load_before"
echo "load after:  $load_after"
echo
awk -F'\t' -v configs="$(printf '%s\n' "${configs[@]}")" "$MEDIAN_AWK"'
{
  k = $1 " " $2 " " $3
  secs[k] = secs[k] (secs[k] == "" ? "" : " ") $5
  cpus[k] = cpus[k] (cpus[k] == "" ? "" : " ") $6
  frags[k] = frags[k] (frags[k] == "" ? "" : " ") $7
}
END {
  printf "| %-21s | %-9s | %-9s | %8s | %-29s | %10s | %6s | %-24s | %9s | %7s |\n", \
    "server", "cmdline", "client", "median s", "runs (s)", "time ratio", "CPU s", "CPU runs", "CPU ratio", "extents"
  printf "|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", "-----------------------", "-----------", \
    "-----------", "---------:", "-------------------------------", "-----------:", "-------:", \
    "--------------------------", "----------:", "--------:"
  nc = split(configs, cl, "\n")
  for (i = 1; i <= nc; i++) {
    k = cl[i]; split(k, f, " ")
    if (!(k in secs)) continue
    m = median(secs[k]); c = median(cpus[k])
    q = "qemu-nbd " f[2] " " f[3]
    tr = (q in secs) ? sprintf("%.2f", median(secs[q]) / m) : "-"
    cr = (q in cpus && median(cpus[q]) > 0) ? sprintf("%.2f", c / median(cpus[q])) : "-"
    fr = (frags[k] ~ /^[- ]*$/) ? "-" : sprintf("%d", median(frags[k]))
    printf "| %-21s | %-9s | %-9s | %8.2f | %-29s | %10s | %6.2f | %-24s | %9s | %7s |\n", \
      f[1], f[2], f[3], m, secs[k], tr, c, cpus[k], cr, fr
  }
}' "$results"
