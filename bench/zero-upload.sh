#!/usr/bin/env bash
# Zero-detection upload benchmark.  A sample image with allocated
# zero-filled runs (as real guest images have) is uploaded with
#   qemu-img convert -n -W -S 0 -f raw -O raw SAMPLE nbd+unix://...
# (-S 0: qemu-img does no zero detection of its own and sends every
# zero byte as data, holes included) into a fresh sparse raw target
# served by
#   zd-off     our image plugin + zerodetect=off    (the A/B baseline)
#   zd-on      our image plugin + zerodetect=on     (zeroes stay allocated)
#   zd-unmap   our image plugin + zerodetect=unmap  (zeroes become holes)
#   qnbd-off   qemu-nbd -f raw                      (its baseline)
#   qnbd-on    qemu-nbd -f raw --detect-zeroes=on
#   qnbd-unmap qemu-nbd -f raw --detect-zeroes=unmap --discard=unmap
# Each upload is timed (client wall time, including its final flush) and
# verified with `qemu-img compare`; then the target's allocated size is
# measured and compared with the sample's non-zero data, counted in 4K
# file-system blocks (a block with any non-zero byte must be stored).
# Each configuration runs RUNS times round-robin; medians are reported,
# with time ratios against zd-off and against the qemu-nbd counterpart.
#
#   BUILD=/tmp/build bench/zero-upload.sh
#
# Environment (all optional):
#   SIZE=2G DATA_PCT=20 ZERO_PCT=15 SEED=1   the sample (bench/make-sample.sh)
#   SAMPLE=FILE        upload this raw image instead
#   DENSE=1            instead of make-sample's layout, a fully allocated
#                      sample of SIZE (default 512M) where zero runs of
#                      16K..1M lie between random data runs with no hole
#                      between them, so qemu-img sends them inside its
#                      data requests: whole-request detection (qemu's,
#                      or GRANULARITY=0) cannot see them
#   RUNS=3             runs per configuration (median reported)
#   GRANULARITY=64K    zerodetect-granularity for the zd-* targets
#   CONFIGS="zd-off zd-on zd-unmap qnbd-off qnbd-on qnbd-unmap"
#   BUILD=./build      build dir with the image plugin and zerodetect filter
#   TMPDIR=/var/tmp    scratch space (needs the sample plus one target)
#
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export PATH LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
runs=${RUNS:-3}
gran=${GRANULARITY:-64K}
configs=${CONFIGS:-zd-off zd-on zd-unmap qnbd-off qnbd-on qnbd-unmap}
build=${BUILD:-$top/build}

say () { echo "zero-upload: $*" >&2; }
die () { echo "zero-upload: ERROR: $*" >&2; exit 1; }

build=$(cd "$build" 2>/dev/null && pwd) || die "BUILD=$build: no such directory"
plugin=$build/plugins/image/.libs/nbdkit-image-plugin.so
filter=$build/filters/zerodetect/.libs/nbdkit-zerodetect-filter.so
[ -f "$plugin" ] || die "$plugin not found: build first (scripts/setup.sh $build)"
[ -f "$filter" ] || die "$filter not found: build first"
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "RUNS=$runs: expected a positive integer"
gran_bytes=$(numfmt --from=iec "$gran") || die "GRANULARITY=$gran: not a size"
for p in nbdkit qemu-img qemu-nbd python3; do
  command -v "$p" >/dev/null || die "$p is not installed"
done

tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/nbdstack-zero-upload.XXXXXX")
. "$here/server-lib.sh"

# ---- the sample
if [ -n "${SAMPLE:-}" ]; then
  sample=$(realpath "$SAMPLE")
  [ -f "$sample" ] || die "SAMPLE=$SAMPLE: no such file"
elif [ -n "${DENSE:-}" ]; then
  sample=$tmp/sample.img
  dense_bytes=$(numfmt --from=iec "${SIZE:-512M}") || die "SIZE=$SIZE: not a size"
  python3 - "$sample" "$dense_bytes" "${SEED:-1}" <<'EOF' || die "cannot create the dense sample"
import os, random, sys
path, size, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(seed)
with open(path, "wb") as f:
    off, zero = 0, False
    while off < size:
        n = min(size - off, r.randrange(4, 257) * 4096)
        f.write(bytes(n) if zero else r.randbytes(n))
        off += n
        zero = not zero
    f.flush()
    os.fsync(f.fileno())
EOF
  say "dense sample: $((dense_bytes >> 20)) MiB, alternating random data and zero runs, fully allocated"
else
  sample=$tmp/sample.img
  SIZE=${SIZE:-2G} DATA_PCT=${DATA_PCT:-20} ZERO_PCT=${ZERO_PCT:-15} \
    BUILD=$build bash "$here/make-sample.sh" "$sample" >&2 ||
    die "cannot create the sample"
fi
vsize=$(stat -c %s "$sample")
salloc=$(($(stat -c %b "$sample") * 512))
# Non-zero data of the sample in 4K blocks (only the allocated extents
# are read).
nonzero=$(python3 - "$sample" 4096 <<'EOF'
import os, sys
path, g = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
zero = bytes(g)
total, off = 0, 0
while off < size:
    try:
        off = os.lseek(fd, off, os.SEEK_DATA)
    except OSError:
        break
    end = os.lseek(fd, off, os.SEEK_HOLE)
    off -= off % g
    while off < end:
        if os.pread(fd, g, off) != zero[:min(g, size - off)]:
            total += min(g, size - off)
        off += g
print(total)
EOF
)
say "sample $sample: virtual $((vsize >> 20)) MiB, allocated $((salloc >> 20)) MiB, non-zero data $((nonzero >> 20)) MiB (in 4K blocks)"

target=$tmp/target.img
start_server ()               # CONFIG
{
  local i
  rm -f "$sock" "$pidfile" "$target"
  truncate -s "$vsize" "$target"
  : >"$log"
  case $1 in
    zd-*)
      nbdkit --log=stderr -U "$sock" -P "$pidfile" --filter="$filter" \
        "$plugin" format=raw file="$target" \
        zerodetect="${1#zd-}" zerodetect-granularity="$gran" 2>>"$log" ;;
    qnbd-off)
      qemu-nbd --fork --pid-file="$pidfile" --socket="$sock" -f raw \
        --cache=writeback "$target" 2>>"$log" ;;
    qnbd-on)
      qemu-nbd --fork --pid-file="$pidfile" --socket="$sock" -f raw \
        --cache=writeback --detect-zeroes=on "$target" 2>>"$log" ;;
    qnbd-unmap)
      qemu-nbd --fork --pid-file="$pidfile" --socket="$sock" -f raw \
        --cache=writeback --discard=unmap --detect-zeroes=unmap \
        "$target" 2>>"$log" ;;
    *) die "unknown config $1" ;;
  esac
  for ((i = 0; i < 200; i++)); do
    [ -s "$pidfile" ] && [ -S "$sock" ] && return 0
    sleep 0.05
  done
  die "$1: server did not start"
}

results=$tmp/results
: >"$results"
for ((run = 1; run <= runs; run++)); do
  for c in $configs; do
    start_server "$c"
    sync
    t0=$(date +%s.%N)
    qemu-img convert -n -W -S 0 -f raw -O raw "$sample" \
      "nbd+unix:///?socket=$sock" || die "$c: upload failed"
    t1=$(date +%s.%N)
    stop_server
    qemu-img compare -q -f raw -F raw "$sample" "$target" ||
      die "$c run $run: target differs from the sample"
    alloc=$(($(stat -c %b "$target") * 512))
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    printf '%s\t%s\t%s\t%s\n' "$c" "$run" "$secs" "$alloc" >>"$results"
    say "run $run $c: $secs s, allocated $((alloc >> 20)) MiB"
  done
done

# ---- table of medians
column_median ()              # CONFIG COLUMN
{
  awk -F'\t' -v c="$1" -v k="$2" '$1 == c { print $k }' "$results" | median
}
printf '\nsample: virtual %d MiB, allocated %d MiB, non-zero data %d MiB (4K blocks); zerodetect-granularity=%s; %d runs, medians\n' \
  $((vsize >> 20)) $((salloc >> 20)) $((nonzero >> 20)) "$gran" "$runs"
printf '%-11s %8s %11s %11s %13s %13s\n' config "time s" "vs zd-off" "vs qemu-nbd" "alloc MiB" "alloc/nonzero"
base=$(column_median zd-off 3 2>/dev/null || echo)
for c in $configs; do
  t=$(column_median "$c" 3)
  a=$(column_median "$c" 4)
  case $c in
    zd-off) peer=qnbd-off ;;
    zd-on) peer=qnbd-on ;;
    zd-unmap) peer=qnbd-unmap ;;
    *) peer= ;;
  esac
  vs_off=-; vs_peer=-
  case " $configs " in *" zd-off "*) vs_off=$(awk -v a="$t" -v b="$base" 'BEGIN { printf "%.2f", a / b }') ;; esac
  if [ -n "$peer" ] && case " $configs " in *" $peer "*) true ;; *) false ;; esac; then
    vs_peer=$(awk -v a="$t" -v b="$(column_median "$peer" 3)" 'BEGIN { printf "%.2f", a / b }')
  fi
  printf '%-11s %8.2f %11s %11s %13d %13.2f\n' "$c" "$t" "$vs_off" "$vs_peer" \
    $((${a%.*} >> 20)) "$(awk -v a="$a" -v n="$nonzero" 'BEGIN { printf "%.2f", a / n }')"
done
