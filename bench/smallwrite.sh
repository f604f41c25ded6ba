#!/usr/bin/env bash
# Queue-depth-1 write benchmark for the coalesce filter, all peers side
# by side in the same run (this machine is shared and noisy: compare
# ratios, not absolute numbers).
#
#   bench/smallwrite.sh [BUILD-DIR]      (default: ./build)
#   env: ROUNDS=3 (interleaved rounds), WORKDIR=/var/tmp (disk-backed),
#        TARGETS="..." (a subset), BASE_CO=FILE (adds icb-none, icb-wb:
#        an older build's coalesce filter, for before/after)
#
# Cases (bench/smallwrites.c, one request in flight):
#   A  1000 x 512 B sequential writes, one flush at the end (dd oflag=direct)
#   B  1000 x 512 B sequential writes with FUA on each   (dd oflag=dsync)
#   C  one 100 MiB write (sent as 32M+32M+32M+4M, one at a time) + flush
#   D  500 x 512 B sequential writes, each followed by a flush (O_DSYNC
#      writes through a client without FUA; the loop row is dd oflag=dsync)
# Targets: our image plugin with and without coalesce (cache=none and
# writeback), nbdkit file (default and cache=none), nbdkit memory (the
# NBD round-trip limit), qemu-nbd --cache=none --aio=native, and dd to a
# loop device over a raw file (oflag=direct [+conv=fsync] / oflag=dsync).
# Each round runs every target once per case, in the same order; the
# table shows medians over rounds of each run's median pass.
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$top/build}" && pwd)
ROUNDS=${ROUNDS:-3}
SW="$build/bench/smallwrites"
CO="$build/filters/coalesce/.libs/nbdkit-coalesce-filter.so"
IMG="$build/plugins/image/.libs/nbdkit-image-plugin.so"
[ -x "$SW" ] || { echo "build $SW first (make -C $build)" >&2; exit 1; }
[ -f "$CO" ] && [ -f "$IMG" ] || { echo "build the filter and plugin first" >&2; exit 1; }

. "$top/common/stop-server.sh"
. "$top/bench/median.sh"

W=$(mktemp -d "${WORKDIR:-/var/tmp}/smallwrite.XXXXXX")
pids=()
loopdev=
cleanup ()
{
  stop_pids "${pids[@]}" || true
  [ -n "$loopdev" ] && losetup -d "$loopdev" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

SIZE=2G
# TARGETS= picks a subset; BASE_CO=FILE (an older build's coalesce
# filter) adds icb-none and icb-wb, the same rows with that filter.
read -r -a targets <<<"${TARGETS:-ic-none i-none ic-wb i-wb file file-none memory qnbd-none}"
[ -n "${BASE_CO:-}" ] && targets+=(icb-none icb-wb)
start ()
{
  local t=$1 s="$W/$1.sock"
  truncate -s $SIZE "$W/$t.img"
  case $t in
  ic-none) nbdkit -U "$s" -P "$W/$t.pid" --filter="$CO" "$IMG" file="$W/$t.img" cache=none ;;
  i-none) nbdkit -U "$s" -P "$W/$t.pid" "$IMG" file="$W/$t.img" cache=none ;;
  icb-none) nbdkit -U "$s" -P "$W/$t.pid" --filter="$BASE_CO" "$IMG" file="$W/$t.img" cache=none ;;
  icb-wb) nbdkit -U "$s" -P "$W/$t.pid" --filter="$BASE_CO" "$IMG" file="$W/$t.img" ;;
  ic-wb) nbdkit -U "$s" -P "$W/$t.pid" --filter="$CO" "$IMG" file="$W/$t.img" ;;
  i-wb) nbdkit -U "$s" -P "$W/$t.pid" "$IMG" file="$W/$t.img" ;;
  file) nbdkit -U "$s" -P "$W/$t.pid" file "$W/$t.img" ;;
  file-none) nbdkit -U "$s" -P "$W/$t.pid" file "$W/$t.img" cache=none ;;
  memory) nbdkit -U "$s" -P "$W/$t.pid" memory $SIZE ;;
  qnbd-none) qemu-nbd --fork --pid-file="$W/$t.pid" --socket="$s" -f raw \
               --persistent --shared=8 \
               --cache=none --aio=native "$W/$t.img" ;;
  esac
  local i
  for ((i = 0; i < 50; i++)); do [ -s "$W/$t.pid" ] && [ -S "$s" ] && break; sleep 0.1; done
  pids+=("$(cat "$W/$t.pid")")
}
for t in "${targets[@]}"; do start "$t"; done
truncate -s $SIZE "$W/loop.img"
if loopdev=$(losetup -f --show "$W/loop.img" 2>/dev/null); then
  targets+=(loop)
else
  loopdev=
  echo "note: no loop device (need root): dd rows left out" >&2
fi

# run TARGET CASE ROUND -> "mb_s lat_us"
run ()
{
  local t=$1 c=$2 r=$3 off=$(( $3 * 256 * 1024 * 1024 ))
  if [ "$t" = loop ]; then
    local out bytes secs n bs flags
    case $c in
    A) n=1000 bs=512 flags="oflag=direct conv=fsync" ;;
    B) n=1000 bs=512 flags="oflag=direct,dsync" ;;
    C) n=1 bs=100M flags="oflag=direct conv=fsync" ;;
    D) n=500 bs=512 flags="oflag=direct,dsync" ;;
    esac
    # The source is a file read once into the page cache, so only the
    # writes are timed; seek is in units of bs.
    if [ "$c" = C ]; then
      out=$(dd if="$W/src100" of="$loopdev" bs=100M count=1 \
              seek=$((r + 1)) $flags 2>&1)
    else
      out=$(dd if="$W/src512k" of="$loopdev" bs=512 count="$n" \
              seek=$((off / 512)) $flags 2>&1)
    fi
    bytes=$(echo "$out" | sed -n -E 's/^([0-9]+) bytes.*/\1/p')
    secs=$(echo "$out" | sed -n -E 's/.*copied, ([0-9.e-]+) s,.*/\1/p')
    awk -v b="$bytes" -v s="$secs" -v n="$n" \
      'BEGIN { printf "%.2f %.1f\n", b / s / 1e6, s / n * 1e6 }'
    return
  fi
  local args
  case $c in
  A) args=(-n 1000 -s 512 -p 5) ;;
  B) args=(-n 1000 -s 512 -p 3 --fua) ;;
  C) args=(-n 1 -s 100M -p 3) ;;
  D) args=(-n 500 -s 512 -p 3 --flush-each) ;;
  esac
  "$SW" "${args[@]}" -o $off "nbd+unix:///?socket=$W/$t.sock" |
    sed -n -E 's/^RESULT mb_s=([0-9.]+) lat_us=([0-9.]+).*/\1 \2/p'
}

head -c 100M /dev/urandom >"$W/src100"
head -c 512000 /dev/urandom >"$W/src512k"
echo "# $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), rounds=$ROUNDS"
for ((r = 0; r < ROUNDS; r++)); do
  for c in A B C D; do
    for t in "${targets[@]}"; do
      echo "$c $t $r $(run "$t" "$c" "$r")"
    done
  done
done >"$W/raw"
cat "$W/raw" | sed 's/^/# raw: /'

get () { awk -v c="$1" -v t="$2" -v f="$3" '$1 == c && $2 == t { print $f }' "$W/raw" | median; }

printf "\n%-10s | %-22s | %-22s | %-10s | %-22s\n" target "A 512B QD1 +flush" "B 512B QD1 FUA" "C 100M +flush" "D 512B QD1 flush each"
printf "%-10s | %-22s | %-22s | %-10s | %-22s\n" "" "MB/s (us/write)" "MB/s (us/write)" "MB/s" "MB/s (us/write)"
for t in "${targets[@]}"; do
  printf "%-10s | %8s (%8s)    | %8s (%8s)    | %8s   | %8s (%8s)\n" "$t" \
    "$(get A $t 4)" "$(get A $t 5)" "$(get B $t 4)" "$(get B $t 5)" "$(get C $t 4)" \
    "$(get D $t 4)" "$(get D $t 5)"
done
ratio () { awk -v a="$(get "$1" "$2" 4)" -v b="$(get "$1" "$3" 4)" 'BEGIN { printf "%.2f", a / b }'; }
echo
echo "A: ic-none / qnbd-none = $(ratio A ic-none qnbd-none)  (target >= 2.5)"
echo "A: ic-none / memory    = $(ratio A ic-none memory)  (target >= 0.9)"
echo "B: ic-none / i-none    = $(ratio B ic-none i-none)  (target >= 1, no slower)"
echo "C: ic-none / i-none    = $(ratio C ic-none i-none)"
echo "A: ic-wb / i-wb        = $(ratio A ic-wb i-wb)"
echo "D: ic-wb / i-wb        = $(ratio D ic-wb i-wb)  (target >= 0.91: within 1.1x)"
echo "D: ic-none / i-none    = $(ratio D ic-none i-none)  (target >= 0.91: within 1.1x)"
