#!/usr/bin/env bash
# qcow2 read benchmark: copy a qcow2 image to a local raw file with
# nbdcopy, served by our image plugin and by `qemu-nbd -f qcow2`, side by
# side in the same run.  Images (all made from the same source by
# qemu-img convert): plain, deflate-compressed ("zlib"), zstd-compressed,
# extended L2.  The source has compressible text, random data and a hole.
# Runs are round-robin (ours, qemu-nbd, ours, ...); the table shows the
# median wall time of RUNS runs per server and the ratio ours/qemu-nbd
# (below 1 = we are faster).  Every copy is checked against the source.
#
#   bench/read-qcow2.sh
#
# Environment (all optional):
#   SIZE=1G          virtual size of the source (3/8 text, 1/4 random,
#                    the rest a hole)
#   RUNS=3           runs per server and image (median reported)
#   IMAGES="plain zlib zstd extl2"
#   BUILD=./build    build dir with plugins/image/.libs/nbdkit-image-plugin.so
#   TMPDIR=/var/tmp  scratch directory parent (needs ~3x SIZE free)
#
# Both servers read through the page cache (nbdkit default, qemu-nbd
# --cache=writeback) and the images are read once before timing, so the
# comparison is CPU and protocol, not the disk.
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export PATH LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
SIZE=${SIZE:-1G}
RUNS=${RUNS:-3}
IMAGES=${IMAGES:-"plain zlib zstd extl2"}
BUILD=${BUILD:-$top/build}
plugin=$BUILD/plugins/image/.libs/nbdkit-image-plugin.so
[ -f "$plugin" ] || { echo "read-qcow2: no $plugin (set BUILD)" >&2; exit 1; }

. "$top/common/stop-server.sh"
. "$here/median.sh"

T=$(mktemp -d "${TMPDIR:-/var/tmp}/nbdstack-read-qcow2.XXXXXX")
cleanup ()
{
  stop_pids "$(cat "$T/srv.pid" 2>/dev/null)" || true
  rm -rf "$T"
}
trap cleanup EXIT

bytes=$(numfmt --from=iec "$SIZE")
mib=$((bytes / 1048576))
echo "read-qcow2: making a ${SIZE} source and the images in $T"
# (base64 is killed by SIGPIPE when head has enough: not an error.)
{ head -c $((mib * 3 / 8))M /dev/urandom | base64 -w 76 || :; } |
  head -c $((mib * 3 / 8))M >"$T/src.raw"
head -c $((mib / 4))M /dev/urandom >>"$T/src.raw"
truncate -s "$bytes" "$T/src.raw"

for img in $IMAGES; do
  case $img in
    plain) opts="" c="" ;;
    zlib) opts="-o compression_type=zlib" c=-c ;;
    zstd) opts="-o compression_type=zstd" c=-c ;;
    extl2) opts="-o extended_l2=on" c="" ;;
    *) echo "read-qcow2: unknown image $img" >&2; exit 1 ;;
  esac
  # shellcheck disable=SC2086
  qemu-img convert $c -f raw -O qcow2 $opts "$T/src.raw" "$T/$img.qcow2"
done
ls -l "$T"/*.qcow2

start_ours ()
{
  nbdkit -U "$T/srv.sock" -P "$T/srv.pid" "$plugin" file="$1" 2>"$T/srv.log"
}
start_qemu ()
{
  # -r: read-only, so qemu-nbd advertises multi-conn like we do and
  # nbdcopy uses the same number of connections with both.
  qemu-nbd -r -f qcow2 --cache=writeback --shared=8 --fork \
    --pid-file="$T/srv.pid" --socket="$T/srv.sock" "$1" 2>"$T/srv.log"
}
stop_srv ()
{
  local pid
  pid=$(cat "$T/srv.pid")
  stop_pids --timeout=20 "$pid" || true
  rm -f "$T/srv.pid" "$T/srv.sock"
}

# run SERVER IMG: prints the copy's wall time in seconds.
run ()
{
  local start end
  rm -f "$T/out.raw" "$T/srv.sock"
  start_$1 "$T/$2.qcow2"
  for _ in $(seq 100); do [ -S "$T/srv.sock" ] && break; sleep 0.05; done
  start=$EPOCHREALTIME
  nbdcopy "nbd+unix:///?socket=$T/srv.sock" "$T/out.raw"
  end=$EPOCHREALTIME
  stop_srv
  cmp -s "$T/src.raw" "$T/out.raw" || {
    echo "read-qcow2: $1 $2: the copy differs from the source" >&2
    exit 1
  }
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f\n", b - a }'
}

printf '\n%-8s %12s %12s %8s   %s\n' image "ours s" "qemu-nbd s" ratio "runs (ours | qemu-nbd)"
for img in $IMAGES; do
  cat "$T/$img.qcow2" >/dev/null       # warm the page cache for both
  ours=() qemu=()
  for ((i = 0; i < RUNS; i++)); do
    ours+=("$(run ours "$img")")
    qemu+=("$(run qemu "$img")")
  done
  mo=$(printf '%s\n' "${ours[@]}" | lower_median)
  mq=$(printf '%s\n' "${qemu[@]}" | lower_median)
  printf '%-8s %12.3f %12.3f %8.2f   %s | %s\n' "$img" "$mo" "$mq" \
    "$(awk -v a="$mo" -v b="$mq" 'BEGIN { print a / b }')" "${ours[*]}" "${qemu[*]}"
done
