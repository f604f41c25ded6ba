#!/usr/bin/env bash
# nbdstack-nbd: an upload pipeline with only the server swapped.  The
# server is started exactly as oVirt imageio starts $QEMU_NBD for an
# upload, once with QEMU_NBD=qemu-nbd and once with
# QEMU_NBD=nbdstack-nbd; the image is uploaded with qemu-img convert
# -n -W and with nbdcopy, into a sparse target and into one full of
# garbage (every hole must then really be zeroed); imageio then stops
# the server with SIGTERM.  Each target must be identical to the source
# and the server must exit 0.
#
# qcow2 targets: the same pipeline runs against qemu-nbd and against
# nbdstack-nbd, and must give an identical, clean image (qemu-img check)
# through both.
# SPDX-License-Identifier: BSD-3-Clause
. ./functions.sh
. "$srcdir/nbd-functions.sh"
require nbdcopy
require_filter_version

size=$((48 * 1024 * 1024))
src=$T/src.img
truncate -s $size "$src"
w () { dd if=/dev/urandom of="$src" bs=512 seek="$1" count="$2" conv=notrunc status=none; }
w 0 8; w 100 1; w 2048 4096; w 20001 77; w 40000 12000; w $((size / 512 - 1)) 1
dd if=/dev/zero of="$src" bs=1M seek=30 count=3 conv=notrunc status=none

# imageio's command line (ovirt_imageio/_internal/qemu_nbd.py) for a
# writable image of format FMT at PATH on socket SOCK, one a line.
imageio_args ()
{
  local fmt=$1 path=$2 sock=$3
  printf '%s\n' --export-name= --persistent --shared=8 --socket="$sock" \
    --cache=none --aio=native --discard=unmap --detect-zeroes=unmap \
    --allocation-depth
  printf 'json:{"driver": "%s", "file": {"driver": "file", "filename": "%s"}}\n' "$fmt" "$path"
}

# upload KIND FMT CLIENT TARGET: one upload through one server.
upload ()
{
  local kind=$1 fmt=$2 client=$3 dst=$4 name sock
  name=up-$kind-$fmt-$client-$(basename "${dst%.*}")
  sock=$T/$name.sock
  mapfile -t args < <(imageio_args "$fmt" "$dst" "$sock")
  start_fg "$kind" "$name" "${args[@]}"
  case $client in
    # The export is the guest's view whatever the format: raw.
    convert) "$QEMU_IMG" convert -n -W -f raw -O raw "$src" "nbd+unix:///?socket=$sock" ;;
    nbdcopy) nbdcopy --flush "$src" "nbd+unix:///?socket=$sock" ;;
  esac || fail "$name: the upload failed"
  stop_fg "$name"
  [ "$exit_status" = 0 ] || fail "$name: server exit status $exit_status"
  if [ "$fmt" = qcow2 ]; then
    "$QEMU_IMG" check -q -f qcow2 "$dst" || fail "$name: the qcow2 target is not clean"
    "$QEMU_IMG" compare -q -f raw -F qcow2 "$src" "$dst" || fail "$name: the target differs from the source"
  else
    "$QEMU_IMG" compare -q -f raw -F raw "$src" "$dst" || fail "$name: the target differs from the source"
    [ "$(stat -c %s "$dst")" -eq $size ] || fail "$name: the target's size changed"
  fi
}

for client in convert nbdcopy; do
  for kind in qemu ours; do
    # raw: sparse, and full of garbage.
    dst=$T/$kind-$client-sparse.img
    truncate -s $size "$dst"
    upload $kind raw $client "$dst"
    used=$(( $(stat -c %b "$dst") * 512 ))
    [ $used -lt $((24 * 1024 * 1024)) ] || fail "$kind/$client: the sparse target is not sparse ($used bytes)"
    dst=$T/$kind-$client-garbage.img
    head -c $size /dev/urandom >"$dst"
    upload $kind raw $client "$dst"
  done
  cmp "$T/qemu-$client-sparse.img" "$T/ours-$client-sparse.img" ||
    fail "$client: qemu-nbd's and nbdstack-nbd's targets differ"
  echo "raw upload with $client: identical through qemu-nbd and nbdstack-nbd"

  # qcow2.
  dst=$T/qemu-$client.qcow2
  "$QEMU_IMG" create -q -f qcow2 "$dst" $size
  upload qemu qcow2 $client "$dst"
  dst=$T/ours-$client.qcow2
  "$QEMU_IMG" create -q -f qcow2 "$dst" $size
  upload ours qcow2 $client "$dst"
  echo "qcow2 upload with $client: identical and clean through both"
done
