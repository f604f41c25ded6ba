#!/usr/bin/env bash
# The issue-21 cells counted instead of timed: what the full stack
# (coalesce + zerodetect + discard) adds to the image plugin's work for
# one upload, in measures that do not move with this VM's noise.  Per
# cell (format x cache mode x client) and configuration (the plugin
# alone, the stack), two uploads of the sample into a fresh target:
#   1. the server under perf stat (software events, which this VM has):
#      system calls entered, context switches, page faults;
#   2. the server under valgrind's callgrind: instructions executed in
#      user space (Ir), filters and plugin and nbdkit and libc together.
# Kernel work per system call and per byte is the same on both sides
# (the stack passes the same bytes to the same plugin), so what the
# stack costs in CPU beyond the plugin is its extra user instructions
# plus its extra system calls and switches.  Under valgrind the threads
# run one at a time, so timing-driven choices (what coalesce buffers)
# may differ from a timed run; perf runs at full speed.  Every upload
# is compared with the sample.  Nothing here is timed.
#
#   SAMPLE=used.img BUILD=./build bench/stack-work.sh
#
# Environment: SAMPLE (required: a raw image, e.g. from
# bench/make-used-sample.sh), FORMATS="raw qcow2", MODES="writeback
# none", CLIENTS="convert convert-W nbdcopy imageio" (as upload.sh),
# FILTERS="coalesce zerodetect discard", TMPDIR=/var/tmp (disk-backed:
# cache=none needs O_DIRECT), RESULTS=FILE (also the TSV there).
# Needs perf and valgrind.  A qcow2 target is made by qemu-img create,
# as upload.sh and oVirt make theirs.
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export LC_ALL=C
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${BUILD:-$here/../build}" && pwd)
sample=${SAMPLE:?stack-work: set SAMPLE to a raw image}
formats=${FORMATS:-raw qcow2}
modes=${MODES:-writeback none}
clients=${CLIENTS:-convert convert-W nbdcopy imageio}
filters=${FILTERS:-coalesce zerodetect discard}
plugin=$build/plugins/image/.libs/nbdkit-image-plugin.so
die () { echo "stack-work: $*" >&2; exit 1; }
for p in perf valgrind nbdkit qemu-img nbdcopy; do
  command -v "$p" >/dev/null || die "$p is not installed"
done
[ -f "$plugin" ] || die "$plugin: not built"
[ -x "$build/bench/imageio-client" ] || [[ " $clients " != *" imageio "* ]] ||
  die "$build/bench/imageio-client: not built"
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/stack-work.XXXXXX")
. "$here/server-lib.sh"        # $sock, $pidfile, $log, stop_server, cleanup
vsize=$(stat -c %s "$sample")
uri="nbd+unix:///?socket=$sock"

stack_args=()
for f in $filters; do
  stack_args+=("--filter=$build/filters/$f/.libs/nbdkit-$f-filter.so")
done

fresh_target ()               # FORMAT
{
  rm -f "$tmp/t.img" "$sock"
  if [ "$1" = qcow2 ]; then
    qemu-img create -q -f qcow2 "$tmp/t.img" "$vsize" || die "qemu-img create failed"
  else
    truncate -s "$vsize" "$tmp/t.img"
  fi
}

wait_socket ()
{
  for _ in $(seq 300); do [ -S "$sock" ] && return 0; sleep 0.1; done
  die "the server did not make its socket"
}

run_client ()                 # CLIENT
{
  case $1 in
    convert) qemu-img convert -n -f raw -O raw "$sample" "$uri" ;;
    convert-W) qemu-img convert -n -W -f raw -O raw "$sample" "$uri" ;;
    nbdcopy) nbdcopy --flush "$sample" "$uri" ;;
    imageio) "$build/bench/imageio-client" "$sample" "$uri" ;;
    *) die "unknown client $1" ;;
  esac
}

verify ()                     # FORMAT WHAT
{
  qemu-img compare -q -f raw -F "$1" "$sample" "$tmp/t.img" ||
    die "VERIFY FAILED: $2: the target differs from the sample"
}

# One cell and configuration: prints syscalls, switches, faults, Ir.
count_one ()                  # FORMAT MODE CLIENT CONFIG
{
  local fmt=$1 mode=$2 client=$3 config=$4 pid perfpid ir
  local -a fl=()
  [ "$config" = alone ] || fl=("${stack_args[@]}")

  fresh_target "$fmt"
  nbdkit --log=stderr -U "$sock" -P "$pidfile" "${fl[@]}" "$plugin" \
    file="$tmp/t.img" cache="$mode" 2>>"$log" || die "nbdkit did not start"
  wait_socket
  pid=$(cat "$pidfile")
  perf stat -x, -e raw_syscalls:sys_enter,context-switches,page-faults \
    -p "$pid" -o "$tmp/perf" &
  perfpid=$!
  sleep 0.5                   # perf attaches to every thread
  run_client "$client" || die "upload failed: $fmt $mode $client $config"
  kill -INT "$perfpid"
  wait "$perfpid" || true
  stop_server
  verify "$fmt" "$fmt $mode $client $config (perf)"

  fresh_target "$fmt"
  valgrind -q --tool=callgrind --callgrind-out-file="$tmp/cg" \
    nbdkit -f --log=stderr -U "$sock" "${fl[@]}" "$plugin" \
    file="$tmp/t.img" cache="$mode" 2>>"$log" &
  pid=$!
  echo "$pid" >"$pidfile"
  wait_socket
  run_client "$client" || die "upload failed: $fmt $mode $client $config (callgrind)"
  stop_pids --timeout=60 "$pid"   # callgrind writes its counts on the way out
  wait "$pid" || true
  rm -f "$pidfile"
  verify "$fmt" "$fmt $mode $client $config (callgrind)"
  ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$tmp/cg")
  [ -n "$ir" ] || die "no instruction count from callgrind"
  awk -F, -v ir="$ir" '
    $3 == "raw_syscalls:sys_enter" { sc = $1 }
    $3 == "context-switches" { cs = $1 }
    $3 == "page-faults" { pf = $1 }
    END { if (sc == "" || cs == "" || pf == "") exit 1
          printf "%s\t%s\t%s\t%s\n", sc, cs, pf, ir }' "$tmp/perf" ||
    die "perf counted nothing (are tracepoints available?)"
}

out=$tmp/results
printf 'format\tmode\tclient\tconfig\tsyscalls\tswitches\tfaults\tuser_instructions\n' >"$out"
nbdcopy "$sample" null:       # the sample in the page cache for every client
for fmt in $formats; do
  for mode in $modes; do
    for client in $clients; do
      for config in alone stack; do
        counts=$(count_one "$fmt" "$mode" "$client" "$config") || exit 1
        printf '%s\t%s\t%s\t%s\t%s\n' "$fmt" "$mode" "$client" "$config" \
          "$counts" >>"$out"
      done
      echo "stack-work: $fmt $mode $client counted" >&2
    done
  done
done
[ -z "${RESULTS:-}" ] || cp "$out" "$RESULTS"

# The table: absolute counts of the plugin alone, the stack's ratios.
awk -F'\t' '
  NR == 1 { next }
  $4 == "alone" { a[$1 FS $2 FS $3] = $0; next }
  {
    k = $1 FS $2 FS $3
    split(a[k], x, FS)
    printf "| %s | %s | %s | %d / %d / %d / %.0fM | %.2f / %.2f / %.2f / %.3f (%+.0fM) |\n", \
      $1, $2, $3, x[5], x[6], x[7], x[8] / 1e6, \
      $5 / x[5], $6 / x[6], $7 / x[7], $8 / x[8], ($8 - x[8]) / 1e6
  }
  BEGIN {
    print "| format | mode | client | alone: syscalls / switches / faults / user instructions | stack / alone (user instructions added) |"
    print "|---|---|---|---:|---:|"
  }' "$out"
