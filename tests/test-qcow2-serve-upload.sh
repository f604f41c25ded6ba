#!/usr/bin/env bash
# image plugin, qcow2 writable: real uploads of a realistic sample
# (bench/make-sample.sh: scattered data extents, allocated zero runs,
# holes) into a fresh qcow2 made by us (create=true: linear layout) and
# by qemu-img create (given the linear layout at open), with qemu-img
# convert -n -W, nbdcopy and
# an imageio-like client (bench/imageio-client: 4 connections each
# writing its own 128 MiB regions in 8 MiB writes, one flush each),
# with and without the coalesce, zerodetect and discard filters.  Each
# target must equal the source (qemu-img compare), pass qemu-img check
# with no leaks, and have no inversion: in guest order, no allocated
# extent of `qemu-img map` starts in the file below the end of the
# previous one.  Timings are printed (indicative only),
# with our raw target and qemu-nbd on a qcow2 one for comparison.
#
# SAMPLE_SIZE=N overrides the sample's size (default 512M).
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
require nbdcopy
require_filter_version
IMAGEIO=$abs_top_builddir/bench/imageio-client
[ -x "$IMAGEIO" ] || fail "$IMAGEIO not built"
cd "$T"

size=${SAMPLE_SIZE:-512M}
SIZE=$size DATA_PCT=20 ZERO_PCT=4 SEED=7 BUILD=$abs_top_builddir \
  "$abs_top_srcdir/bench/make-sample.sh" src.img >/dev/null
bytes=$(stat -c %s src.img)
filters=(--filter="$(filter_so coalesce)" --filter="$(filter_so zerodetect)"
         --filter="$(filter_so discard)")

# The number of inversions in IMAGE's host layout.
inversions ()
{
  "$QEMU_IMG" map -f qcow2 --output=json "$1" | /usr/bin/python3 -c '
import json, sys
prev_end, inv, n = None, 0, 0
for e in json.load(sys.stdin):
    if not e.get("data") or "offset" not in e:
        continue
    n += 1
    if prev_end is not None and e["offset"] < prev_end:
        inv += 1
    prev_end = e["offset"] + e["length"]
print(inv, n)'
}

secs () { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# upload CLIENT URI
upload ()
{
  case $1 in
    convert) "$QEMU_IMG" convert -n -W -f raw -O raw src.img "$2" ;;
    nbdcopy) nbdcopy --flush src.img "$2" ;;
    imageio) "$IMAGEIO" -c 4 src.img "$2" ;;
  esac
}

n=0
for target in ours qemu; do
  for client in convert nbdcopy imageio; do
    for stack in plain filters; do
      n=$((n + 1))
      name=$target-$client-$stack
      dst=$T/$name.qcow2
      args=()
      [ $stack = filters ] && args=("${filters[@]}")
      if [ $target = ours ]; then
        args+=("$IMAGE_PLUGIN" file="$dst" format=qcow2 create=true size=$bytes)
      else
        "$QEMU_IMG" create -q -f qcow2 "$dst" $bytes
        args+=("$IMAGE_PLUGIN" file="$dst")
      fi
      # The vdsm-like stack runs with cache=none, as imageio asks.
      [ $stack = filters ] && args+=(cache=none)
      start_nbdkit "$name" "${args[@]}"
      t0=$(now)
      upload $client "$(uri "$name")" || fail "$name: the upload failed"
      t1=$(now)
      stop_nbdkit "$name"
      "$QEMU_IMG" compare -q -f raw -F qcow2 src.img "$dst" ||
        fail "$name: the target differs from the source"
      out=$("$QEMU_IMG" check -f qcow2 "$dst" 2>&1) ||
        fail "$name: qemu-img check: $out"
      ! grep -qi leak <<<"$out" || fail "$name: leaks: $out"
      read -r inv ext < <(inversions "$dst")
      [ "$inv" -eq 0 ] || fail "$name: $inv inversions in $ext extents"
      echo "$name: $(secs $t0 $t1) s, identical, clean, $inv inversions in $ext extents"
      rm -f "$dst"
    done
  done
done

# For comparison (not asserted beyond correctness): our raw target and
# qemu-nbd on a qcow2 target, with the imageio client.
start_nbdkit raw "$IMAGE_PLUGIN" file="$T/raw.img" create=true size=$bytes
t0=$(now); upload imageio "$(uri raw)"; t1=$(now)
stop_nbdkit raw
cmp src.img raw.img || fail "raw: the target differs from the source"
echo "raw (ours) imageio: $(secs $t0 $t1) s"
rm -f raw.img
"$QEMU_IMG" create -q -f qcow2 qnbd.qcow2 $bytes
start_qemu_nbd qnbd -f qcow2 --cache=none --aio=native --discard=unmap \
  --detect-zeroes=unmap -e 8 qnbd.qcow2
for ((i = 0; i < 50; i++)); do [ -S "$(sock qnbd)" ] && break; sleep 0.1; done
t0=$(now); upload imageio "$(uri qnbd)"; t1=$(now)
stop_pidfile "$T/qnbd.pid"
"$QEMU_IMG" compare -q -f raw -F qcow2 src.img qnbd.qcow2 ||
  fail "qemu-nbd: the target differs from the source"
echo "qcow2 (qemu-nbd) imageio: $(secs $t0 $t1) s, $(inversions qnbd.qcow2 | awk '{print $1}') inversions"

echo "qcow2 serve upload: $n uploads, identical and clean, no inversion in ours"
