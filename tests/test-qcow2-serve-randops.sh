#!/usr/bin/env bash
# image plugin, qcow2 writable: differential random operations (randops)
# over a matrix of images: cluster sizes 512 B, 64K and 2M; refcount
# widths 1, 16 and 64; extended L2 on and off; version 2 (compat=0.10)
# and 3; over a qcow2 and a raw backing file (the overlay written);
# a tiny L2 cache; images made by qemu-img (compact layout) and by
# create=true (linear layout); cache=none.  Most cases run 4 connections
# on interleaved stripes smaller than a cluster, so they share clusters
# but never bytes.  After each: randops' own compare, then the server is
# stopped cleanly and the image must equal randops' verified contents
# (qemu-img compare) and pass qemu-img check with no leaks.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
require qemu-img
[ -x "$RANDOPS" ] || fail "$RANDOPS not built"
cd "$T"
n=0

# Some data to start from, so that writes meet old clusters and holes.
seed_data ()
{
  "$QEMU_IO" -f qcow2 -c 'write -P 0x11 1M 3M' -c 'write -P 0x22 9M 100k' \
    -c 'write -z 12M 1M' "$1" >/dev/null
}

# case NAME IMAGE PLUGIN-PARAMS... -- RANDOPS-ARGS...
case_ ()
{
  local name=$1 img=$2 params=() out
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do params+=("$1"); shift; done
  shift
  n=$((n + 1))
  start_fg "$name" "$IMAGE_PLUGIN" file="$T/$img" "${params[@]}"
  nbdsh -u "$(uri "$name")" -c 'assert not h.is_read_only()' ||
    fail "$name: the export is read-only"
  out=$("$RANDOPS" --seed=$n "$@" --dump="$T/$name.ref" "$(uri "$name")") ||
    fail "$name: randops found a difference: $out"
  echo "$name: $out"
  stop_nbdkit "$name"
  ! grep -q "error" "$(logfile "$name")" ||
    fail "$name: the server logged an error: $(cat "$(logfile "$name")")"
  "$QEMU_IMG" compare -q -f raw -F qcow2 "$name.ref" "$img" ||
    fail "$name: the image differs from randops' verified contents"
  out=$("$QEMU_IMG" check -f qcow2 "$img" 2>&1) ||
    fail "$name: qemu-img check: $out"
  ! grep -qi "leak" <<<"$out" || fail "$name: leaks after a clean shutdown: $out"
  rm -f "$name.ref"
}

conc=(-c 4 --interleave --stripe=4096)
ops=(-n 1500 --max-len=300000)

# Cluster sizes, qemu-made (compact).
for cs in 512 65536 2M; do
  "$QEMU_IMG" create -q -f qcow2 -o cluster_size=$cs c$cs.qcow2 24M
  seed_data c$cs.qcow2
  case_ c$cs c$cs.qcow2 -- "${conc[@]}" "${ops[@]}" --check-extents
done
# Refcount widths (1 and 64 on 4K clusters: many refcount blocks).
for rb in 1 16 64; do
  "$QEMU_IMG" create -q -f qcow2 -o cluster_size=4k,refcount_bits=$rb rc$rb.qcow2 24M
  seed_data rc$rb.qcow2
  case_ rc$rb rc$rb.qcow2 -- "${conc[@]}" "${ops[@]}"
done
# Extended L2 (qemu's, with subclusters written by qemu first).
"$QEMU_IMG" create -q -f qcow2 -o extended_l2=on,cluster_size=64k extl2.qcow2 24M
seed_data extl2.qcow2
"$QEMU_IO" -f qcow2 -c 'write -P 0x33 5000 3000' extl2.qcow2 >/dev/null
case_ extl2 extl2.qcow2 -- "${conc[@]}" "${ops[@]}" --check-extents
# Version 2.
"$QEMU_IMG" create -q -f qcow2 -o compat=0.10,cluster_size=4k v2.qcow2 24M
seed_data v2.qcow2
case_ v2 v2.qcow2 -- "${conc[@]}" "${ops[@]}"
# Over a qcow2 backing file and over a raw one: the overlay is written,
# the backing files never.
"$QEMU_IMG" create -q -f qcow2 base.qcow2 24M
seed_data base.qcow2
"$QEMU_IMG" create -q -f qcow2 -b base.qcow2 -F qcow2 -o cluster_size=16k ov.qcow2
"$QEMU_IO" -f qcow2 -c 'write -P 0x44 2M 64k' ov.qcow2 >/dev/null
sum=$(md5sum <base.qcow2)
case_ backing ov.qcow2 backing=follow -- "${conc[@]}" "${ops[@]}" --check-extents
[ "$(md5sum <base.qcow2)" = "$sum" ] || fail "backing: the backing file changed"
head -c 24M /dev/urandom >base.raw
"$QEMU_IMG" create -q -f qcow2 -b base.raw -F raw -o compat=0.10 ovraw.qcow2
case_ backing-raw-v2 ovraw.qcow2 backing=follow -- "${conc[@]}" "${ops[@]}"
# A tiny L2 cache: tables evicted and reloaded (dirty ones waited for).
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512 l2small.qcow2 24M
seed_data l2small.qcow2
case_ l2small l2small.qcow2 l2-cache-size=1 -- "${conc[@]}" "${ops[@]}"
# Created by us (linear layout), several geometries, one preallocated.
for g in "lin64k" "lin512 cluster-size=512" "lin2m cluster-size=2M" \
         "linext extended-l2=on cluster-size=32k" \
         "linpre preallocation=metadata cluster-size=4k"; do
  set -- $g
  name=$1; shift
  case_ $name $name.qcow2 format=qcow2 create=true size=24M "$@" -- \
    "${conc[@]}" "${ops[@]}" --zero-runs
  "$QEMU_IMG" info $name.qcow2 | grep -q "compat: 1.1" ||
    fail "$name: not a version 3 image"
done
# cache=none: a qemu-made image with small clusters (every metadata
# write unaligned for O_DIRECT) and one of ours.
"$QEMU_IMG" create -q -f qcow2 -o cluster_size=512 dio512.qcow2 24M
seed_data dio512.qcow2
case_ dio512 dio512.qcow2 cache=none -- "${conc[@]}" "${ops[@]}"
case_ diolin dio-lin.qcow2 cache=none format=qcow2 create=true size=24M -- \
  "${conc[@]}" "${ops[@]}"
# One connection, unaligned everything, FUA and fast zero included.
"$QEMU_IMG" create -q -f qcow2 one.qcow2 24M
case_ one one.qcow2 -- -n 1500 --max-len=200000 --zero-runs

echo "qcow2 serve randops: $n configurations, all equal and clean"
