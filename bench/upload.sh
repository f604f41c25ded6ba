#!/usr/bin/env bash
# Upload benchmark: a realistic sample image (bench/make-sample.sh) is
# uploaded over NBD (unix sockets) with `qemu-img convert -n -W` and with
# `nbdcopy --flush` into
#   image     our image plugin           cache=writeback | cache=none
#   file      nbdkit's file plugin       (default)       | cache=none
#   qemu-nbd  qemu-nbd -f raw            --cache=writeback | --cache=none --aio=native
#   qemu-nbd-imageio  the same plus --discard=unmap --detect-zeroes=unmap,
#             as oVirt imageio / vdsm run it (name it in TARGETS)
# plus a local `nbdcopy --flush` of the sample to a file (the limit).
# Every upload goes into a fresh sparse target, is timed (client wall
# time, including its final flush), and is verified with `qemu-img
# compare` against the sample; any difference or error aborts the run.
# Each configuration runs RUNS times, round-robin, and the table shows
# medians and the speed ratio to the best peer (file, qemu-nbd) with the
# same client in the same cache mode.
#
#   bench/upload.sh
#
# Environment (all optional):
#   SIZE=4G            virtual size of the sample (DATA_PCT, ZERO_PCT, SEED
#                      are passed on to bench/make-sample.sh)
#   RUNS=3             runs per configuration (median reported; >= 3 advised)
#   BUILD=./build      build dir with plugins/image/.libs/nbdkit-image-plugin.so
#   SAMPLE=FILE        upload this raw image instead of generating one
#   TARGETS="image file qemu-nbd"   which servers to run
#   MODES="writeback none"          which cache modes
#   CLIENTS="convert-W nbdcopy"     which clients (also: convert, in order
#                      without -W; imageio, the pattern of oVirt imageio's
#                      upload: bench/imageio-client)
#   FILTERS="coalesce zerodetect"   also run target "image+filters" = the image
#                      plugin behind these filters of ours (from BUILD), in that order
#   BASE_BUILD=DIR     target "image-base" (name it in TARGETS, also as
#                      image-base:qcow2) is the image plugin alone from DIR,
#                      an older build: before/after of the plugin in one run.
#                      With FILTERS: also run target "image+base", the image
#                      plugin (from BUILD) behind the same filters from DIR
#                      (an older build): before/after in one interleaved run.
#                      BASE_BUILD=BUILD makes them twins of image and
#                      image+filters: an A/A run, the noise floor
#                      (bench/stack-ratios.py --pair image image-base)
#   COUNTERS=1         run the filtered targets with -v and print the coalesce
#                      filter's exit counters after each of their uploads
#   USED_SAMPLE=1      generate the used-disk sample (bench/make-used-sample.sh:
#                      an ext4 image with files of mixed sizes, some deleted)
#                      instead of bench/make-sample.sh's long runs
#   TMPDIR=/var/tmp    where the private scratch directory goes (needs about
#                      2x the sample's allocated size free; must not be tmpfs,
#                      which has no O_DIRECT)
#   ONLY="T/M/C ..."   run only these configurations (target/mode/client, e.g.
#                      image:qcow2/none/convert-W) of the TARGETS x MODES x
#                      CLIENTS product; the others are left out of the table
#   RESULTS=FILE       also write the raw per-run results (TSV) there: target,
#                      mode, client, run, seconds, server CPU, extents,
#                      allocated bytes of the result, KiB of free memory the
#                      VM reported to its host while the client ran (- where
#                      the kernel has no /sys/module/page_reporting), and
#                      the CPU seconds the host stole from this VM (both
#                      vCPUs, /proc/stat's steal) while the client ran,
#                      the CPU seconds the whole VM was busy meanwhile
#                      (/proc/stat's user, nice, system, irq and softirq,
#                      both vCPUs) and the client's own CPU seconds: busy
#                      less the client is the server's CPU plus the
#                      kernel's on its behalf in other threads (page-cache
#                      writeback by the flusher, which a flush may or may
#                      not find already done), bench/stack-ratios.py
#                      --cpu=machine
#   LAYOUT=FILE        also write the raw per-run qcow2 layout (TSV) there
#   CMDS=FILE          also write every server and client command line used
#                      (target, mode, role, shell-quoted command; TSV) there
#   SETTLE=3           seconds of quiet before each timed upload (0: none).
#                      On a VM whose balloon reports free pages to the host
#                      (free page reporting), memory freed a few seconds
#                      earlier costs a host fault on first touch again: a
#                      writeback upload right after the previous one (whose
#                      page cache was just freed) used 0.8 s of server CPU,
#                      the same upload after 4 s of quiet 3.3 s.  The pause
#                      gives every configuration the same, idle-server start.
#   MAX_STEAL=         seconds: an upload during which the host stole more
#                      CPU time than this from the VM (/proc/stat's steal,
#                      both vCPUs) is verified but not counted, and run
#                      again, up to STEAL_TRIES (3) times; the last try is
#                      counted whatever its steal.  Unset: every upload
#                      counts.  Such uploads measured the host: 4 of 30
#                      in an A/A run took 2-4 s of the VM's CPU and doubled
#                      the wall time of whichever server was running.
#   PREFAULT=0         GiB of memory to touch and free right before each
#                      timed upload (after SETTLE and the server's start: the
#                      host takes freed memory back within seconds,
#                      so a pause after it undoes it), so that the upload's page
#                      cache and buffers land on memory the host backs: the
#                      other way to give every run the same start, and a
#                      steadier one (SETTLE alone leaves runs bimodal: some
#                      pay the host faults, some do not).  6 covers a 4 GiB
#                      sample with every client (3 left imageio runs
#                      bimodal); it costs about 10 s per run here.
#   FORMAT=raw|qcow2   format of targets named without one (default raw); a
#                      target may name its own: TARGETS="image image:qcow2
#                      qemu-nbd:qcow2" interleaves raw and qcow2 uploads.
#                      qcow2: a fresh image per run, made by qemu-img create
#                      (as oVirt makes upload targets; our plugin gives it
#                      the linear layout at open), or with
#                      QCOW2_MADE_BY=plugin by our plugin for the image
#                      targets (create=true format=qcow2); nbdkit's file
#                      plugin serves raw only.  A second table gives the layout of each result: qemu-img
#                      check's "% fragmented" (must report no errors),
#                      inversions and host discontinuities between the data
#                      extents of qemu-img map (guest order), filefrag extents,
#                      file size, and the time to read it back cold
#                      (nbdcopy from qemu-nbd -r --cache=none to null:).
#
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export PATH LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
size=${SIZE:-4G}
runs=${RUNS:-3}
settle=${SETTLE:-3}
prefault=${PREFAULT:-0}
max_steal=${MAX_STEAL:-}
steal_tries=${STEAL_TRIES:-3}
build=${BUILD:-$top/build}
build=$(cd "$build" 2>/dev/null && pwd) || { echo "upload: BUILD=$build: no such directory" >&2; exit 1; }
targets=${TARGETS:-image file qemu-nbd}
modes=${MODES:-writeback none}
clients=${CLIENTS:-convert-W nbdcopy}
format=${FORMAT:-raw}
qcow2_made_by=${QCOW2_MADE_BY:-qemu-img}
case $qcow2_made_by in qemu-img | plugin) ;; *) echo "upload: QCOW2_MADE_BY=$qcow2_made_by: expected qemu-img or plugin" >&2; exit 1 ;; esac
case $format in raw | qcow2) ;; *) echo "upload: FORMAT=$format: expected raw or qcow2" >&2; exit 1 ;; esac

# A target is KIND or KIND:FORMAT.
fmt_of () { case $1 in *:*) echo "${1#*:}" ;; local) echo raw ;; *) echo "$format" ;; esac; }
filter_names=${FILTERS:-}

say () { echo "upload: $*" >&2; }
die () { echo "upload: ERROR: $*" >&2; exit 1; }

[[ $runs =~ ^[1-9][0-9]*$ ]] || die "RUNS=$runs: expected a positive integer"
[ "$runs" -ge 3 ] || say "warning: RUNS=$runs; medians need at least 3 runs"
[[ $settle =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "SETTLE=$settle: expected seconds"
[[ $prefault =~ ^[0-9]+$ ]] || die "PREFAULT=$prefault: expected whole GiB"
[ -z "$max_steal" ] || [[ $max_steal =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
  die "MAX_STEAL=$max_steal: expected seconds"
[[ $steal_tries =~ ^[1-9][0-9]*$ ]] || die "STEAL_TRIES=$steal_tries: expected a positive integer"
for p in nbdkit qemu-img qemu-nbd nbdcopy numfmt awk; do
  command -v "$p" >/dev/null || die "$p is not installed (scripts/setup.sh installs it)"
done
plugin=$build/plugins/image/.libs/nbdkit-image-plugin.so
case " $clients " in
  *" imageio "*) [ -x "$build/bench/imageio-client" ] ||
    die "$build/bench/imageio-client not found: build first" ;;
esac
case " $targets ${FILTERS:+image} " in
  *" image "*) [ -f "$plugin" ] || die "$plugin not found: build first (scripts/setup.sh $build)" ;;
esac
# Add target NAME unless TARGETS names it already (it would run, and be
# tabulated, twice).
add_target ()
{
  case " $targets " in
    *" $1 "*) ;;
    *) targets="$targets $1" ;;
  esac
}
filter_args=()
if [ -n "$filter_names" ]; then
  for f in $filter_names; do
    so=$build/filters/$f/.libs/nbdkit-$f-filter.so
    [ -f "$so" ] || die "FILTERS: $so not found"
    filter_args+=("--filter=$so")
  done
  add_target image+filters
  if [ -n "${BASE_BUILD:-}" ]; then
    base_build=$(cd "$BASE_BUILD" && pwd) || die "BASE_BUILD=$BASE_BUILD: no such directory"
    filter_args_base=()
    for f in $filter_names; do
      so=$base_build/filters/$f/.libs/nbdkit-$f-filter.so
      [ -f "$so" ] || die "BASE_BUILD: $so not found"
      filter_args_base+=("--filter=$so")
    done
    add_target image+base
  fi
fi
# -v without nbdkit's per-request debug lines, which cost server CPU
# that the plugin alone (run without -v) would not pay.
verbose=(-v -D nbdkit.backend.datapath=0)
[ "${COUNTERS:-0}" = 1 ] && filter_args=("${verbose[@]}" "${filter_args[@]}") &&
  [ -n "${BASE_BUILD:-}" ] && filter_args_base=("${verbose[@]}" "${filter_args_base[@]}")

# ---- private scratch dir; every server we start is stopped on exit.
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/nbdstack-upload.XXXXXX")
tmp=$(realpath "$tmp")   # /proc/PID/fd links are resolved paths
. "$here/server-lib.sh"

[ "$(stat -f -c %T "$tmp")" != tmpfs ] ||
  die "$tmp is on tmpfs (no O_DIRECT): set TMPDIR to a disk-backed directory"

# ---- the sample
if [ -n "${SAMPLE:-}" ]; then
  sample=$(realpath "$SAMPLE")
  [ -f "$sample" ] || die "SAMPLE=$SAMPLE: no such file"
  say "sample $sample (given)"
elif [ "${USED_SAMPLE:-0}" = 1 ]; then
  sample=$tmp/sample.img
  SIZE=$size bash "$here/make-used-sample.sh" "$sample" >&2 ||
    die "cannot create the used-disk sample"
else
  sample=$tmp/sample.img
  SIZE=$size BUILD=$build bash "$here/make-sample.sh" "$sample" >&2 ||
    die "cannot create the sample"
fi
vsize=$(stat -c %s "$sample")
salloc=$(( $(stat -c '%b * %B' "$sample") ))
free_k=$(df -Pk "$tmp" | awk 'NR == 2 { print $4 }')
[ $((free_k * 1024)) -gt $((salloc * 3 / 2)) ] ||
  die "$tmp: not enough free space for a target ($((salloc >> 20)) MiB allocated)"

# ---- command lines, once per (target, mode, role), for CMDS
cmds=$tmp/cmds
: >"$cmds"
declare -A cmd_seen=()
record_cmd ()                 # KIND MODE ROLE COMMAND...
{
  local k="$1 $2 $3"
  [ -z "${cmd_seen[$k]:-}" ] || return 0
  cmd_seen[$k]=1
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(shift 3; printf '%q ' "$@")" >>"$cmds"
}

# KiB of free memory reported to the host so far, or - without free
# page reporting.  Recorded around each timed client (RESULTS) because
# it looked like the cause of the bimodal server CPU: this VM reports
# about 640 MiB of the prefault's memory in passes 1.9, 4.0, 6.2, 8.4...
# s after it, and in 8 rounds of one writeback upload (plugin alone,
# PREFAULT=3) the 4 runs without a report used 0.75-0.84 s, the 4 with
# one 1.0-1.26 s.  It is not the whole story: starting the client 1 s
# after the prefault put exactly one pass into nearly every upload of a
# whole matrix, and the same configurations still spread 0.72-1.36 s
# (bench/README.md, 2026-12-07).
reported_kib ()
{
  cat /sys/module/page_reporting/parameters/reported_kib 2>/dev/null || echo -
}

# CPU seconds the host has taken from this VM's vCPUs so far (steal in
# /proc/stat's summary line, both CPUs).  Recorded around each timed
# client (RESULTS): on a shared host, a vCPU that waits for the host's
# CPU is time that neither the client nor the server can use.
steal_secs ()
{
  awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" { printf "%.2f", $9 / hz; exit }' /proc/stat
}

# CPU seconds this VM's vCPUs have been busy so far (user, nice, system,
# irq and softirq of /proc/stat's summary line; idle, iowait and steal
# are not work done here).  Around each timed client, it counts the
# kernel's writeback threads too, whose share of a writeback upload's
# work depends on when the flusher woke, not on the server.
busy_secs ()
{
  awk -v hz="$(getconf CLK_TCK)" \
      '$1 == "cpu" { printf "%.2f", ($2 + $3 + $4 + $7 + $8) / hz; exit }' /proc/stat
}

# Run the timed client "$@"; returns its status.  Sets, around it: secs
# (wall seconds), stolen (CPU s the host stole), busy (CPU s the VM was
# busy), ccpu (the client's own CPU s: the times builtin, run here and not
# in a subshell, whose children would be none) and rep (KiB reported to
# the host, or -).
timed_client ()
{
  local t0 t1 rk0 rk1 st0 st1 bz0 bz1 rc=0
  rk0=$(reported_kib)
  times >"$tmp/times0"
  bz0=$(busy_secs)
  st0=$(steal_secs)
  t0=$EPOCHREALTIME
  "$@" || rc=$?
  t1=$EPOCHREALTIME
  st1=$(steal_secs)
  bz1=$(busy_secs)
  times >"$tmp/times1"
  rk1=$(reported_kib)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
  stolen=$(awk -v a="$st0" -v b="$st1" 'BEGIN { printf "%.2f", b - a }')
  busy=$(awk -v a="$bz0" -v b="$bz1" 'BEGIN { printf "%.2f", b - a }')
  ccpu=$(awk 'FNR == 2 { n = 0
                for (i = 1; i <= 2; i++) { split ($i, a, /[ms]/); n += a[1] * 60 + a[2] }
                d = n - d }
              END { printf "%.2f", d }' "$tmp/times0" "$tmp/times1")
  rep=-
  [ "$rk0" = - ] || [ "$rk1" = - ] || rep=$((rk1 - rk0))
  return $rc
}

# Touch PREFAULT GiB and free them, right before the timed client: the
# VM reports freed memory to its host within seconds (free page
# reporting), after which the upload's page-cache and buffer pages cost
# a host fault each.  Done after the server has started, so that its
# start-up does not widen that window.
prefault_now ()
{
  [ "$prefault" -eq 0 ] || python3 -c '
import mmap, sys
n = int(sys.argv[1]) << 30
m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for off in range(0, n, 4096):
    m[off] = 1
m.close()' "$prefault" || die "PREFAULT=$prefault: could not touch that much memory"
}

# ---- servers
start_server ()               # KIND MODE TARGET
{
  local kind=$1 mode=$2 target=$3 i fmt
  local -a cmd
  fmt=$(fmt_of "$kind")
  rm -f "$sock" "$pidfile"
  case ${kind%%:*} in
    image | image+* | image-base)
      cmd=(nbdkit --log=stderr -U "$sock" -P "$pidfile")
      case $kind in
        image+base*) cmd+=("${filter_args_base[@]}") ;;
        image+*) cmd+=("${filter_args[@]}") ;;
      esac
      if [ "${kind%%:*}" = image-base ]; then
        [ -n "${BASE_BUILD:-}" ] || die "target image-base needs BASE_BUILD"
        cmd+=("$(cd "$BASE_BUILD" && pwd)/plugins/image/.libs/nbdkit-image-plugin.so" file="$target")
      else
        cmd+=("$plugin" file="$target")
      fi
      [ "$fmt" = qcow2 ] && [ "$qcow2_made_by" = plugin ] &&
        cmd+=(format=qcow2 create=true size="$vsize")
      [ "$mode" = none ] && cmd+=(cache=none) ;;
    file)
      [ "$fmt" = raw ] || die "nbdkit's file plugin serves raw only: $kind"
      cmd=(nbdkit --log=stderr -U "$sock" -P "$pidfile" file file="$target")
      [ "$mode" = none ] && cmd+=(cache=none) ;;
    qemu-nbd | qemu-nbd-imageio)
      # --shared=8 (as oVirt imageio runs it) makes qemu-nbd advertise
      # multi-conn, so nbdcopy uses several connections as with nbdkit.
      cmd=(qemu-nbd --fork --pid-file="$pidfile" --socket="$sock" -f "$fmt"
           --persistent --shared=8)
      if [ "$mode" = none ]; then cmd+=(--cache=none --aio=native)
      else cmd+=(--cache=writeback); fi
      [ "${kind%%:*}" = qemu-nbd-imageio ] && cmd+=(--discard=unmap --detect-zeroes=unmap)
      cmd+=("$target") ;;
    *) die "unknown target $kind" ;;
  esac
  : >"$log"
  [ "$target" != "$tmp/target.img" ] || record_cmd "$kind" "$mode" server "${cmd[@]}"
  "${cmd[@]}" 2>>"$log" || return 1
  for ((i = 0; i < 200; i++)); do
    [ -s "$pidfile" ] && [ -S "$sock" ] && return 0
    sleep 0.05
  done
  return 1
}

# Is TARGET open with O_DIRECT in the server process?
server_has_odirect ()
{
  local target=$1 pid fd flags
  pid=$(cat "$pidfile")
  for fd in /proc/"$pid"/fd/*; do
    [ "$(readlink "$fd")" = "$target" ] || continue
    flags=$(awk '/^flags:/ { print $2 }' "/proc/$pid/fdinfo/${fd##*/}")
    (( 8#$flags & 8#40000 )) && return 0
  done
  return 1
}

# Server CPU seconds (user + system) so far.
server_cpu ()
{
  local pid
  pid=$(cat "$pidfile")
  awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' \
      "/proc/$pid/stat"
}

# ---- image plugin cache=none: being implemented; detect whether it is real.
declare -A skip_reason=()
for t in $targets; do
  [[ $t == image* ]] || continue
  case " $modes " in *" none "*) ;; *) continue ;; esac
  probe=$tmp/probe.img
  rm -f "$probe"
  if [ "$(fmt_of "$t")" = raw ]; then
    truncate -s 64M "$probe"
  elif [ "$qcow2_made_by" = qemu-img ]; then
    qemu-img create -q -f qcow2 "$probe" 64M
  fi
  if ! start_server "$t" none "$probe"; then
    reason=$(grep -m1 -i 'error' "$log" || head -n 1 "$log")
    skip_reason[$t/none]="cache=none rejected by the plugin: ${reason:-nbdkit did not start}"
  elif ! server_has_odirect "$probe"; then
    skip_reason[$t/none]="cache=none accepted but the image is not opened with O_DIRECT"
  fi
  stop_server
  rm -f "$probe"
  [ -z "${skip_reason[$t/none]:-}" ] || say "$t cache=none: SKIPPED: ${skip_reason[$t/none]}"
done

# ---- the layout of an uploaded qcow2 image: a TSV line to $tmp/layout.
layout=$tmp/layout
: >"$layout"
qcow2_layout ()               # RUN KIND MODE CLIENT TARGET
{
  local run=$1 kind=$2 mode=$3 client=$4 target=$5 check frag ext t0 t1 rb
  check=$(qemu-img check -f qcow2 "$target" 2>&1) ||
    die "CHECK FAILED: $kind $mode $client (run $run): $check"
  frag=$(sed -n -E 's/.* ([0-9.]+)% fragmented.*/\1/p' <<<"$check")
  # Inversions: a data extent (guest order) whose host offset lies below
  # the end of the previous one; discontinuities: not right after it.
  ext=$(qemu-img map -f qcow2 --output=json "$target" | python3 -c '
import json, sys
inv = disc = 0; end = None
for e in json.load(sys.stdin):
    if not e["data"] or "offset" not in e:
        continue
    if end is not None:
        inv += e["offset"] < end
        disc += e["offset"] != end
    end = e["offset"] + e["length"]
print(inv, disc)') || die "qemu-img map failed"
  # Cold sequential read-back through qemu's own qcow2 reader (O_DIRECT).
  qemu-nbd --fork --pid-file="$pidfile" --socket="$sock" -f qcow2 -r \
    --cache=none --aio=native "$target" 2>>"$log" || die "qemu-nbd -r failed"
  t0=$EPOCHREALTIME
  nbdcopy "nbd+unix:///?socket=$sock" null: || die "read-back failed"
  t1=$EPOCHREALTIME
  stop_server
  rb=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$mode" "$client" "$run" \
    "$frag" "${ext% *}" "${ext#* }" "$(stat -c %s "$target")" "$rb" >>"$layout"
}

# ---- one timed, verified upload.  Appends a TSV line to $tmp/results.
results=$tmp/results
: >"$results"
# Sets counted=0, having verified the upload but recorded nothing, when
# the host stole more than MAX_STEAL seconds during it and LAST is not 1;
# else counted=1.
upload_once ()                # RUN KIND MODE CLIENT LAST
{
  local run=$1 kind=$2 mode=$3 client=$4 last=$5 target=$tmp/target.img
  counted=0
  local uri="nbd+unix:///?socket=$sock" cpu=- secs frag alloc rep stolen busy ccpu
  local -a ccmd
  rm -f "$target"
  local tfmt
  tfmt=$(fmt_of "$kind")
  if [ "$tfmt" = raw ]; then
    truncate -s "$vsize" "$target"
  elif [[ ${kind%%:*} == qemu-nbd* ]] || [ "$qcow2_made_by" = qemu-img ]; then
    qemu-img create -q -f qcow2 "$target" "$vsize" || die "qemu-img create failed"
  fi                           # (else our plugin creates its own: create=true)
  sync -f "$tmp"               # start from a quiet disk (not timed)
  sleep "$settle"              # and the same memory state (SETTLE above)
  if [ "$kind" = local ]; then
    record_cmd "$kind" "$mode" client nbdcopy --flush "$sample" "$target"
    prefault_now
    timed_client nbdcopy --flush "$sample" "$target" || die "local nbdcopy failed"
  else
    start_server "$kind" "$mode" "$target" ||
      die "$kind ($mode) did not start: $(tail -n 3 "$log")"
    case $client in
      convert)   ccmd=(qemu-img convert -n -f raw -O raw "$sample" "$uri") ;;
      convert-W) ccmd=(qemu-img convert -n -W -f raw -O raw "$sample" "$uri") ;;
      nbdcopy)   ccmd=(nbdcopy --flush "$sample" "$uri") ;;
      imageio)   ccmd=("$build/bench/imageio-client" "$sample" "$uri") ;;
    esac
    record_cmd "$kind" "$mode" "client $client" "${ccmd[@]}"
    prefault_now
    timed_client "${ccmd[@]}" || die "upload failed: $kind $mode $client (run $run)"
    cpu=$(server_cpu)
    stop_server
    if [ "${COUNTERS:-0}" = 1 ] && [[ $kind == image+* ]]; then
      say "counters $kind $mode $client run $run: $(grep -o 'coalesce: writes in .*' "$log" | tail -n 1)"
    fi
  fi
  qemu-img compare -q -f raw -F "$tfmt" "$sample" "$target" ||
    die "VERIFY FAILED: $kind $mode $client (run $run): target differs from the sample"
  if [ -n "$max_steal" ] && [ "$last" != 1 ] &&
     awk -v s="$stolen" -v m="$max_steal" 'BEGIN { exit !(s > m) }'; then
    [ "$tfmt" != qcow2 ] || qemu-img check -q -f qcow2 "$target" ||
      die "CHECK FAILED: $kind $mode $client (run $run)"
    say "run $run: $kind $mode $client: verified, not counted: $stolen s stolen > MAX_STEAL=$max_steal"
    rm -f "$target"
    return 0
  fi
  [ "$tfmt" = qcow2 ] && qcow2_layout "$run" "$kind" "$mode" "$client" "$target"
  # Host file fragmentation (ext4 extents) of the result.
  frag=$(filefrag "$target" 2>/dev/null | awk '{ print $(NF - 2) }') || frag=-
  [[ $frag =~ ^[0-9]+$ ]] || frag=-
  alloc=$(( $(stat -c '%b * %B' "$target") ))
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$mode" "$client" "$run" "$secs" "$cpu" "$frag" "$alloc" "$rep" "$stolen" "$busy" "$ccpu" >>"$results"
  say "run $run: $kind $mode $client: $secs s (server CPU $cpu s, $frag extents, $stolen s stolen, VM busy $busy s, client $ccpu s), verified"
  rm -f "$target"
  counted=1
}

# ---- the runs: round-robin, so slow phases of the machine hit every
# configuration alike; the order is shuffled every round (round_order).
configs=()
for t in $targets; do
  for m in $modes; do
    for c in $clients; do
      [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $t/$m/$c "* ]] || continue
      configs+=("$t $m $c")
    done
  done
done
configs+=("local - nbdcopy")

say "warming the page cache with the sample"
nbdcopy "$sample" null:
load_before=$(uptime)
say "load before: $load_before"
n=${#configs[@]}
not_counted=0
for ((r = 1; r <= runs; r++)); do
  for i in $(round_order "$n" "$r"); do
    read -r t m c <<<"${configs[$i]}"
    [ -z "${skip_reason[$t/$m]:-}" ] || continue
    for ((try = 1; try <= steal_tries; try++)); do
      upload_once "$r" "$t" "$m" "$c" "$((try == steal_tries))"
      [ "$counted" = 0 ] || break
      not_counted=$((not_counted + 1))
    done
  done
done
load_after=$(uptime)
say "load after: $load_after"
[ -z "${RESULTS:-}" ] || cp "$results" "$RESULTS"
[ -z "${LAYOUT:-}" ] || cp "$layout" "$LAYOUT"
[ -z "${CMDS:-}" ] || cp "$cmds" "$CMDS"

# ---- the table
skips=$tmp/skips
: >"$skips"
for k in "${!skip_reason[@]}"; do
  printf '%s\t%s\n' "$k" "${skip_reason[$k]}" >>"$skips"
done
echo
echo "Upload of $(numfmt --to=iec "$vsize") virtual, $(numfmt --to=iec "$salloc") allocated ($sample);"
echo "median of $runs runs; MB/s = virtual size / wall time (10^6 bytes/s);"
echo "vs best peer = best peer's median / this median for the same client and cache mode"
echo "(> 1.00: faster than the best peer); vs limit = local copy median / this median."
echo "nbdkit $(nbdkit --version | awk '{print $2}'), $(qemu-nbd --version | head -1), $(nbdcopy --version | head -1)"
[ -z "$filter_names" ] ||
  echo "image+filters = nbdkit --filter=${filter_names// / --filter=} image (from $build)"
echo "load before: $load_before"
echo "load after:  $load_after"
[ -z "$max_steal" ] ||
  echo "MAX_STEAL=$max_steal: $not_counted upload(s) verified but not counted and run again (host steal)"
echo
awk -F'\t' -v configs="$(printf '%s\n' "${configs[@]}")" -v skipfile="$skips" "$MEDIAN_AWK"'
BEGIN {
  while ((getline line < skipfile) > 0) {
    split(line, sf, "\t"); skip[sf[1]] = sf[2]
  }
}
{
  k = $1 " " $2 " " $3
  secs[k] = secs[k] (secs[k] == "" ? "" : " ") $5
  cpus[k] = cpus[k] (cpus[k] == "" ? "" : " ") $6
  frags[k] = frags[k] (frags[k] == "" ? "" : " ") $7
}
END {
  nc = split(configs, cl, "\n")
  for (i = 1; i <= nc; i++) {
    k = cl[i]
    if (k in secs) med[k] = median(secs[k])
  }
  # best peer per (mode, client)
  for (k in med) {
    split(k, f, " ")
    split(f[1], kf, ":")
    if (kf[1] == "file" || kf[1] == "qemu-nbd" || kf[1] == "qemu-nbd-imageio") {
      mc = (kf[2] == "" ? DEFFMT : kf[2]) " " f[2] " " f[3]
      if (!(mc in best) || med[k] < best[mc]) best[mc] = med[k]
    }
  }
  limit = med["local - nbdcopy"]
  printf "| %-18s | %-9s | %-9s | %8s | %7s | %-23s | %10s | %7s | %12s | %8s |\n", \
    "target", "mode", "client", "median s", "MB/s", "runs (s)", "server CPU", "extents", \
    "vs best peer", "vs limit"
  printf "|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", "--------------------", "-----------", \
    "-----------", "---------:", "--------:", "-------------------------", "-----------:", \
    "--------:", "-------------:", "---------:"
  for (i = 1; i <= nc; i++) {
    k = cl[i]; split(k, f, " ")
    if (f[1] == "local") { tgt = "local file (limit)"; mode = "-" }
    else { tgt = f[1]; mode = f[2] }
    sk = f[1] "/" f[2]
    if (!(k in med)) {
      printf "| %-18s | %-9s | %-9s | %8s | %7s | %-23s | %10s | %7s | %12s | %8s |\n", \
        tgt, mode, f[3], "-", "-", "skipped", "-", "-", "-", "-"
      continue
    }
    m = med[k]; split(f[1], kf, ":"); mc = (kf[2] == "" ? DEFFMT : kf[2]) " " f[2] " " f[3]
    rp = (mc in best) ? sprintf("%.2f", best[mc] / m) : "-"
    rl = limit ? sprintf("%.2f", limit / m) : "-"
    cpu = (cpus[k] ~ /^[- ]*$/) ? "-" : sprintf("%.2f", median(cpus[k]))
    frag = (frags[k] ~ /^[- ]*$/) ? "-" : sprintf("%d", median(frags[k]))
    printf "| %-18s | %-9s | %-9s | %8.2f | %7.0f | %-23s | %10s | %7s | %12s | %8s |\n", \
      tgt, mode, f[3], m, SIZE / m / 1e6, secs[k], cpu, frag, rp, rl
  }
  for (sk in skip) printf "\nskipped %s: %s\n", sk, skip[sk]
}' SIZE="$vsize" DEFFMT="$format" "$results"

# ---- the layout of qcow2 results
[ -s "$layout" ] || exit 0
echo
echo "Layout of the uploaded qcow2 images (medians over runs): % fragmented from"
echo "qemu-img check; inversions and discontinuities between consecutive data"
echo "extents of qemu-img map; read-back = nbdcopy from qemu-nbd -r --cache=none."
echo
awk -F'\t' -v configs="$(printf '%s\n' "${configs[@]}")" "$MEDIAN_AWK"'
{
  k = $1 " " $2 " " $3
  for (c = 5; c <= 9; c++) v[k, c] = v[k, c] (v[k, c] == "" ? "" : " ") $c
  seen[k] = 1
}
END {
  printf "| %-18s | %-9s | %-9s | %7s | %10s | %8s | %9s | %11s |\n", "target", "mode", \
    "client", "% frag", "inversions", "discont.", "size MiB", "read-back s"
  printf "|%s|%s|%s|%s|%s|%s|%s|%s|\n", "--------------------", "-----------", \
    "-----------", "--------:", "-----------:", "---------:", "----------:", "------------:"
  nc = split(configs, cl, "\n")
  for (i = 1; i <= nc; i++) {
    k = cl[i]
    if (!(k in seen)) continue
    split(k, f, " ")
    printf "| %-18s | %-9s | %-9s | %7.2f | %10d | %8d | %9.0f | %11.2f |\n", f[1], f[2], f[3], \
      median(v[k, 5]), median(v[k, 6]), median(v[k, 7]), median(v[k, 8]) / 1048576, \
      median(v[k, 9])
  }
}' "$layout"
